"""``extractor labeling serve | worker | add-user | migrate | revoke-token | new-secret-key |
rotate-secrets``: the labeling service's commands."""

from __future__ import annotations

import argparse
import json
import logging
import signal
import sys
import threading
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from extractor.cli_errors import CommandFailed, explain, one_line, run
from extractor.config import LabelingSettings, SettingsError
from extractor.labeling.errors import LabelingError

if TYPE_CHECKING:
    from extractor.server.intake import IntakeLimits

log = logging.getLogger(__name__)

DEFAULT_BIND = "127.0.0.1:8100"


def parser() -> argparse.ArgumentParser:
    """The argument parser of ``extractor labeling``."""
    root = argparse.ArgumentParser(
        prog="extractor labeling", description="The labeling service (GraphQL API and job workers)."
    )
    commands = root.add_subparsers(dest="command", required=True)

    serve = commands.add_parser("serve", help="run the GraphQL server under gunicorn")
    serve.add_argument("--bind", default=DEFAULT_BIND, help=f"HOST:PORT (default {DEFAULT_BIND})")
    serve.add_argument("--workers", type=int, default=1, help="gunicorn worker processes")
    serve.add_argument("--threads", type=int, default=4, help="request threads per process")

    worker = commands.add_parser("worker", help="run job workers against the shared database")
    worker.add_argument("--concurrency", type=int, default=2, help="jobs run at once")
    worker.add_argument(
        "--metrics-bind",
        default=None,
        metavar="HOST:PORT",
        help="serve this worker's Prometheus metrics at http://HOST:PORT/metrics (default: none)",
    )

    add_user = commands.add_parser("add-user", help="create a user (and team) and print a token")
    add_user.add_argument("email")
    add_user.add_argument("--team", default=None, help="team to join (created if new)")

    commands.add_parser("migrate", help="bring the database schema up to date")

    revoke = commands.add_parser(
        "revoke-token", help="revoke a token (read from stdin with -) or every token of a user"
    )
    revoke.add_argument(
        "token",
        nargs="?",
        default=None,
        help="the token, or - to read it from stdin (a token starting with - goes after --)",
    )
    revoke.add_argument("--user", default=None, help="revoke every token of this email instead")

    commands.add_parser("new-secret-key", help="print a new key for SECRET_KEYS")
    commands.add_parser(
        "rotate-secrets", help="re-encrypt every stored secret under the first SECRET_KEYS key"
    )
    return root


def main(argv: Sequence[str] | None = None, *, debug: bool = False) -> int:
    """Run one labeling command; returns the process exit status (``cli_errors``: a failure
    in one line, ``debug`` its traceback)."""
    args = parser().parse_args(list(sys.argv[1:] if argv is None else argv))
    return run(f"extractor labeling {args.command}", lambda: _run(args), debug=debug)


def _run(args: argparse.Namespace) -> int:
    if not logging.getLogger().handlers:
        logging.basicConfig(
            level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
        )
    # Alembic narrates every plugin and step at INFO; a migration is news only when it fails.
    logging.getLogger("alembic").setLevel(logging.WARNING)
    try:
        if args.command == "new-secret-key":  # touches no database
            from extractor.labeling.credentials import new_key

            print(new_key())
            return 0
        settings = LabelingSettings.load()
        if args.command == "migrate" or (settings.auto_migrate and args.command != "migrate"):
            from extractor.labeling.db import migrate

            migrate(settings.resolved_database_url)
        if args.command == "migrate":
            return 0
        if args.command == "add-user":
            return add_user(settings, args.email, args.team)
        if args.command == "revoke-token":
            return revoke_token(settings, args.token, args.user)
        if args.command == "rotate-secrets":
            return rotate_secrets(settings)
        check_secrets(settings)  # before gunicorn forks: one clear error instead of N workers'
        if args.command == "worker":
            return run_workers(settings, args.concurrency, args.metrics_bind)
        return serve(settings, args.bind, args.workers, args.threads)
    except (LabelingError, SettingsError, ValueError) as exc:
        cause = exc.__cause__
        known = explain(cause) if cause is not None else None
        if known is not None:  # the database is down: its reason once, not SQLAlchemy's page
            raise known from None
        raise CommandFailed(one_line(f"{exc}" + (f" ({cause})" if cause else ""))) from None


def add_user(settings: LabelingSettings, email: str, team: str | None) -> int:
    """Print ``{"userId", "token", "teamId"}`` for a new token of ``email``."""
    from extractor.labeling.auth import add_user as create
    from extractor.labeling.db import Database

    db = Database(settings.resolved_database_url)
    try:
        print(json.dumps(create(db, email, team)))
    finally:
        db.dispose()
    return 0


def revoke_token(settings: LabelingSettings, token: str | None, email: str | None) -> int:
    """Print ``{"revoked": n}`` after revoking a token or all of a user's tokens.

    The token may come from stdin (``-``) so it stays out of the shell history and ``ps``.
    """
    from extractor.labeling.auth import revoke_tokens
    from extractor.labeling.db import Database

    if token == "-":
        token = sys.stdin.readline().strip()
    if (token is None) == (email is None) or token == "":
        raise ValueError("give a token (or - to read it from stdin) or --user EMAIL, not both")
    db = Database(settings.resolved_database_url)
    try:
        print(json.dumps({"revoked": revoke_tokens(db, token=token, email=email)}))
    finally:
        db.dispose()
    return 0


def check_secrets(settings: LabelingSettings) -> None:
    """Seal secrets stored in clear and check the keys open the rest (SettingsError if not)."""
    from extractor.labeling.credentials import load_secret_box, seal_stored_secrets
    from extractor.labeling.db import Database

    db = Database(settings.resolved_database_url)
    try:
        seal_stored_secrets(db, load_secret_box(settings))
    finally:
        db.dispose()


def rotate_secrets(settings: LabelingSettings) -> int:
    """Re-encrypt every stored secret under the first key; prints ``{"rotated": n}``."""
    from extractor.labeling.credentials import load_secret_box, rotate_stored_secrets
    from extractor.labeling.db import Database

    box = load_secret_box(settings, create=False)
    if box is None:
        raise SettingsError("rotate-secrets needs EXTRACTOR_LABELING_SECRET_KEYS (new key first)")
    db = Database(settings.resolved_database_url)
    try:
        print(json.dumps({"rotated": rotate_stored_secrets(db, box)}))
    finally:
        db.dispose()
    return 0


def run_workers(
    settings: LabelingSettings, concurrency: int, metrics_bind: str | None = None
) -> int:
    """Run ``concurrency`` worker threads until SIGTERM or SIGINT, then hand their jobs back."""
    from extractor.labeling.state import build_state

    if concurrency < 1:
        raise ValueError("--concurrency must be at least 1")
    state = build_state(settings, worker_threads=concurrency)
    if metrics_bind:
        from extractor.labeling.metrics import serve_worker_metrics

        serve_worker_metrics(metrics_bind, state.queue)
    stop = threading.Event()

    def request_stop(signum: int, _frame: Any) -> None:
        log.info("signal %d: stopping workers", signum)
        stop.set()

    signal.signal(signal.SIGTERM, request_stop)
    signal.signal(signal.SIGINT, request_stop)
    state.start_workers()
    try:
        stop.wait()
    finally:
        state.close()
    return 0


def serve(settings: LabelingSettings, bind: str, workers: int, threads: int) -> int:
    """Serve the GraphQL API under gunicorn; each worker process runs the embedded job threads."""
    # Before anything imports prometheus-client: the workers add up their numbers through it.
    from extractor.metrics_dir import prepare_multiprocess_dir, remove_multiprocess_dir

    metrics_dir = prepare_multiprocess_dir(None) if settings.metrics else None
    try:
        return _serve(settings, bind, workers, threads)
    finally:
        if metrics_dir is not None:
            remove_multiprocess_dir(metrics_dir)


def _serve(settings: LabelingSettings, bind: str, workers: int, threads: int) -> int:
    from extractor.labeling.app import create_labeling_app
    from extractor.server.application import serve as gunicorn_serve

    def factory() -> Any:
        return create_labeling_app(settings, start_workers=True)

    gunicorn_serve(
        factory, serve_options(settings, bind, workers, threads), graphql_intake_limits(settings)
    )
    return 0


def serve_options(
    settings: LabelingSettings, bind: str, workers: int, threads: int
) -> dict[str, Any]:
    """The gunicorn configuration of ``extractor labeling serve``."""
    return {
        "bind": bind,
        "workers": workers,
        "threads": threads,
        # gthread whose threads only see requests received whole: a slow client holds
        # no thread (extractor.server.buffering_worker).
        "worker_class": "extractor.server.buffering_worker.BufferingThreadWorker",
        # Uploads can be large and GraphQL calls are quick otherwise; job work happens in
        # background threads, never inside a request.
        "timeout": 120,
        # An idle kept-alive connection waits in the main loop, not in a thread: outlast the
        # clients' and proxies' idle limits so they close first.
        "keepalive": settings.keepalive_timeout,
        # A stopping worker lets a prediction call in flight end rather than send it twice.
        "graceful_timeout": int(max(30, settings.prediction_total_timeout + 10)),
        "accesslog": "-",
        "worker_exit": _release_jobs,
        "child_exit": _worker_exited,
    }


def graphql_intake_limits(settings: LabelingSettings) -> IntakeLimits:
    """How requests may arrive (deadlines, how many at once, how large), answered in the
    GraphQL error shape."""
    from extractor.server.intake import IntakeLimits

    def graphql_error(_status: int, code: str, message: str) -> bytes:
        from extractor.labeling.graphql_request import error_body

        name = "".join(part.capitalize() for part in code.split("_")) + "Error"
        return json.dumps(error_body(message, code.upper(), name)).encode()

    return IntakeLimits.of(
        settings, max_body_bytes=settings.max_upload_bytes, error_body=graphql_error
    )


def _worker_exited(_server: Any, worker: Any) -> None:
    """gunicorn hook: drop a dead worker's live gauges from the summed metrics."""
    from extractor.metrics import worker_exited

    worker_exited(worker.pid)


def _release_jobs(_server: Any, worker: Any) -> None:
    """gunicorn hook: a worker stopping gracefully hands its jobs back instead of letting
    their leases run out, so another process resumes them at once."""
    app = getattr(worker, "wsgi", None)
    state = getattr(app, "extensions", {}).get("labeling") if app is not None else None
    if state is not None:
        state.close()


if __name__ == "__main__":
    sys.exit(main())

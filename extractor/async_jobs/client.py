"""``extractor submit FILE`` and ``extractor jobs``: the asynchronous job API from a terminal.

``submit`` uploads a file as a job (``POST /v1/jobs``); with ``--wait`` it shows the job's state
until it ends (how long it has waited for a worker, then a bar and the time left) and writes
the result (``-o OUT``, else standard output) in ``--format``.
``jobs`` lists the server's jobs, newest first. The server is ``--server`` (else
``EXTRACTOR_URL``, else http://127.0.0.1:8000) and the secret ``--secret`` (else
``EXTRACTOR_SECRET``, the server's own variable). A failure is ``CommandFailed`` or the httpx
error itself, said in one line by ``extractor.cli_errors``.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from extractor.cli_errors import INTERRUPTED, CommandFailed, refusal, server_url

if TYPE_CHECKING:  # imported when a command runs: `extractor --help` stays quick
    import httpx

DEFAULT_SERVER = "http://127.0.0.1:8000"
POLL_SECONDS = 1.0
CONNECT_SECONDS = 10.0
BAR_WIDTH = 30
ENDED = ("succeeded", "failed", "cancelled")


def add_commands(sub: Any) -> argparse.ArgumentParser:
    """Add ``submit`` and ``jobs`` to the ``extractor`` command's subparsers; ``submit``'s parser,
    to which the command line adds one flag per extraction option (as ``extract`` has) and
    ``option_fields``, which reads them back as a query string's text."""
    submit: argparse.ArgumentParser = sub.add_parser(
        "submit", help="upload FILE as an asynchronous job (POST /v1/jobs)"
    )
    submit.add_argument("file", type=Path)
    _connection_flags(submit)
    submit.add_argument("--wait", action="store_true",
                        help="show the job's progress until it ends, then write its result")  # fmt: skip
    submit.add_argument("-o", "--output", type=Path, default=None,
                        help="write the result here [default: standard output]")  # fmt: skip
    submit.add_argument("--callback-url", default=None,
                        help="POST the job here when it ends (signed, see the README)")  # fmt: skip
    submit.set_defaults(run=run_submit)
    jobs = sub.add_parser("jobs", help="list the server's asynchronous jobs, newest first")
    _connection_flags(jobs)
    jobs.add_argument("--status", default=None, help="only these statuses, comma-separated")
    jobs.add_argument("--limit", type=int, default=20, help="how many [default: 20, most 100]")
    jobs.set_defaults(run=run_jobs)
    return submit


def _connection_flags(parser: argparse.ArgumentParser) -> None:
    # --url as `extractor listen` and `extractor check URL` call it; --server, the first name
    parser.add_argument("--url", "--server", dest="server", default=None,
                        help=f"the extractor's URL [default: $EXTRACTOR_URL or {DEFAULT_SERVER}]")  # fmt: skip
    parser.add_argument("--secret", default=None,
                        help="sent as 'Authorization: Bearer <secret>' [default: $EXTRACTOR_SECRET]")  # fmt: skip


def _client(args: argparse.Namespace) -> httpx.Client:
    import httpx

    server = server_url(args.server or os.environ.get("EXTRACTOR_URL") or DEFAULT_SERVER)
    secret = args.secret or os.environ.get("EXTRACTOR_SECRET")
    headers = {"Authorization": f"Bearer {secret}"} if secret else {}
    # A server that is not there says so at once; one that works on a large upload may not.
    timeout = httpx.Timeout(300, connect=CONNECT_SECONDS)
    return httpx.Client(base_url=server.rstrip("/"), headers=headers, timeout=timeout)


def _checked(reply: httpx.Response, expected: int) -> httpx.Response:
    if reply.status_code != expected:
        raise CommandFailed(refusal(reply.status_code, reply.content))
    return reply


def run_submit(args: argparse.Namespace) -> int:
    """Upload, then (``--wait``) follow the job and write its result."""
    fields = args.option_fields(args)
    params: dict[str, str] = {name: value for name, value in fields.items() if value is not None}
    if args.callback_url:
        params["callback_url"] = args.callback_url
    with args.file.open("rb") as upload, _client(args) as client:
        files = {"upload": (args.file.name, upload)}
        job: dict[str, Any] = _checked(
            client.post("/v1/jobs", params=params, files=files), 202
        ).json()
        if not args.wait:
            print(job["id"])
            return 0
        try:
            job = follow(client, job, sys.stderr)
        except KeyboardInterrupt:
            raise CommandFailed(
                f"interrupted; job {job['id']} goes on (extractor jobs lists it)", INTERRUPTED
            ) from None
        if job["status"] != "succeeded":
            error = job.get("error") or {
                "code": job["status"],
                "message": f"the job was {job['status']}",
            }
            raise CommandFailed(f"job {job['status']}: {error['code']}: {error['message']}")
        result = _checked(client.get(f"/v1/jobs/{job['id']}/result"), 200)
        if args.output is not None:
            args.output.write_bytes(result.content)
        else:
            sys.stdout.buffer.write(result.content)
            sys.stdout.flush()
    return 0


def follow(client: httpx.Client, job: dict[str, Any], out: TextIO) -> dict[str, Any]:
    """Poll the job until it ends, showing its state on ``out``: one line redrawn in place on a
    terminal, a line per change of status or percent otherwise; the ended job."""
    terminal = out.isatty()
    progress = JobProgress(time.monotonic())
    shown: tuple[str, int] | None = None
    drawn = 0  # characters of the line on the terminal
    while True:
        now = time.monotonic()
        progress.saw(job, now)
        key = (job["status"], int(100 * float(job["progress"])))
        if terminal:
            line = progress.line(job, now)  # spaces over a longer line before it: no escapes
            out.write("\r" + line.ljust(drawn))
            drawn = len(line)
        elif key != shown:
            out.write(progress.line(job, now) + "\n")
        out.flush()
        shown = key
        if job["status"] in ENDED:
            if terminal:
                out.write("\n")
            return job
        time.sleep(POLL_SECONDS)
        job = _checked(client.get(f"/v1/jobs/{job['id']}"), 200).json()


class JobProgress:
    """A job's state in a line: how long it has been queued, then its bar and the time left,
    estimated from the server's own clock (``started_at`` to ``updated_at`` for the progress
    saved then), so the client's clock need not agree with the server's."""

    def __init__(self, now: float) -> None:
        self.since = now  # when this client first saw the job in its current status
        self.status = ""
        self.updated = ""  # the job's updated_at last seen, and when it was seen
        self.updated_seen = now

    def saw(self, job: dict[str, Any], now: float) -> None:
        if job["status"] != self.status:
            self.status, self.since = job["status"], now
        if job.get("updated_at") != self.updated:
            self.updated, self.updated_seen = job.get("updated_at") or "", now

    def line(self, job: dict[str, Any], now: float) -> str:
        done = float(job["progress"])
        filled = int(BAR_WIDTH * done)
        bar = f"[{'#' * filled}{'.' * (BAR_WIDTH - filled)}] {100 * done:3.0f}% {job['status']}"
        if job["status"] == "queued":
            return f"{bar}, waiting for a worker ({_duration(now - self.since)})"
        if job["status"] != "running":
            return bar
        left = self.left(job, done, now)
        if left is None:
            return f"{bar} for {_duration(now - self.since)}"
        return f"{bar}, about {_duration(left)} left"

    def left(self, job: dict[str, Any], done: float, now: float) -> float | None:
        """Seconds left at the pace of the work done so far; None before any progress."""
        started, updated = _instant(job.get("started_at")), _instant(job.get("updated_at"))
        if not 0 < done < 1 or started is None or updated is None or updated <= started:
            return None
        total = (updated - started) / done
        return max(0.0, total - (updated - started) - (now - self.updated_seen))


def _instant(text: str | None) -> float | None:
    if not text:
        return None
    try:
        return datetime.fromisoformat(text).timestamp()
    except ValueError:
        return None


def _duration(seconds: float) -> str:
    whole = int(seconds)
    return f"{whole} s" if whole < 60 else f"{whole // 60} min {whole % 60:02d} s"


def run_jobs(args: argparse.Namespace) -> int:
    """Print one line per job: id, status, progress, created, file."""
    params: dict[str, str | int] = {"limit": args.limit}
    if args.status:
        params["status"] = args.status
    with _client(args) as client:
        for job in _checked(client.get("/v1/jobs", params=params), 200).json()["data"]:
            upload = job["upload"]
            print(
                f"{job['id']}  {job['status']:<9}  {100 * job['progress']:3.0f}%"
                f"  {job['created_at']}  {upload['filename']} ({upload['kind']})"
            )
    return 0

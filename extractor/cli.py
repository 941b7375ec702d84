"""``extractor serve | extract | check | listen | labeling ...``: the command line of the package."""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from collections.abc import Sequence
from pathlib import Path

from extractor.pipeline.request import OPTIONS

from .async_jobs.client import add_commands as add_job_commands
from .cli_errors import USAGE, CommandFailed, run
from .config import Settings
from .config.fields import add_setting_flags, settings_from_flags
from .errors import ExtractorError


def _serve(args: argparse.Namespace) -> int:
    # Each worker owns one core: numpy's OpenBLAS must not start a thread per core in every
    # worker (measured: 1.12 cores per transcription instead of 1.00, for no speed-up). It
    # reads this when numpy is first imported, which the next line does.
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    settings = settings_from_flags(Settings, args)
    if settings.malloc_huge_pages:
        from .heap import reexec_with_huge_pages

        reexec_with_huge_pages()  # returns at once when already done
    if settings.settle_library_pages:  # once, after any re-exec, before the workers map them
        from .library_pages import settle_library_pages

        settle_library_pages()
    # The workers' shared metrics directory must be in the environment before anything imports
    # prometheus-client, which picks its multiprocess storage at import.
    from .metrics_dir import prepare_multiprocess_dir, remove_multiprocess_dir

    metrics_dir = prepare_multiprocess_dir(settings.tmp_dir) if settings.metrics else None
    from extractor.server.application import beyond_loopback, serve
    from extractor.server.gunicorn_conf import gunicorn_options, intake_limits
    from extractor.web.app import create_app

    from .logs import configure_logging

    reachable = beyond_loopback(settings.bind)
    if reachable and not settings.secret and not settings.api_keys:
        configure_logging(settings.log_level)
        logging.getLogger("extractor.serve").warning(
            "listening beyond loopback without EXTRACTOR_SECRET: anyone who can reach"
            f" {', '.join(reachable)} can use the extractor; set EXTRACTOR_SECRET (or --secret)"
            " or EXTRACTOR_API_KEYS",
            extra={"bind": settings.bind},
        )
    try:
        serve(lambda: create_app(settings), gunicorn_options(settings), intake_limits(settings))
    finally:
        if metrics_dir is not None:
            remove_multiprocess_dir(metrics_dir)
    return 0


def _extract(args: argparse.Namespace) -> int:
    """Answer as POST /extract would, for one local file, without a server."""
    from extractor.pipeline.extraction import Extractor
    from extractor.pipeline.reply import extract_reply, workspace
    from extractor.pipeline.request import Limits, read_request

    settings = settings_from_flags(Settings, args)
    path = Path(args.file)
    if not path.is_file():
        raise CommandFailed(f"no such file: {path}", USAGE)
    extractor = Extractor(settings)  # cheap: its engines load on first use
    try:
        limits = Limits.of(settings, extractor.ocr.installed_languages)
        wanted = read_request(_option_fields(args), limits)
    except ExtractorError as exc:  # a bad option: refused before any work, as a usage error
        extractor.close()
        raise CommandFailed(exc.message, USAGE) from None
    try:
        with workspace(settings) as workdir:
            reply = extract_reply(extractor, path, path.name, workdir, wanted, json_indent=2)
            if reply.format.scanned:  # a PDF: its bytes as they are
                sys.stdout.flush()
                for piece in reply.pieces():
                    sys.stdout.buffer.write(piece)
                sys.stdout.buffer.flush()
            else:
                sys.stdout.write(reply.text())  # a long document's is a file in workdir
    except ExtractorError as exc:
        print(json.dumps(exc.to_json()), file=sys.stderr)
        return 1
    finally:
        extractor.close()
    return 0


def _add_option_flags(parser: argparse.ArgumentParser) -> None:
    """One flag per extraction option (``request.OPTIONS``), as POST /extract's parameters."""
    group = parser.add_argument_group("extraction options (as POST /extract's query parameters)")
    for opt in OPTIONS:
        if opt.kind.switch:
            group.add_argument(opt.flag, dest=opt.name, action=argparse.BooleanOptionalAction,
                               default=None, help=opt.doc.replace("%", "%%"))  # fmt: skip
        else:
            group.add_argument(opt.flag, dest=opt.name, default=None, choices=opt.kind.choices,
                               metavar=None if opt.kind.choices else opt.name.upper(),
                               help=opt.doc.replace("%", "%%"))  # fmt: skip


def _option_fields(args: argparse.Namespace) -> dict[str, str | None]:
    """The flags given, as the text a query string would carry (checked by ``read_request``)."""
    fields: dict[str, str | None] = {}
    for opt in OPTIONS:
        value = getattr(args, opt.name)
        fields[opt.name] = ("on" if value else "off") if isinstance(value, bool) else value
    return fields


def _check(args: argparse.Namespace) -> int:
    from .check import run_check

    return run_check(
        args.url, secret=args.secret, kind=args.kind, as_json=args.json, timeout=args.timeout
    )


def _listen(args: argparse.Namespace) -> int:
    from .realtime.listen import listen

    return listen(
        args.url, args.file, secret=args.secret, rate=args.rate, fast=args.fast, out=sys.stdout
    )


def _settings_doc(args: argparse.Namespace) -> int:
    """Print the settings tables, or regenerate them in place inside a page's markers."""
    from .config.docs import TABLES, named_table, write_tables

    if args.write is None:
        print("\n".join(f"{name}:\n\n{named_table(name)}" for name in TABLES), end="")
    elif write_tables(Path(args.write)):
        print(f"{args.write}: settings tables regenerated", file=sys.stderr)
    return 0


# Settings of a running server that an extraction on the command line never reads: how it
# listens, receives and queues requests, its metrics and live transcription.
SERVER_ONLY = (
    "bind", "workers", "threads", "secret", "engine_slots", "queue_size", "header_timeout",
    "body_timeout", "body_min_rate", "send_timeout", "keepalive_timeout",
    "max_pending_connections", "malloc_huge_pages", "settle_library_pages",
    "release_library_pages", "metrics",
    "metrics_require_secret",
)  # fmt: skip


def server_only() -> list[str]:
    """The names of ``SERVER_ONLY`` and of every live-transcription setting."""
    names = [declared.name for declared in Settings.declared()]
    return [name for name in names if name in SERVER_ONLY or name.startswith("realtime_")]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="extractor",
        description=__doc__,
        epilog="Exit status: 0 done, 1 failed (server down or refusing, job failed), 2 usage"
        " (bad flag, URL or file), 130 interrupted, 141 output closed by its reader.",
    )
    parser.add_argument("--debug", action="store_true",
                        help="show the traceback of a failure instead of its one line")  # fmt: skip
    sub = parser.add_subparsers(dest="command", required=True)

    serve = sub.add_parser("serve", help="serve POST /extract under gunicorn")
    add_setting_flags(serve, Settings)
    serve.set_defaults(run=_serve)

    extract = sub.add_parser("extract", help="print what POST /extract would answer for FILE")
    extract.add_argument("file")
    _add_option_flags(extract)
    # Settings apart from the options, and only those one extraction uses: the engines', the
    # limits, the reply's. A setting an option of the same name overrides per request
    # (ocr_languages, ocr_rotate) stays an EXTRACTOR_* variable here.
    add_setting_flags(extract, Settings, skip=(*server_only(), *(opt.name for opt in OPTIONS)))
    extract.set_defaults(run=_extract)

    check = sub.add_parser("check", help="check that the extractor at URL meets the contract")
    check.add_argument("url")
    check.add_argument("--secret", default=None, help="sent as 'Authorization: Bearer <secret>'")
    check.add_argument("--kind", choices=("ocr", "audio", "all"), default="all")
    check.add_argument("--json", action="store_true", help="print a JSON report")
    check.add_argument("--timeout", type=float, default=120.0,
                       help="seconds to wait for each reply [default: 120]")  # fmt: skip
    check.set_defaults(run=_check)

    listen = sub.add_parser("listen", help="stream FILE (or - for raw PCM16 on standard input)"
                            " to a server's live transcription and print the words as they come")  # fmt: skip
    listen.add_argument("file", metavar="FILE|-", nargs="?", default="-",
                        help="an audio file, or - for standard input [default: -]")  # fmt: skip
    listen.add_argument("--url", default=os.environ.get("EXTRACTOR_URL", "http://127.0.0.1:8000"),
                        help="the server [default: $EXTRACTOR_URL or http://127.0.0.1:8000]")  # fmt: skip
    listen.add_argument("--secret", default=os.environ.get("EXTRACTOR_SECRET"),
                        help="sent as 'Authorization: Bearer <secret>' [default: $EXTRACTOR_SECRET]")  # fmt: skip
    listen.add_argument("--rate", type=int, choices=(16000, 24000), default=24000,
                        help="sample rate of raw PCM16 on standard input [default: 24000]")  # fmt: skip
    listen.add_argument("--fast", action="store_true",
                        help="send FILE as fast as the server reads it, not at its own pace")  # fmt: skip
    listen.set_defaults(run=_listen)

    settings = sub.add_parser("settings", help="print the Markdown tables of every setting")
    settings.add_argument("--write", "--readme", dest="write", default=None, metavar="PATH",
                          help="regenerate the tables between the settings-table markers of"
                               " this file instead")  # fmt: skip
    settings.set_defaults(run=_settings_doc)

    submit = add_job_commands(sub)  # submit, jobs: the asynchronous job API from a terminal
    _add_option_flags(submit)
    submit.set_defaults(option_fields=_option_fields)

    sub.add_parser("labeling", help="the labeling service: serve, worker, add-user, migrate",
                   add_help=False)  # fmt: skip
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run one command; its exit status (``cli_errors``: one line on standard error for a
    failure, ``--debug`` its traceback)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    debug = argv[:1] == ["--debug"]
    if argv[debug : debug + 1] == ["labeling"]:
        from .labeling.cli import main as labeling_main

        return labeling_main(argv[debug + 1 :], debug=debug)
    args = build_parser().parse_args(argv)
    return run(f"extractor {args.command}", lambda: int(args.run(args)), debug=args.debug)


if __name__ == "__main__":
    sys.exit(main())

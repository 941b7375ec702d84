"""``extractor submit FILE`` and ``extractor jobs``: the asynchronous job API from a terminal.

``submit`` uploads a file as a job (``POST /v1/jobs``); with ``--wait`` it shows a progress bar
until the job ends and writes the result (``-o OUT``, else standard output) in ``--format``.
``jobs`` lists the server's jobs, newest first. The server is ``--server`` (else
``EXTRACTOR_URL``, else http://127.0.0.1:8000) and the secret ``--secret`` (else
``EXTRACTOR_SECRET``, the server's own variable).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

if TYPE_CHECKING:  # imported when a command runs: `extractor --help` stays quick
    import httpx

DEFAULT_SERVER = "http://127.0.0.1:8000"
POLL_SECONDS = 1.0
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

    server = args.server or os.environ.get("EXTRACTOR_URL") or DEFAULT_SERVER
    secret = args.secret or os.environ.get("EXTRACTOR_SECRET")
    headers = {"Authorization": f"Bearer {secret}"} if secret else {}
    return httpx.Client(base_url=server.rstrip("/"), headers=headers, timeout=300)


def _fail(reply: httpx.Response) -> int:
    try:
        error = reply.json()["error"]
        print(
            f"extractor: {reply.status_code} {error['code']}: {error['message']}", file=sys.stderr
        )
    except (ValueError, KeyError, TypeError):
        print(f"extractor: {reply.status_code}: {reply.text[:300]}", file=sys.stderr)
    return 1


def run_submit(args: argparse.Namespace) -> int:
    """Upload, then (``--wait``) follow the job and write its result."""
    fields = args.option_fields(args)
    params: dict[str, str] = {name: value for name, value in fields.items() if value is not None}
    if args.callback_url:
        params["callback_url"] = args.callback_url
    with _client(args) as client, args.file.open("rb") as upload:
        reply = client.post("/v1/jobs", params=params, files={"upload": (args.file.name, upload)})
        if reply.status_code != 202:
            return _fail(reply)
        job: dict[str, Any] = reply.json()
        if not args.wait:
            print(job["id"])
            return 0
        job = follow(client, job, sys.stderr)
        if job["status"] != "succeeded":
            error = job.get("error") or {
                "code": job["status"],
                "message": f"the job was {job['status']}",
            }
            print(f"extractor: job {job['status']}: {error['code']}: {error['message']}",
                  file=sys.stderr)  # fmt: skip
            return 1
        result = client.get(f"/v1/jobs/{job['id']}/result")
        if result.status_code != 200:
            return _fail(result)
        if args.output is not None:
            args.output.write_bytes(result.content)
        else:
            sys.stdout.buffer.write(result.content)
            sys.stdout.flush()
    return 0


def follow(client: httpx.Client, job: dict[str, Any], out: TextIO) -> dict[str, Any]:
    """Poll the job until it ends, drawing its progress on ``out`` (a bar on a terminal, a line
    per change otherwise); the ended job."""
    shown = ""
    while True:
        line = _bar(job)
        if line != shown:
            if out.isatty():
                out.write("\r" + line)
            else:
                out.write(line + "\n")
            out.flush()
            shown = line
        if job["status"] in ENDED:
            if out.isatty():
                out.write("\n")
            return job
        time.sleep(POLL_SECONDS)
        reply = client.get(f"/v1/jobs/{job['id']}")
        reply.raise_for_status()
        job = reply.json()


def _bar(job: dict[str, Any]) -> str:
    done = int(BAR_WIDTH * float(job["progress"]))
    bar = "#" * done + "." * (BAR_WIDTH - done)
    return f"[{bar}] {100 * float(job['progress']):3.0f}% {job['status']}"


def run_jobs(args: argparse.Namespace) -> int:
    """Print one line per job: id, status, progress, created, file."""
    params: dict[str, str | int] = {"limit": args.limit}
    if args.status:
        params["status"] = args.status
    with _client(args) as client:
        reply = client.get("/v1/jobs", params=params)
        if reply.status_code != 200:
            return _fail(reply)
        for job in reply.json()["data"]:
            upload = job["upload"]
            print(
                f"{job['id']}  {job['status']:<9}  {100 * job['progress']:3.0f}%"
                f"  {job['created_at']}  {upload['filename']} ({upload['kind']})"
            )
    return 0

"""One worker's memory through a sequence of inputs: what its peak RSS stands on.

``bench.peaks`` gives each input's own peak; here the inputs go one after another to one
``extractor serve --workers 1`` server, so what an input leaves behind (a warm Tesseract API, a
fragmented heap) shows in the next one's peak. Printed: the worker's RSS and VmHWM once ready
(the VmHWM then is its loading and warm-up), and per input its peak (VmHWM reset before it)
and its RSS after. ``--job FILE`` submits FILE as an asynchronous job twice (one after the
other) and sends the inputs meanwhile: a job thread and a request in one process; with no
inputs, one job alone, then ``GET`` its result (in JSON), each with its own peak::

    python -m bench.worker_memory a4.png speech.wav 10-pages.pdf speech.wav
    python -m bench.worker_memory --env EXTRACTOR_OCR_WARM_ENGINES=0 speech.wav
    python -m bench.worker_memory --job long.flac --seconds 20 a4.png
    python -m bench.worker_memory --job 30-pages.pdf

Figures and what they showed: ``bench/memory.md``.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

from .load import Upload, post
from .server import Server, memory_mb, reset_peak


class TunedServer(Server):
    """A server with some settings changed (``NAME=VALUE``; the bench's servers otherwise drop
    every ``EXTRACTOR_*`` variable, to measure the defaults)."""

    def __init__(self, *flags: str, settings: list[str], log_dir: Path) -> None:
        super().__init__(*flags, log_dir=log_dir, name="memory")
        self.settings = dict(pair.partition("=")[::2] for pair in settings)

    def environ(self) -> dict[str, str]:
        return {**super().environ(), **self.settings}


def submit_job(server: Server, upload: Upload) -> str:
    """POST /extract with ``Prefer: respond-async``: the job's id."""
    request = urllib.request.Request(
        f"http://{server.host}:{server.port}/extract", data=upload.body, method="POST",
        headers={"Content-Type": upload.content_type, "Prefer": "respond-async"},
    )  # fmt: skip
    with urllib.request.urlopen(request, timeout=60) as reply:
        return str(json.loads(reply.read())["id"])


def job_alone(server: Server, worker: int, upload: Upload) -> None:
    """One job of ``upload`` to its end, then its result fetched: the worker's peak in each."""
    base = f"http://{server.host}:{server.port}/v1/jobs/{submit_job(server, upload)}"
    started = time.monotonic()
    while True:
        with urllib.request.urlopen(base, timeout=60) as reply:
            status = json.loads(reply.read())["status"]
        if status not in ("queued", "running"):
            break
        time.sleep(0.5)
    print(f"  job of {upload.name}: {status} after {time.monotonic() - started:.0f} s, peak"
          f" {memory_mb(worker, 'VmHWM'):.0f} MB, after {memory_mb(worker):.0f} MB")  # fmt: skip
    reset_peak(worker)
    with urllib.request.urlopen(f"{base}/result?format=json", timeout=600) as reply:
        size = len(reply.read())
    print(f"  its result ({size / 1e6:.1f} MB of JSON): peak {memory_mb(worker, 'VmHWM'):.0f}"
          f" MB, after {memory_mb(worker):.0f} MB")  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.worker_memory", description=__doc__)
    parser.add_argument("inputs", type=Path, nargs="*")
    parser.add_argument("--env", action="append", default=[], help="NAME=VALUE for the server")
    parser.add_argument("--job", type=Path, help="an upload to run as asynchronous jobs")
    parser.add_argument("--seconds", type=float, default=20.0, help="inputs sent per job")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    with tempfile.TemporaryDirectory(prefix="extractor-bench-") as tmp:
        settings = [f"EXTRACTOR_DATA_DIR={tmp}", *args.env]  # the job database
        with TunedServer("--workers", "1", settings=settings, log_dir=Path(tmp)) as server:
            server.wait_ready(1)
            (worker,) = server.worker_pids()
            print(f"ready: RSS {memory_mb(worker):.0f} MB, VmHWM {memory_mb(worker, 'VmHWM'):.0f}"
                  f" MB (loading and warm-up) {' '.join(args.env)}")  # fmt: skip
            uploads = [Upload.of(path) for path in args.inputs]
            if args.job is None and not uploads:
                parser.error("give inputs, --job, or both")
            if args.job is None:
                for upload in uploads:
                    reset_peak(worker)
                    reply = post(server.host, server.port, upload, timeout=900)
                    print(f"  {upload.name:36s} peak {memory_mb(worker, 'VmHWM'):4.0f} MB, after"
                          f" {memory_mb(worker):4.0f} MB, {reply.seconds:5.1f} s, {reply.status}")  # fmt: skip
                return 0
            reset_peak(worker)
            job = Upload.of(args.job)
            if not uploads:
                job_alone(server, worker, job)
                return 0
            for _ in range(2):
                submit_job(server, job)
                until = time.monotonic() + args.seconds
                while time.monotonic() < until:
                    for upload in uploads:
                        post(server.host, server.port, upload, timeout=900)
            print(f"  jobs of {job.name} beside {', '.join(u.name for u in uploads)}: peak"
                  f" {memory_mb(worker, 'VmHWM'):.0f} MB, after {memory_mb(worker):.0f} MB")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())

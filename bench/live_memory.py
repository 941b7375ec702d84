"""A worker's memory while it serves a live stream, alone and beside file transcriptions, and
what the stream's words and the files' replies took meanwhile.

One ``extractor serve --workers 1`` server (the defaults). Printed: the worker's RSS and VmHWM
once ready; then, VmHWM reset before each, its peak while a live stream (the LibriVox
recording of ``bench.realtime``, 40 ms PCM16 messages paced to the wall clock) is transcribed
alone, and while the same stream runs beside 60 s speech files posted one after another to
``POST /extract``. With each: the stream's word latency (p50 / p90: a word's end in the audio to
the delta carrying it, as ``bench.realtime`` times it) and, beside files, the files' median reply
time. ``--base DIR`` also serves the extractor package found in DIR (e.g. ``git archive`` of the
commit before) and alternates the two servers round by round, so both see the same load::

    python -m bench.live_memory [--rounds 2] [--base DIR]

Figures and what they showed: ``bench/memory.md``.
"""

from __future__ import annotations

import argparse
import logging
import os
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

from .inputs import varied_speech
from .load import Upload, post
from .realtime import pct, recordings, reference_words, stream
from .server import Server, memory_mb, reset_peak


def one_round(server: Server, live: object, upload: Upload) -> list[str]:
    """The stream alone, then beside files, on ``server``'s one worker: one line each."""
    (worker,) = server.worker_pids()
    url = f"http://{server.host}:{server.port}"
    lines = []
    reset_peak(worker)
    result = stream(url, live, time.monotonic())  # type: ignore[arg-type]
    lines.append(
        f"live stream alone: peak {memory_mb(worker, 'VmHWM'):.0f} MB, after"
        f" {memory_mb(worker):.0f} MB, words {len(result.transcript.split())}, word p50 / p90"
        f" {pct(result.word_latencies, 50):.2f} / {pct(result.word_latencies, 90):.2f} s"
    )
    reset_peak(worker)
    done = threading.Event()
    seconds: list[float] = []

    def files() -> None:
        while not done.is_set():
            reply = post(server.host, server.port, upload, timeout=900)
            if reply.status == 200:
                seconds.append(reply.seconds)

    poster = threading.Thread(target=files, daemon=True)
    poster.start()
    result = stream(url, live, time.monotonic() + 1.0)  # type: ignore[arg-type]
    done.set()
    poster.join()
    files_s = f"{statistics.median(seconds):.2f} s" if seconds else "-"
    lines.append(
        f"live stream beside 60 s files: peak {memory_mb(worker, 'VmHWM'):.0f} MB, after"
        f" {memory_mb(worker):.0f} MB, words {len(result.transcript.split())}, word p50 / p90"
        f" {pct(result.word_latencies, 50):.2f} / {pct(result.word_latencies, 90):.2f} s;"
        f" files {len(seconds)}, median {files_s}"
    )
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.live_memory", description=__doc__)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--base", type=Path, help="also serve the extractor package found here")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    os.environ.pop("OMP_THREAD_LIMIT", None)
    live = next(r for r in recordings() if r.name == "librivox")
    live.words = reference_words(live)
    with tempfile.TemporaryDirectory(prefix="extractor-bench-") as tmp:
        speech = Path(tmp) / "speech-60s.wav"
        speech.write_bytes(varied_speech(60.0))
        upload = Upload.of(speech)
        here = str(Path(__file__).resolve().parent.parent)
        servers = {"this tree": Server("--workers", "1", log_dir=Path(tmp), name="live-memory",
                                       pythonpath=here)}  # fmt: skip
        if args.base is not None:
            servers[str(args.base)] = Server(
                "--workers", "1", log_dir=Path(tmp), name="base", pythonpath=str(args.base)
            )
        try:
            for server in servers.values():
                server.start()
            for name, server in servers.items():
                server.wait_ready(1)
                (worker,) = server.worker_pids()
                print(f"{name}: ready: RSS {memory_mb(worker):.0f} MB, VmHWM"
                      f" {memory_mb(worker, 'VmHWM'):.0f} MB", flush=True)  # fmt: skip
            for round_ in range(1, args.rounds + 1):
                for name, server in servers.items():
                    for line in one_round(server, live, upload):
                        print(f"  round {round_}, {name}: {line}", flush=True)
        finally:
            for server in servers.values():
                server.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""A worker's memory while it serves a live stream, alone and beside file transcriptions.

One ``extractor serve --workers 1`` server (the defaults). Printed: the worker's RSS and VmHWM
once ready; then, VmHWM reset before each, its peak while a live stream (the LibriVox
recording of ``bench.realtime``, 40 ms PCM16 messages paced to the wall clock) is transcribed
alone, and while the same stream runs beside 60 s speech files posted one after another to
``POST /extract``::

    python -m bench.live_memory [--rounds 2]

Figures and what they showed: ``bench/memory.md``.
"""

from __future__ import annotations

import argparse
import logging
import sys
import tempfile
import threading
import time
from pathlib import Path

from .inputs import varied_speech
from .load import Upload, post
from .realtime import recordings, stream
from .server import Server, memory_mb, reset_peak


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.live_memory", description=__doc__)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    live = next(r for r in recordings() if r.name == "librivox")
    with tempfile.TemporaryDirectory(prefix="extractor-bench-") as tmp:
        speech = Path(tmp) / "speech-60s.wav"
        speech.write_bytes(varied_speech(60.0))
        upload = Upload.of(speech)
        with Server("--workers", "1", log_dir=Path(tmp), name="live-memory") as server:
            server.wait_ready(1)
            (worker,) = server.worker_pids()
            url = f"http://{server.host}:{server.port}"
            print(
                f"ready: RSS {memory_mb(worker):.0f} MB, VmHWM {memory_mb(worker, 'VmHWM'):.0f} MB"
            )
            for round_ in range(1, args.rounds + 1):
                reset_peak(worker)
                result = stream(url, live, time.monotonic())
                print(f"  round {round_}: live stream alone ({live.seconds:.0f} s): peak"
                      f" {memory_mb(worker, 'VmHWM'):.0f} MB, after {memory_mb(worker):.0f} MB,"
                      f" words {len(result.transcript.split())}")  # fmt: skip
                reset_peak(worker)
                done = threading.Event()

                def files(done: threading.Event) -> None:
                    while not done.is_set():
                        post(server.host, server.port, upload, timeout=900)

                poster = threading.Thread(target=files, args=(done,), daemon=True)
                poster.start()
                result = stream(url, live, time.monotonic() + 1.0)
                done.set()
                poster.join()
                print(f"  round {round_}: live stream beside 60 s files: peak"
                      f" {memory_mb(worker, 'VmHWM'):.0f} MB, after {memory_mb(worker):.0f} MB,"
                      f" words {len(result.transcript.split())}")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())

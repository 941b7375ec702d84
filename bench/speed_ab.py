"""Two versions of the server, the same requests, alternating: a change's cost in speed.

``extractor serve --workers 1`` from this tree and from ``--base DIR`` (a directory holding an
``extractor`` package, e.g. ``git archive`` of the commit before) run side by side; each round
sends every input to one server, then to the other (which goes first alternates), one request at
a time. Printed per input and version: the medians of the reply's wall time and of the worker's
CPU seconds per request (its ``/proc`` counters before and after; CPU time moves less than wall
time with other work on the machine), and the worker's highest VmHWM (reset before each)::

    python -m bench.speed_ab --base DIR [--rounds 7]

Inputs: 6 s and 60 s of espeak speech (``bench.inputs.varied_speech``) and a dense A4 page at
300 dpi (``bench.inputs.a4_page``).
"""

from __future__ import annotations

import argparse
import logging
import os
import statistics
import sys
import tempfile
from pathlib import Path

from extractor import samples

from .inputs import a4_page, varied_speech
from .load import Upload, post
from .server import Server, cpu_seconds, memory_mb, reset_peak


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.speed_ab", description=__doc__)
    parser.add_argument("--base", type=Path, required=True)
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    os.environ.pop("OMP_THREAD_LIMIT", None)
    with tempfile.TemporaryDirectory(prefix="extractor-bench-") as tmp:
        work = Path(tmp)
        inputs = {
            "speech 6 s": work / "speech-6s.wav",
            "speech 60 s": work / "speech-60s.wav",
            "A4 page, 300 dpi": work / "a4.png",
        }
        inputs["speech 6 s"].write_bytes(varied_speech(6.0, seed=2))
        inputs["speech 60 s"].write_bytes(varied_speech(60.0))
        inputs["A4 page, 300 dpi"].write_bytes(samples.encode_image(a4_page().image, "PNG"))
        here = str(Path(__file__).resolve().parent.parent)
        servers = {
            "this tree": Server("--workers", "1", log_dir=work, name="new", pythonpath=here),
            "base": Server("--workers", "1", log_dir=work, name="base", pythonpath=str(args.base)),
        }
        figures: dict[tuple[str, str], list[tuple[float, float, float]]] = {}
        try:
            for server in servers.values():
                server.start()
            for server in servers.values():
                server.wait_ready(1)
            for round_ in range(args.rounds):
                order = list(servers.items())
                if round_ % 2:
                    order.reverse()
                for what, path in inputs.items():
                    for name, server in order:
                        (worker,) = server.worker_pids()
                        reset_peak(worker)
                        cpu = cpu_seconds(worker)
                        reply = post(server.host, server.port, Upload.of(path), timeout=600)
                        assert reply.status == 200, (name, what, reply.status)
                        figures.setdefault((what, name), []).append(
                            (reply.seconds, cpu_seconds(worker) - cpu, memory_mb(worker, "VmHWM"))
                        )
        finally:
            for server in servers.values():
                server.stop()
    print("| input | version | wall, median | worker CPU, median | peak (highest) |")
    print("|---|---|---|---|---|")
    for (what, name), rows in figures.items():
        wall = statistics.median(r[0] for r in rows)
        cpu = statistics.median(r[1] for r in rows)
        print(
            f"| {what} | {name} | {wall:.2f} s | {cpu:.2f} s | {max(r[2] for r in rows):.0f} MB |"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())

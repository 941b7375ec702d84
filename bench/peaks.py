"""Peak RSS of a worker per input: what an operator sizes a container by.

One ``extractor serve --workers 1`` server takes each input alone, its worker's peak RSS
(VmHWM) reset before every request, so each figure is that input's own peak and nothing else's.
The worker's CPU seconds per request come with it (its child processes' included: the PDF
renderer, CLI Tesseract runs): on a shared machine they move far less than wall time, so they
are the fairer real-time factor when comparing two versions of the code.

A worker's child processes (a PDF's renderer, the CLI Tesseract reading a document's second
page) hold memory of their own, which a container must have room for too: what they hold
alone (private pages, so a child between fork and exec does not count its parent's) is sampled
every 10 ms during each request, and the table shows the most they held at once, and that plus
the worker's own peak (an upper bound of the pair's, as the two peaks need not coincide).

Standalone, it compares the code under test with another checkout in the same run, rounds
alternating (``--base DIR``: a directory holding an ``extractor`` package, e.g. from
``git archive <commit> | tar -x -C DIR``)::

    python -m bench.peaks --base /tmp/base --rounds 2 --only speech-60s,pdf-10
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import statistics
import sys
import tempfile
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from .inputs import Inputs, make_inputs
from .load import Upload, post
from .server import Server, children, memory_mb, private_mb, reset_peak, tree_cpu_seconds

SAMPLE_EVERY = 0.01  # seconds between two looks at a worker's child processes

log = logging.getLogger("bench")


@dataclass(frozen=True)
class PeakInput:
    key: str  # for --only
    what: str
    path: Path
    audio_seconds: float | None  # None: a document


@dataclass(frozen=True)
class InputPeak:
    """One input on one server: the highest peak over the rounds, medians of the times."""

    version: str  # which code served it: "this tree" or the --base directory
    what: str
    ready_mb: float  # the worker's RSS before its first request
    peak_mb: float  # VmHWM during the request, the highest over the rounds
    children_mb: float  # the most the worker's child processes held at once (sampled)
    cpu_s: float  # the worker's and its children's CPU seconds for the request (median)
    wall_s: float  # the request's wall time (median)
    audio_seconds: float | None
    status: int

    @property
    def cpu_rtf(self) -> float | None:
        """CPU seconds per second of audio."""
        return self.cpu_s / self.audio_seconds if self.audio_seconds else None


def peak_inputs(inputs: Inputs) -> list[PeakInput]:
    """The inputs of the memory goal (60 s and 10 min of speech, a 10-page PDF) and an A4 page."""
    ten_min = inputs.speech_10min
    minutes = 10 if ten_min.stat().st_size > 20_000_000 else 1  # a quick run makes it shorter
    return [
        PeakInput("speech-60s", "speech, 60 s", inputs.speech_60s, 60.0),
        PeakInput("speech-10min", f"speech, {minutes} min", ten_min, 60.0 * minutes),
        PeakInput("pdf-10", "10-page PDF, 300 dpi", inputs.pdf, None),
        PeakInput("a4", "A4 page, 300 dpi (PNG)", inputs.a4_page, None),
    ]


@contextlib.contextmanager
def children_rss(pid: int) -> Iterator[list[float]]:
    """Sample the memory ``pid``'s child processes hold of their own (see ``private_mb``)
    until the block ends; yields a list whose one item is then the highest sum seen, in MB."""
    highest = [0.0]
    done = threading.Event()

    def sample() -> None:
        while not done.wait(SAMPLE_EVERY):
            total = 0.0
            for child in children(pid):
                with contextlib.suppress(OSError, LookupError):
                    total += private_mb(child)
            highest[0] = max(highest[0], total)

    thread = threading.Thread(target=sample, daemon=True)
    thread.start()
    try:
        yield highest
    finally:
        done.set()
        thread.join()


def measure(servers: dict[str, Server], chosen: list[PeakInput], rounds: int) -> list[InputPeak]:
    """Every input through every server, the servers alternating within each round."""
    ready: dict[str, float] = {}
    pids: dict[str, int] = {}
    for version, server in servers.items():
        server.wait_ready(1)
        pids[version] = server.worker_pids()[0]
        ready[version] = memory_mb(pids[version])
    uploads = {item.key: Upload.of(item.path) for item in chosen}
    seen: dict[tuple[str, str], list[tuple[float, float, float, int, float]]] = {}
    for round_ in range(rounds):
        order = list(servers) if round_ % 2 == 0 else list(reversed(servers))
        for item in chosen:
            for version in order:
                server, pid = servers[version], pids[version]
                reset_peak(pid)
                cpu = tree_cpu_seconds(pid)
                with children_rss(pid) as held:
                    reply = post(server.host, server.port, uploads[item.key], timeout=900)
                result = (memory_mb(pid, "VmHWM"), tree_cpu_seconds(pid) - cpu, reply.seconds)
                seen.setdefault((version, item.key), []).append((*result, reply.status, held[0]))
                log.info("%s, %s: peak %.0f MB (children %.0f MB), %.2f s CPU, %.2f s",
                         version, item.what, result[0], held[0], *result[1:])  # fmt: skip
    return [
        InputPeak(
            version,
            item.what,
            ready[version],
            peak_mb=max(r[0] for r in runs),
            children_mb=max(r[4] for r in runs),
            cpu_s=statistics.median(r[1] for r in runs),
            wall_s=statistics.median(r[2] for r in runs),
            audio_seconds=item.audio_seconds,
            status=max(r[3] for r in runs),
        )
        for item in chosen
        for version in servers
        for runs in [seen[(version, item.key)]]
    ]


def markdown(peaks: list[InputPeak]) -> list[str]:
    lines = [
        "| input | code | worker ready | peak RSS (VmHWM) | child processes at once (private, sampled) |"
        " worker + children | CPU per request (children included) | CPU per audio second |"
        " wall | status |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for p in peaks:
        rtf = f"{p.cpu_rtf:.3f}" if p.cpu_rtf is not None else "—"
        held = f"{p.children_mb:.0f} MB" if p.children_mb else "none"
        lines.append(
            f"| {p.what} | {p.version} | {p.ready_mb:.0f} MB | {p.peak_mb:.0f} MB | {held} |"
            f" {p.peak_mb + p.children_mb:.0f} MB | {p.cpu_s:.2f} s | {rtf} | {p.wall_s:.2f} s |"
            f" {p.status} |"
        )
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.peaks", description=__doc__)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--base", type=Path, help="also serve the extractor package found here")
    parser.add_argument("--only", default="", help="comma-separated keys: " + ", ".join(
        ("speech-60s", "speech-10min", "pdf-10", "a4")))  # fmt: skip
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s", datefmt="%H:%M:%S")
    os.environ.pop("OMP_THREAD_LIMIT", None)
    with tempfile.TemporaryDirectory(prefix="extractor-bench-") as tmp:
        work = Path(tmp)
        chosen = peak_inputs(make_inputs(work / "inputs"))
        if args.only:
            chosen = [item for item in chosen if item.key in args.only.split(",")]
        here = str(Path(__file__).resolve().parent.parent)
        servers = {"this tree": Server("--workers", "1", log_dir=work, name="peaks",
                                       pythonpath=here)}  # fmt: skip
        if args.base is not None:
            servers[str(args.base)] = Server(
                "--workers", "1", log_dir=work, name="base", pythonpath=str(args.base)
            )
        try:
            for server in servers.values():
                server.start()
            peaks = measure(servers, chosen, args.rounds)
        finally:
            for server in servers.values():
                server.stop()
    print("\n".join(markdown(peaks)))
    return 0


if __name__ == "__main__":
    sys.exit(main())

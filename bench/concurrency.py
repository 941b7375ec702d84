"""Throughput with 4 concurrent clients against one, and one model per worker against one model
shared by a worker's engine threads.

Two ways to run two transcriptions at once on two cores:

- **one model per worker** (the default): ``--workers 2``, each worker loads its own faster-whisper
  model and runs one extraction at a time (``EXTRACTOR_ENGINE_SLOTS=1``);
- **one shared model**: ``--workers 1 --engine-slots 2``, one worker whose one CTranslate2 model
  runs two transcriptions in parallel (faster-whisper's ``num_workers``, CTranslate2's
  ``inter_threads``, set to the engine slots).

For each, ``--runs`` rounds, each of four phases of ``--seconds``: one client, four clients,
four, one (ABBA), every client posting the same upload; a round's figure is the four
clients' requests per second over the one client's, each over its two phases. A phase's rate
is its steady one (``LoadResult.steady_per_second``): from every client's first reply until the
clients stop, a request counted by the share of its latency inside that window. Counted from
the phase's start, the first requests' waits in the queue would count as work (10 OCR
phases of 4 clients: +2.5% to +5%); counted to the last reply, the drain after the clients
stop, when one worker may hold two queued requests and the other none, read a phase from 0.6%
higher to 6% lower (median 0.9% lower). The bare engines' phases are counted alike, the run
under way at the end by its share (a bare engine has no queue, so it has no ramp).

The host these runs share moves by 10% and more within a minute (one `make bench` had a round
of one phase each read 2.18x, above the 2x two cores allow; in another, two 1-client phases of
one round read 1.22 and 1.00 requests/s): ABBA cancels a steady drift within the
round, which one phase of each, one after the other, put all on one side. It does not cancel
the phase-to-phase scatter: there a round's ratio read up to 9% under the median of five
(1.75 against 1.93x), the bare CLI's up to 7%.

Beside it, the workers' CPU seconds per request with one client and with four: if four clients
make each request cost more CPU (the two transcriptions contending for memory bandwidth and
caches), no free core can make up for it, and that figure, unlike wall time, other work on the
machine moves little. The machine's memory for the layout is the highest sum of RSS over the
server's processes, sampled every 0.1 s while four clients run. OCR (half an A4 page at 150
dpi) is measured the same way on the default layout.

Throughput needs free cores: on a machine other work keeps busy the ratios measure that work
(the load average is printed beside them). Memory does not depend on timing.

The ceiling the host itself allows is measured the same way with no server at all: the bare
engines (faster-whisper's ``WhisperModel`` with the server's options, and the ``tesseract``
CLI), each in its own process, two at once against one, in the same ABBA rounds. Two cores
bound it at 2x; what two engines running side by side lose to each other in memory bandwidth
and caches, and the host's drift, show there, where the server has no part.

``python -m bench.concurrency [--runs 3] [--seconds 15]``
"""

from __future__ import annotations

import argparse
import logging
import multiprocessing
import os
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from pathlib import Path
from typing import NamedTuple, TypeVar

from .load import Upload, run_load
from .server import Server, group_status_sums, tree_cpu_seconds

log = logging.getLogger("bench")

LAYOUTS = {
    "one model per worker (default)": ("--workers", "2"),
    "one model shared by 2 engine threads": ("--workers", "1", "--engine-slots", "2"),
}
SPEECH = "speech: 11 s LibriVox"
OCR = "OCR: half A4, 150 dpi"
SPEECH_TARGET = 1.8  # issue 19: 4 clients >= 1.8x one client on 2 cores
OCR_TARGET = 1.9

P = TypeVar("P")


@dataclass
class Scaling:
    """Rounds of one client against four on one server layout."""

    layout: str
    kind: str
    # Requests per second, per round, with one client and with four (the bare engine: two at
    # once), each while every client was sending (``LoadResult.steady_per_second``).
    one: list[float] = field(default_factory=list)
    many: list[float] = field(default_factory=list)
    failed: int = 0
    peak_mb: float = 0.0  # highest RSS sum over the server's processes, four clients running
    loads: list[float] = field(default_factory=list)  # 1-minute load average after each round
    cpu_one: list[float] = field(default_factory=list)  # workers' CPU seconds per request
    cpu_four: list[float] = field(default_factory=list)

    def ratios(self) -> list[float]:
        return [f / o for o, f in zip(self.one, self.many, strict=True)]

    @property
    def target(self) -> float:
        return SPEECH_TARGET if self.kind.startswith("speech") else OCR_TARGET

    def met(self) -> bool:
        """The median round at the target, and no round more than 5% under it."""
        r = sorted(self.ratios())
        return statistics.median(r) >= self.target and r[0] >= self.target * 0.95

    def row(self, engine: str) -> str:
        r = sorted(self.ratios())
        met = "yes" if self.met() else "**no**"
        return (
            f"| {self.layout} | {self.kind} | {statistics.median(self.one):.2f} |"
            f" {statistics.median(self.many):.2f} | {r[0]:.2f} / {statistics.median(r):.2f} /"
            f" {r[-1]:.2f} | {self.target:.1f}x | {met} | {engine} | {self.peak_mb:.0f} MB |"
            f" {self.failed} |"
            f" {statistics.median(self.cpu_one):.2f} / {statistics.median(self.cpu_four):.2f} s |"
            f" {min(self.loads):.1f}-{max(self.loads):.1f} |"
        )


@contextmanager
def group_peak(group: int) -> Iterator[list[float]]:
    """The highest VmRSS sum (MB) of process group ``group`` while the block runs."""
    peak = [0.0]
    stop = threading.Event()

    def sample() -> None:
        while not stop.wait(0.1):
            peak[0] = max(peak[0], group_status_sums(group, "VmRSS")["VmRSS"] / 1024)

    thread = threading.Thread(target=sample, daemon=True)
    thread.start()
    try:
        yield peak
    finally:
        stop.set()
        thread.join()


def abba(phase: Callable[[int], P], many: int) -> dict[int, list[P]]:
    """One round of phases of 1, ``many``, ``many`` and 1 at once, all of one length: what
    ``phase`` answered for each, by count. Averaged over its two phases, a count's figure
    cancels a drift of the host that is steady within the round."""
    phases: dict[int, list[P]] = {1: [], many: []}
    for at_once in (1, many, many, 1):
        phases[at_once].append(phase(at_once))
    return phases


class Phase(NamedTuple):
    """One phase of clients on the server: its steady rate, the workers' CPU s, requests done."""

    rate: float
    cpu: float
    done: int


def scaling(
    server: Server, layout: str, kind: str, upload: Upload, runs: int, seconds: float
) -> Scaling:
    """``runs`` rounds of one client, four, four and one (``seconds`` each)."""
    assert server.process is not None
    group = server.process.pid
    result = Scaling(layout, kind)
    run_load(server.host, server.port, [upload], 4, total=4, deadline=300)  # warm every worker

    def phase(clients: int) -> Phase:
        workers = server.worker_pids()
        before = sum(tree_cpu_seconds(pid) for pid in workers)
        with group_peak(group) as peak:
            load = run_load(
                server.host, server.port, [upload], clients, duration=seconds, deadline=600
            )
        cpu = sum(tree_cpu_seconds(pid) for pid in workers) - before
        result.failed += load.failed
        if clients == 4:
            result.peak_mb = max(result.peak_mb, peak[0])
        return Phase(load.steady_per_second(), cpu, len(load.ok))

    for round_ in range(runs):
        phases = abba(phase, 4)
        result.one.append(statistics.fmean(p.rate for p in phases[1]))
        result.many.append(statistics.fmean(p.rate for p in phases[4]))
        result.cpu_one.append(_cpu_per_request(phases[1]))
        result.cpu_four.append(_cpu_per_request(phases[4]))
        result.loads.append(os.getloadavg()[0])
        log.info("  %s, %s, round %d: %.2fx", layout, kind, round_ + 1, result.ratios()[-1])
    return result


def _cpu_per_request(phases: list[Phase]) -> float:
    return sum(p.cpu for p in phases) / max(sum(p.done for p in phases), 1)


def _bare_engine(kind: str, path: str, conn: Connection) -> None:
    """One bare engine in a process of its own: for each number of seconds it receives, run
    the file over and over for that long, and answer how many runs' worth fell within it (the
    run under way at the end counted by its share, as ``LoadResult.steady_per_second`` does)."""
    from extractor.config import Settings

    from .run import BareFasterWhisper, bare_tesseract

    speech = kind == "speech"
    engine = BareFasterWhisper(Settings.load(environ={})) if speech else bare_tesseract
    engine(Path(path))  # warm: model pages, the first call's allocations
    conn.send(0.0)
    while (seconds := conn.recv()) is not None:
        deadline = time.monotonic() + seconds
        work = 0.0
        while (began := time.monotonic()) < deadline:
            engine(Path(path))
            ended = time.monotonic()
            work += (min(ended, deadline) - began) / (ended - began)
        conn.send(work)


def bare_scaling(kind: str, label: str, path: Path, runs: int, seconds: float) -> Scaling:
    """``runs`` rounds of one bare engine, two at once, two and one (``seconds`` each)."""
    context = multiprocessing.get_context("spawn")  # nothing of this process's state is forked
    pipes = [context.Pipe() for _ in range(2)]
    processes = [
        context.Process(target=_bare_engine, args=(kind, str(path), child), daemon=True)
        for _parent, child in pipes
    ]
    for process in processes:
        process.start()
    for _parent, child in pipes:
        child.close()  # the child's end is the child's: a crash then reads as EOFError here
    result = Scaling("bare engine, no server: 2 at once against 1", label)

    def phase(at_once: int) -> float:
        for parent, _child in pipes[:at_once]:
            parent.send(seconds)
        return sum(parent.recv() for parent, _child in pipes[:at_once]) / seconds

    try:
        for parent, _child in pipes:
            parent.recv()  # loaded and warm
        for round_ in range(runs):
            rates = abba(phase, 2)
            result.one.append(statistics.fmean(rates[1]))
            result.many.append(statistics.fmean(rates[2]))
            result.loads.append(os.getloadavg()[0])
            log.info("  bare %s, round %d: %.2fx", kind, round_ + 1, result.ratios()[-1])
    finally:
        for parent, _child in pipes:
            parent.send(None)
        for process in processes:
            process.join(timeout=30)
            if process.is_alive():
                process.kill()
    return result


def markdown(results: list[Scaling], bare: Sequence[Scaling] = ()) -> list[str]:
    """The server's rows, each beside the bare engine's own scaling on the same input."""
    ceiling = {b.kind: sorted(b.ratios()) for b in bare}
    lines = [
        "| layout | input | 1 client req/s | 4 clients req/s | 4 / 1 (min / median / max) |"
        " target | met? | the bare engine, 2 at once / 1 (min / median / max) |"
        " machine's peak RSS, 4 clients | failed | CPU per request, 1 / 4 clients |"
        " load average |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in results:
        b = ceiling.get(r.kind)
        engine = f"{b[0]:.2f} / {statistics.median(b):.2f} / {b[-1]:.2f}" if b else "—"
        lines.append(r.row(engine))
    return lines


def misses(results: list[Scaling]) -> list[str]:
    """The rows that missed their target, for the bench's closing note."""
    return [
        f"{r.layout}, {r.kind}: median {statistics.median(r.ratios()):.2f}x, lowest round"
        f" {min(r.ratios()):.2f}x, against {r.target:.1f}x"
        for r in results
        if not r.met()
    ]


def speech_clip(folder: Path) -> Path:
    """The 11 s LibriVox clip of ``bench.stages`` (espeak-ng's when LibriVox is unreachable)."""
    from .stages import librivox_clips

    return next(c.path for c in librivox_clips(folder, (11,)))


def measure_all(
    work: Path, runs: int, seconds: float, *, ocr: bool = True
) -> tuple[list[Scaling], list[Scaling]]:
    """Every layout on speech, and the default one on OCR too; then the bare engines alone."""
    from .inputs import make_inputs

    clip = speech_clip(work / "clips")
    page_path = make_inputs(work / "inputs", quick=True).small_page
    speech, page = Upload.of(clip), Upload.of(page_path)
    results = []
    for layout, flags in LAYOUTS.items():
        with Server(*flags, log_dir=work, name=layout.split()[2]) as server:
            server.wait_ready(int(flags[1]))
            results.append(scaling(server, layout, SPEECH, speech, runs, seconds))
            if ocr and flags == LAYOUTS["one model per worker (default)"]:
                results.append(scaling(server, layout, OCR, page, runs, seconds))
    bare = [bare_scaling("speech", SPEECH, clip, runs, seconds)]
    if ocr:
        bare.append(bare_scaling("ocr", OCR, page_path, runs, seconds))
    return results, bare


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.concurrency", description=__doc__)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=15.0, help="per phase")
    parser.add_argument("--no-ocr", action="store_true", help="speech only")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s", datefmt="%H:%M:%S")
    with tempfile.TemporaryDirectory(prefix="extractor-bench-") as tmp:
        results, bare = measure_all(Path(tmp), args.runs, args.seconds, ocr=not args.no_ocr)
    print("\n".join(markdown(results, bare)))
    return 0


if __name__ == "__main__":
    sys.exit(main())

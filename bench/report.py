"""The results of one run and their Markdown rendering (``bench/results.md``)."""

from __future__ import annotations

import math
import os
import platform
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path


@dataclass(frozen=True)
class Row:
    """One line of the summary: a measurement against its baseline and its target."""

    what: str
    baseline: str
    ours: str
    ratio: float | None = None  # ours / baseline, both medians from this run
    target: str = ""
    met: bool | None = None  # None: reported only, no target
    why: str = ""  # the known cause, printed in the closing note when the target is missed


@dataclass(frozen=True)
class LoadRow:
    kind: str  # "OCR" or "speech"
    clients: int
    requests: int
    failed: int
    per_second: float  # successful requests per second
    p50: float  # seconds
    p95: float  # seconds
    other_cores: float = float("nan")  # CPU the rest of the machine used meanwhile, in cores


@dataclass(frozen=True)
class Table:
    """A section's own table, under its heading in ``results.md``."""

    heading: str
    lines: list[str]
    # Its rows that missed a target and are not rows of the main table too: the closing note
    # lists them beside the main table's misses.
    misses: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class MemoryRow:
    what: str
    per_worker_mb: list[float]


@dataclass
class Report:
    mode: str
    settings: str
    rows: list[Row] = field(default_factory=list)
    load: list[LoadRow] = field(default_factory=list)
    memory: list[MemoryRow] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    tables: list[Table] = field(default_factory=list)
    started: float = field(default_factory=time.time)
    load_average_start: str = field(default_factory=lambda: _load_average())

    def add(self, row: Row) -> Row:
        self.rows.append(row)
        return row

    def misses(self) -> list[Row]:
        return [r for r in self.rows if r.met is False]

    def markdown(self, plot_name: str | None) -> str:
        elapsed = time.time() - self.started
        lines = [
            "# Benchmark results",
            "",
            f"- Machine: {machine()}",
            f"- Date: {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime(self.started))},"
            f" run took {elapsed / 60:.1f} min ({self.mode})",
            f"- Commit: {git_commit()}",
            f"- Load average (1/5/15 min) at start: {self.load_average_start}; at end:"
            f" {_load_average()} (other work on the machine slows both sides of each ratio alike)",
            f"- Server settings: {self.settings}",
            "- Every figure is a median of the repetitions shown; bare and server runs alternate"
            " within one run, so each ratio compares like with like.",
            "",
            "| what | baseline | ours | ratio | target | met? |",
            "|---|---|---|---|---|---|",
        ]
        for r in self.rows:
            ratio = "" if r.ratio is None or math.isnan(r.ratio) else f"{r.ratio:.2f}x"
            met = {True: "yes", False: "**no**", None: "—"}[r.met]
            lines.append(f"| {r.what} | {r.baseline} | {r.ours} | {ratio} | {r.target} | {met} |")
        if self.load:
            lines += [
                "",
                "## Throughput and latency against concurrency",
                "",
                "| input | clients | requests | failed | requests/s | p50 latency | p95 latency"
                " | other processes' CPU meanwhile |",
                "|---|---|---|---|---|---|---|---|",
            ]
            for lr in self.load:
                lines.append(
                    f"| {lr.kind} | {lr.clients} | {lr.requests} | {lr.failed} |"
                    f" {lr.per_second:.2f} | {lr.p50:.2f} s | {lr.p95:.2f} s |"
                    f" {lr.other_cores:.2f} cores |"
                )
            lines += [
                "",
                "The last column is the CPU that processes other than this benchmark and its server"
                " used during each level (from /proc/stat): on a 2-core machine, 0.5 cores taken"
                " by other work already caps 2 busy workers at 1.5 cores.",
            ]
            if plot_name:
                lines += ["", f"![p50 and p95 latency against concurrency]({plot_name})"]
        for table in self.tables:
            lines += ["", f"## {table.heading}", "", *table.lines]
        if self.memory:
            lines += ["", "## Memory per worker", "", "| when | RSS per worker (MB) |", "|---|---|"]
            for mr in self.memory:
                lines.append(f"| {mr.what} | {', '.join(f'{v:.0f}' for v in mr.per_worker_mb)} |")
        lines += ["", "## Closing note", ""]
        misses = self.misses()
        table_misses = [(t.heading.split(" (")[0], miss) for t in self.tables for miss in t.misses]
        if misses or table_misses:
            lines.append("Targets missed in this run:")
            for r in misses:
                ratio = "" if r.ratio is None or math.isnan(r.ratio) else f" ({r.ratio:.3f}x)"
                lines.append(
                    f"- **{r.what}**: {r.ours}{ratio} against {r.target}. {r.why}".rstrip()
                )
            for heading, miss in table_misses:
                lines.append(f"- **{heading}**: {miss} (its table).")
        else:
            lines.append("Every target with a threshold was met in this run.")
        lines += [f"- {note}" for note in self.notes]
        return "\n".join(lines) + "\n"


def machine() -> str:
    """CPU model, usable cores and RAM, from /proc."""
    model = platform.processor() or "unknown CPU"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
        kb = next(
            int(line.split()[1])
            for line in Path("/proc/meminfo").read_text().splitlines()
            if line.startswith("MemTotal:")
        )
        ram = f"{kb / 1024 / 1024:.0f} GiB RAM"
    except (OSError, StopIteration):
        ram = "unknown RAM"
    cores = len(os.sched_getaffinity(0))
    return f"{model}, {cores} cores, {ram}, {platform.system()} {platform.release()}"


def git_commit() -> str:
    try:
        commit = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=True,
            cwd=Path(__file__).parent,
        ).stdout.strip()  # fmt: skip
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no", "--", "extractor"],
            capture_output=True, text=True, cwd=Path(__file__).parent,
        ).stdout.strip()  # fmt: skip
        return commit + (" (with uncommitted changes in extractor/)" if dirty else "")
    except (OSError, subprocess.CalledProcessError):
        return "unknown (not a git checkout)"


def _load_average() -> str:
    try:
        return " / ".join(f"{v:.1f}" for v in os.getloadavg())
    except OSError:
        return "unknown"

"""The benchmark harness still runs end to end (a quick pass; the real numbers come from make bench)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest


@pytest.mark.slow
@pytest.mark.timeout(900)  # a loaded shared machine took 508 s; a quiet one ~2-3 min
def test_quick_benchmark_writes_its_table(tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "bench.run", "--quick", "--skip-openai", "--out", str(tmp_path)],
        cwd=Path(__file__).parent.parent, capture_output=True, text=True, timeout=880,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-2000:]
    table = (tmp_path / "results.md").read_text()
    assert "| what | baseline | ours | ratio | target | met? |" in table
    assert "OCR overhead" in table and "Speech overhead" in table


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_the_live_transcription_bench_writes_a_row(tmp_path: Path) -> None:
    """bench.realtime end to end on its shortest run: one LibriVox stream (~30 s of audio in
    real time) on one method; its figures are make bench's business, not this test's."""
    out = tmp_path / "realtime.md"
    result = subprocess.run(
        [sys.executable, "-m", "bench.realtime", "--streams", "1", "--methods", "short-window",
         "--recordings", "librivox", "--out", str(out)],
        cwd=Path(__file__).parent.parent, capture_output=True, text=True, timeout=580,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-2000:]
    (row,) = [line for line in out.read_text().splitlines() if line.startswith("| librivox |")]
    cells = [cell.strip() for cell in row.strip("|").split("|")]
    assert cells[1:3] == ["short-window", "1"], cells
    assert cells[6].endswith("%") and cells[7].endswith("%"), cells  # WER streamed, whole file
    assert all(float(x) > 0 for x in cells[4].split(" / ")), cells  # words shown p50 / p90 s
    assert cells[-1] == "0", f"failed streams: {cells}"

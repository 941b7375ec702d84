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

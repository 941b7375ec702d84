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
    real time) on one method; its figures are make bench's business, not this test's. The
    table is written anew over the old one, the findings written below it by hand are kept."""
    out = tmp_path / "realtime.md"
    findings = "## Findings written by hand\n\nA finding.\n"
    out.write_text(f"# Old title\n\n| librivox | old | row |\n\n{findings}")
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
    assert out.read_text().endswith("\n\n" + findings) and "Old title" not in out.read_text()


def test_the_turn_bench_splits_and_hears_turns_as_the_stream_would() -> None:
    """bench.realtime_turns: two sentences a second and a half apart are two turns (the live
    server_vad's split), each heard by the real whole-file engine with or without audio
    around it, and only its own words kept."""
    import numpy as np

    from bench import realtime_eval, realtime_turns
    from extractor import samples
    from extractor.asr.faster import FasterWhisperEngine

    first = realtime_eval._mono16k(samples.speech_wav("The soup needs more salt."))
    second = realtime_eval._mono16k(samples.speech_wav("Please water the plants."))
    pause = np.zeros(24_000, np.float32)
    audio = np.concatenate([pause, first, pause, second, pause])
    spans = realtime_turns.turns(audio)
    assert len(spans) == 2, spans
    between = (24_000 + len(first), 48_000 + len(first))  # the pause between the sentences
    assert between[0] < spans[0][1] <= between[1] and between[0] < spans[1][0] < between[1]
    engine = FasterWhisperEngine(None, threads=1)
    alone = realtime_turns.heard_alone(engine, audio, spans[:1], 0.0, "both")
    assert "soup" in alone.lower() and "plants" not in alone.lower(), alone
    after = realtime_turns.heard_alone(engine, audio, spans[1:], 3.0, "left")
    assert "please water" in after.lower() and "soup" not in after.lower(), after

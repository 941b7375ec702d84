"""The accuracy gate: the service's WER, CER and speaker figures on material nobody tuned on
(bench/accuracy_gate.py) must not fall below bench/accuracy-baseline.json by more than its
margins. The server keeps this environment's EXTRACTOR_* settings, so a setting that hurts
accuracy fails here. Regenerate the baseline with `make accuracy-baseline`."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench import accuracy_gate
from extractor.asr.models import installed_models
from extractor.asr.speakers import speakers_available

# serial: the gate runs the engines over the held-out sets alone (make test's second pass).
pytestmark = [pytest.mark.slow, pytest.mark.serial]
SPEAKER_FIGURES = ("talk_", "call_words", "call_time", "call_speakers")


@pytest.fixture(scope="module")
def figures(tmp_path_factory: pytest.TempPathFactory) -> dict[str, accuracy_gate.Figure]:
    measured = accuracy_gate.measure(
        speakers=speakers_available(), log_dir=tmp_path_factory.mktemp("accuracy")
    )
    return {figure.name: figure for figure in measured}


@pytest.mark.parametrize("name", sorted(accuracy_gate.load_baseline()))
def test_figure_holds_its_baseline(name: str, figures: dict[str, accuracy_gate.Figure]) -> None:
    if name.startswith(SPEAKER_FIGURES) and not speakers_available():
        pytest.skip("speakers=auto needs the extractor[speakers] extra")
    if name.startswith("base_") and "base" not in installed_models():
        pytest.skip("model=base needs the extractor[base] extra")
    assert name in figures, f"the gate no longer measures {name}"
    assert accuracy_gate.failures([figures[name]]) == []


def test_gate_fails_a_figure_worse_than_its_margin(tmp_path: Path) -> None:
    """The comparison itself, without a server: one point past the margin fails, the margin
    itself passes, and better is always fine."""
    baseline = tmp_path / "baseline.json"
    accuracy_gate.write_baseline(
        [accuracy_gate.Figure("librivox_wer", 0.05, True, "wer"),
         accuracy_gate.Figure("call_time_right", 0.80, False, "right")],
        baseline,
    )  # fmt: skip
    wer = accuracy_gate.MARGINS["wer"]
    right = accuracy_gate.MARGINS["right"]

    def fails(name: str, value: float, lower: bool, kind: str) -> bool:
        return bool(
            accuracy_gate.failures([accuracy_gate.Figure(name, value, lower, kind)], baseline)
        )

    assert not fails("librivox_wer", 0.05 + wer, True, "wer")
    assert fails("librivox_wer", 0.05 + wer + 0.01, True, "wer")
    assert not fails("librivox_wer", 0.0, True, "wer")
    assert not fails("call_time_right", 0.80 - right, False, "right")
    assert fails("call_time_right", 0.80 - right - 0.01, False, "right")
    assert not fails("call_time_right", 1.0, False, "right")

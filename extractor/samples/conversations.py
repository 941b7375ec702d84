"""Generated conversations with known turns: test and benchmark material for ``speakers=auto``.

espeak-ng voices take turns of 2-8 s with short pauses, concatenated with numpy, so the test
suite and ``bench.speakers`` can score speaker labels against who really spoke each word
without any recording a user may not have. Kept apart from ``samples`` because only speaker
labelling needs it.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from itertools import permutations

import numpy as np

from extractor.samples import decode_wav, encode_audio, speech_wav

VOICES = ("en+m3", "en+f3", "en+m7")  # two men and a woman, as espeak-ng varies its one voice
WORDS_PER_SECOND = 2.5  # espeak-ng at its default 150 words per minute
# Whole sentences: Whisper tiny.en skipped whole 30 s windows of shuffled word lists.
SENTENCES = (
    "Did you finish the report for the meeting on Friday?",
    "Yes, I sent it to the whole team this morning.",
    "The train to the coast leaves at seven tomorrow.",
    "We should bring warm coats because the wind is cold there.",
    "My sister called about the garden again.",
    "She wants to plant tomatoes near the fence this spring.",
    "How much did the new printer cost in the end?",
    "It was cheaper than the old one and it prints much faster.",
    "Please remember to water the plants on the balcony.",
    "I will, and I will feed the cat before I leave.",
    "The library closes early on Sundays during the summer.",
    "Then let us meet at the cafe on the corner instead.",
    "Our budget for next year looks better than we expected.",
    "The bakery down the street sells fresh bread every morning.",
    "Could you check the weather before we go hiking?",
    "They say it will rain in the afternoon but stay dry until noon.",
    "The children painted the old boat bright blue and yellow.",
    "I think the museum has a new exhibition about ships.",
    "Let us take the bus, parking in the city is expensive.",
    "The doctor said I should walk for half an hour every day.",
)
SILENT = 0.01  # amplitude below which espeak-ng's lead-in and tail count as silence


@dataclass(frozen=True)
class Turn:
    """One speaker's turn: who (an index into the voices), when (seconds) and what was said."""

    speaker: int
    start: float
    end: float
    text: str


@dataclass(frozen=True)
class Conversation:
    samples: np.ndarray  # (1, n) float32 at ``rate``
    rate: int  # Hz, espeak-ng's own (22.05 kHz)
    turns: tuple[Turn, ...]

    @property
    def duration(self) -> float:
        return self.samples.shape[1] / self.rate

    def wav(self) -> bytes:
        return encode_audio(self.samples, self.rate, "wav")

    def speaker_at(self, seconds: float) -> int:
        """Who spoke at ``seconds``, or the nearest turn's speaker within a pause."""
        nearest = min(self.turns, key=lambda t: max(t.start - seconds, seconds - t.end, 0))
        return nearest.speaker


def conversation(
    voices: tuple[str, ...] = VOICES[:2],
    turns: int = 12,
    *,
    seed: int = 0,
    turn_seconds: tuple[float, float] = (2.0, 8.0),
    pause_seconds: tuple[float, float] = (0.3, 0.8),
) -> Conversation:
    """``turns`` turns by ``voices``: each voice speaks once in order, then a random other one."""
    rng = random.Random(seed)
    parts: list[np.ndarray] = []
    made: list[Turn] = []
    rate = 0
    clock = 0.0
    for index in range(turns):
        if index < len(voices):
            speaker = index
        else:
            speaker = rng.choice([v for v in range(len(voices)) if v != made[-1].speaker])
        wanted = rng.uniform(*turn_seconds) * WORDS_PER_SECOND  # words
        said: list[str] = []
        while not said or sum(len(s.split()) for s in said) + 4 < wanted:
            said.append(SENTENCES[rng.randrange(len(SENTENCES))])
        text = " ".join(said)
        samples, rate = decode_wav(speech_wav(text, voice=voices[speaker]))
        loud = np.flatnonzero(np.abs(samples[0]) > SILENT)
        spoken = samples[:, loud[0] : loud[-1] + 1]
        made.append(Turn(speaker, clock, clock + spoken.shape[1] / rate, text))
        pause = np.zeros((1, int(rng.uniform(*pause_seconds) * rate)), np.float32)
        parts += [spoken, pause]
        clock += (spoken.shape[1] + pause.shape[1]) / rate
    return Conversation(np.concatenate(parts, axis=1), rate, tuple(made))


def word_accuracy(
    conversation: Conversation, words: list[tuple[float, float, str]]
) -> tuple[float, int]:
    """Share of ``words`` (start, end, label) labelled right under the best label mapping,
    and how many distinct labels there were.

    The labeller names speakers in its own way, so its labels are mapped one-to-one onto the
    true speakers in the way that gets the most words right (an assignment problem, solved
    exactly), as diarization error rates are scored; labels left over count as wrong.
    """
    if not words:
        return 0.0, 0
    labels = sorted({label for _start, _end, label in words})
    speakers = sorted({turn.speaker for turn in conversation.turns})
    agree = np.zeros((len(labels), len(speakers)), np.int64)  # words per (label, true speaker)
    for start, end, label in words:
        agree[labels.index(label), speakers.index(conversation.speaker_at((start + end) / 2))] += 1
    return _best_assignment(agree) / len(words), len(labels)


def _best_assignment(agree: np.ndarray) -> int:
    try:
        from scipy.optimize import linear_sum_assignment  # with the speakers extra
    except ImportError:  # few labels: trying every mapping is quick enough
        rows, cols = agree.shape
        if rows > cols:
            agree = agree.T
            rows, cols = cols, rows
        return max(
            int(sum(agree[r, c] for r, c in enumerate(chosen)))
            for chosen in permutations(range(cols), rows)
        )
    picked_rows, picked_cols = linear_sum_assignment(agree, maximize=True)
    return int(agree[picked_rows, picked_cols].sum())

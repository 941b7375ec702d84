"""The one small interface every speech engine implements, and what it returns."""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

import numpy as np


@dataclass(frozen=True)
class TimedWord:
    text: str
    start: float  # seconds from the start of the audio
    end: float  # seconds


@dataclass(frozen=True)
class TranscriptSegment:
    """One line of speech as the engine segmented it."""

    start: float  # seconds
    end: float  # seconds
    text: str
    words: tuple[TimedWord, ...] = ()
    # The decoder's own numbers for this segment (Whisper: tokens, temperature, avg_logprob,
    # compression_ratio, no_speech_prob), for renderings that show them (OpenAI verbose_json).
    detail: Mapping[str, Any] | None = None


@dataclass(frozen=True)
class Transcript:
    segments: tuple[TranscriptSegment, ...]
    language: str | None
    # How sure the model was of ``language`` when it detected it (0-1); None when it was given.
    language_probability: float | None = None


@dataclass(frozen=True)
class TranscribeOptions:
    """Decoding options shared by every engine; each maps them onto its own call."""

    language: str | None = None  # ISO 639-1; None: let the model detect it
    beam_size: int = 5  # 1 is greedy decoding
    vad: bool = True  # drop silence and noise before decoding
    # The audio is speech the server's VAD already found (vad then off): like ``vad``, no window
    # of it is skipped as silence; one the decoder doubts is kept and marked (asr/fallback.py).
    speech_only: bool = False
    word_timestamps: bool = False  # also time every word
    prompt: str | None = None  # text that conditions the first window (spelling, names, style)
    temperature: float | None = None  # None or 0: greedy/beam with Whisper's fallback schedule
    cancel: threading.Event | None = field(default=None, compare=False)  # set: stop early
    # Told each segment as soon as the engine has it (faster-whisper: as each 30 s window is
    # decoded), times relative to the audio it was given; a streamed reply sends its text on.
    on_segment: Callable[[TranscriptSegment], None] | None = field(default=None, compare=False)


@runtime_checkable
class SpeechEngine(Protocol):
    """A Whisper implementation: loaded once per worker, then called per request."""

    name: str

    def load(self) -> None:
        """Load (and warm) the model; called at worker start, never per request."""

    def unload(self) -> None:
        """Drop the model, for a worker that keeps only so many loaded (a later load reloads)."""

    @property
    def loaded(self) -> bool: ...

    def languages(self) -> frozenset[str]:
        """ISO 639-1 codes the loaded model can transcribe (only "en" for English-only models)."""
        ...

    def transcribe(self, audio: np.ndarray, options: TranscribeOptions) -> Transcript:
        """Transcribe 16 kHz mono float32 samples."""
        ...


def speech_regions(audio: np.ndarray) -> list[tuple[float, float]]:
    """Where Silero VAD (shipped inside faster-whisper) hears speech, in seconds."""
    from faster_whisper.vad import VadOptions, get_speech_timestamps

    from ..media.audio import SAMPLE_RATE
    from . import silero

    silero.install()
    stamps = get_speech_timestamps(audio, VadOptions())
    return [(s["start"] / SAMPLE_RATE, s["end"] / SAMPLE_RATE) for s in stamps]

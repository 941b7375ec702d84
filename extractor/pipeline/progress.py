"""An extraction's progress, for asynchronous jobs: told the pages or seconds of audio done of
the total as they are done. A job's report raises to stop the extraction there (cancelled, its
lease lost, its server stopping), so these calls are also where a running job can stop."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from extractor.asr import TranscribeOptions, Transcript
from extractor.media.audio import SAMPLE_RATE

# Told how much is done of how much in all (pages, or seconds of audio).
Progress = Callable[[float, float], None]


def no_progress(_done: float, _total: float) -> None:
    """A synchronous request's progress: nobody asks."""


def shifted(progress: Progress, before: int, total: int, done: float, _part: float) -> None:
    """The progress of one stereo channel as progress of both: ``before`` samples done before
    it, of ``total`` samples in all."""
    progress(before / SAMPLE_RATE + done, total / SAMPLE_RATE)


class ReportingEngine:
    """A speech engine that calls ``done()`` after each transcription it makes (what it was
    given is then transcribed); everything else is the engine's own."""

    def __init__(self, engine: Any, done: Callable[[], None]) -> None:
        self._engine = engine
        self._done = done

    def transcribe(self, audio: np.ndarray, options: TranscribeOptions) -> Transcript:
        transcript: Transcript = self._engine.transcribe(audio, options)
        self._done()
        return transcript

    def __getattr__(self, name: str) -> Any:
        return getattr(self._engine, name)

"""server_vad: where speech starts and stops in a live stream, from Silero VAD's probabilities.

Every 512-sample window (32 ms at 16 kHz) gets a speech probability from the project's own
Silero VAD (``extractor.asr.silero``, the model faster-whisper ships, run in numpy). Speech
starts when a window reaches ``threshold``, and is reported once ``MIN_SPEECH_MS`` of windows
at or above it have followed (a click or a cough alone starts no turn); it stops after
``silence_duration_ms`` of windows below ``threshold - 0.15`` (Silero's own hysteresis, as
faster-whisper applies it). Times are sample indexes of the session's 16 kHz audio.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..asr.silero import WINDOW, SileroStream
from .audio import SAMPLE_RATE
from .events import ServerVad

MIN_SPEECH_MS = 160  # speech windows needed before a turn is reported started
HYSTERESIS = 0.15  # speech continues until the probability falls this far below threshold
PAUSE_MS = 200  # a pause long enough to cut a long turn's decoding window at


@dataclass
class Change:
    """Speech started (``start``: its first sample) or stopped (``end``: the sample where
    the silence that ended it reached ``silence_duration_ms``; ``speech_end``: the last
    speech window's end)."""

    kind: str  # "started" | "stopped"
    start: int = 0
    end: int = 0
    speech_end: int = 0


class TurnDetector:
    """Feeds 16 kHz samples through Silero and reports speech starting and stopping."""

    def __init__(self, config: ServerVad) -> None:
        self.config = config
        self.vad = SileroStream()
        self.position = 0  # samples given probabilities so far
        self.speaking = False  # a turn has been reported started and not yet stopped
        self.candidate: int | None = None  # first sample of speech not yet reported
        self.speech_windows = 0  # windows at or above threshold since the candidate began
        self.quiet_windows = 0  # windows below threshold - HYSTERESIS in a row
        self.speech_end = 0  # end of the last window heard as speech

    def feed(self, samples: np.ndarray) -> list[Change]:
        changes: list[Change] = []
        threshold = self.config.threshold
        silence_windows = max(
            1, round(self.config.silence_duration_ms * SAMPLE_RATE / 1000 / WINDOW)
        )
        needed = max(1, round(MIN_SPEECH_MS * SAMPLE_RATE / 1000 / WINDOW))
        for prob in self.vad.feed(samples):
            start, self.position = self.position, self.position + WINDOW
            if prob >= threshold:
                self.quiet_windows = 0
                self.speech_end = self.position
                if self.candidate is None and not self.speaking:
                    self.candidate, self.speech_windows = start, 0
                self.speech_windows += 1
                if not self.speaking and self.speech_windows >= needed:
                    assert self.candidate is not None
                    self.speaking = True
                    changes.append(Change("started", start=self.candidate))
                continue
            if prob < threshold - HYSTERESIS or (self.candidate is not None and not self.speaking):
                self.quiet_windows += 1
            if self.quiet_windows >= silence_windows:
                if self.speaking:
                    changes.append(Change("stopped", end=self.position, speech_end=self.speech_end))
                self.speaking, self.candidate, self.speech_windows = False, None, 0
        return changes

    def restart(self) -> None:
        """Forget the turn in progress (committed or cleared by the client): speech from
        here on starts a new one."""
        self.speaking, self.candidate, self.speech_windows = False, None, 0

    @property
    def pausing(self) -> bool:
        """The speaker has been quiet for at least ``PAUSE_MS`` (a place to cut a window)."""
        return self.quiet_windows * WINDOW >= PAUSE_MS * SAMPLE_RATE / 1000

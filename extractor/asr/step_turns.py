"""Which of Whisper's memory-heavy steps may run at once on one worker's model.

One worker's ``WhisperModel`` serves several threads at once: a file transcription, a live
session's decodes (``realtime/decoder.py``, on a CTranslate2 worker of its own) and an
asynchronous job's transcription. Each step has its own peak above the worker (measured
in-process, tiny.en int8, one thread; bench/memory.md):

- the encoder: ~2.4 MB per second of window, its self-attention scores growing with the square
  of the window (10 s +18-21 MB, 20 s +41-43 MB, 29 s +67-74 MB, 30 s +71-83 MB);
- the decoder (``generate``), beam 5: +15 MB on a 10 s window, +25 MB on 20 s, +31-40 MB on 30 s;
- the log-mel features of a 30 s block: +26-31 MB (10 s: +12 MB).

A file's 30 s encoder beside a live decode took a worker to 323-330 MB, and with the encoders
merely kept apart to 302-314 MB: a file's encoder beside a live window's decoder, or a live 29 s
window's encoder beside a file's decoder, each ~+105 MB. One step at a time would stay at the
encoder's own peak, but a live word would then wait behind every file decode (seconds). So the
big steps run alone and the others together:

- an encoder pass over more than ``SHARED_ENCODE_FRAMES`` (a file's 30 s windows; a live window
  past 20 s) runs **alone**: it waits for the steps in flight and holds the rest back;
- every other step (a shorter encoder pass, a decode, word alignment, features) runs **beside** other such
  steps; the worst such pair, a 20 s encoder beside a 30 s decode, is ~+75 MB, under the 30 s
  encoder's own peak.

A step waiting to run alone goes before steps that come after it (a steady stream of live
decodes cannot hold a file's encoder back). Steps of one thread never nest, so a thread never
waits for itself.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager

# Frames of log-mel features (10 ms each) up to which an encoder pass runs beside other steps.
SHARED_ENCODE_FRAMES = 2000  # 20 s: +41-43 MB, beside a 30 s beam-5 decode's +31-40 MB


class StepTurns:
    """A readers-writer lock over one model's heavy steps, the writer (``alone``) first."""

    def __init__(self) -> None:
        self._changed = threading.Condition()
        self._beside = 0  # steps running together
        self._alone = False  # a step running alone
        self._waiting_alone = 0  # steps waiting to run alone: later steps wait behind them

    @contextmanager
    def beside(self) -> Iterator[None]:
        """Run a step together with other such steps, never beside one that runs alone."""
        with self._changed:
            while self._alone or self._waiting_alone:
                self._changed.wait()
            self._beside += 1
        try:
            yield
        finally:
            with self._changed:
                self._beside -= 1
                self._changed.notify_all()

    @contextmanager
    def alone(self) -> Iterator[None]:
        """Run a step with no other step of the model in flight."""
        with self._changed:
            self._waiting_alone += 1
            try:
                while self._alone or self._beside:
                    self._changed.wait()
            finally:
                self._waiting_alone -= 1
            self._alone = True
        try:
            yield
        finally:
            with self._changed:
                self._alone = False
                self._changed.notify_all()

    def encode(self, frames: int) -> AbstractContextManager[None]:
        """The turn of an encoder pass over ``frames`` frames of features."""
        return self.alone() if frames > SHARED_ENCODE_FRAMES else self.beside()

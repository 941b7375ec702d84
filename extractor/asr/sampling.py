"""Whisper's temperature fallback with its ``best_of`` samples drawn one at a time.

When a window's beam-search text fails faster-whisper's checks (compression ratio, average
log-probability), it decodes again by sampling at rising temperatures, ``best_of`` (5) samples
at once, and keeps the best-scoring one. CTranslate2 decodes those samples as one batch, with the
encoder output and the cross-attention keys and values repeated for each: a 25 s window of
repeated speech that fell back took a worker 66 MB above the same window decoded without
fallback (353 against 287 MB, bench/memory.md), past the 300 MB a worker must stay within.

:class:`OneSampleAtATime` stands in for the CTranslate2 model faster-whisper calls and draws
the samples one after another, keeping the best-scoring as CTranslate2 does (it returns the
hypotheses sorted by score and faster-whisper reads the first). The same distribution, one
sample's memory, at some CPU on the (rare) windows that fall back; beam search is untouched.

Every ``generate`` call (a beam search, each sample) first calls ``interrupt``, which raises to
stop a cancelled transcription: a window of repeated speech can fall back through all six
temperatures, 30 decodes, and a cancelled job or request otherwise ran on until the window's end
(13-25 s on a loaded machine, test_jobs_load) instead of stopping within one decode.

It also returns the freed heap to the system before each ``encode``. The engine trims after
each segment it receives, but a window that yields no segment (its text skipped, or all of it
carried to the next window) reaches the next window's encoder with the decoder's freed memory
still held: after a window that fell back, ~45 MB, which the encoder's own blocks (mmap'd, over
``heap.MMAP_THRESHOLD``) do not reuse. That put a 60-minute recording of one repeated clip at
305 MB against 285 MB for 10 minutes (bench/memory.md); a trim costs ~1 ms per 30 s window.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..heap import trim_heap
from .step_turns import StepTurns


def _never() -> None:
    return None


class OneSampleAtATime:
    """A ``ctranslate2.models.Whisper`` whose sampling ``generate`` draws one hypothesis per call
    and whose ``encode`` starts on a trimmed heap."""

    def __init__(
        self, model: Any, interrupt: Callable[[], None] = _never, turns: StepTurns | None = None
    ) -> None:
        self._model = model
        self._interrupt = interrupt  # raises when the calling thread's transcription must stop
        self.turns = turns or StepTurns()  # which heavy steps of the threads sharing it run at once

    def __getattr__(self, name: str) -> Any:  # detect_language, align, is_multilingual, ...
        return getattr(self._model, name)

    def encode(self, features: Any, *args: Any, **kwargs: Any) -> Any:
        """The model's ``encode`` in its turn (``step_turns``), on a trimmed heap (see the
        module's docstring)."""
        with self.turns.encode(int(features.shape[-1])):
            trim_heap()
            return self._model.encode(features, *args, **kwargs)

    def generate(self, features: Any, prompts: Any, *args: Any, **kwargs: Any) -> list[Any]:
        """The model's ``generate`` beside the other threads' light steps, its freed memory
        then handed back (a live session decodes every 0.4 s: ~25 MB held between decodes)."""
        try:
            with self.turns.beside():
                return self._generate(features, prompts, *args, **kwargs)
        finally:
            trim_heap()

    def align(self, *args: Any, **kwargs: Any) -> Any:
        """The model's ``align`` (word timestamps: the decoder's cross-attention over a window),
        beside the other threads' light steps, never beside a big encoder pass."""
        with self.turns.beside():
            return self._model.align(*args, **kwargs)

    def _generate(self, features: Any, prompts: Any, *args: Any, **kwargs: Any) -> list[Any]:
        samples = int(kwargs.get("num_hypotheses", 1))
        self._interrupt()
        if samples <= 1 or "sampling_temperature" not in kwargs:
            return list(self._model.generate(features, prompts, *args, **kwargs))
        kwargs["num_hypotheses"] = 1
        best: list[Any] | None = None
        for index in range(samples):
            if index:
                self._interrupt()
            drawn = self._model.generate(features, prompts, *args, **kwargs)
            if best is None:
                best = list(drawn)
                continue
            for prompt, result in enumerate(drawn):  # per prompt: the higher score wins
                if result.scores and (
                    not best[prompt].scores or result.scores[0] > best[prompt].scores[0]
                ):
                    best[prompt] = result
        assert best is not None
        return best

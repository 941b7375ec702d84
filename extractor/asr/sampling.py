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

It also returns the freed heap to the system before each ``encode``. The engine trims after
each segment it receives, but a window that yields no segment (its text skipped, or all of it
carried to the next window) reaches the next window's encoder with the decoder's freed memory
still held: after a window that fell back, ~45 MB, which the encoder's own blocks (mmap'd, over
``heap.MMAP_THRESHOLD``) do not reuse. That put a 60-minute recording of one repeated clip at
305 MB against 285 MB for 10 minutes (bench/memory.md); a trim costs ~1 ms per 30 s window.
"""

from __future__ import annotations

from typing import Any

from ..heap import trim_heap


class OneSampleAtATime:
    """A ``ctranslate2.models.Whisper`` whose sampling ``generate`` draws one hypothesis per call
    and whose ``encode`` starts on a trimmed heap."""

    def __init__(self, model: Any) -> None:
        self._model = model

    def __getattr__(self, name: str) -> Any:  # detect_language, align, is_multilingual, ...
        return getattr(self._model, name)

    def encode(self, features: Any, *args: Any, **kwargs: Any) -> Any:
        """The model's ``encode``, on a trimmed heap (see the module's docstring)."""
        trim_heap()
        return self._model.encode(features, *args, **kwargs)

    def generate(self, features: Any, prompts: Any, *args: Any, **kwargs: Any) -> list[Any]:
        samples = int(kwargs.get("num_hypotheses", 1))
        if samples <= 1 or "sampling_temperature" not in kwargs:
            return list(self._model.generate(features, prompts, *args, **kwargs))
        kwargs["num_hypotheses"] = 1
        best: list[Any] | None = None
        for _ in range(samples):
            drawn = self._model.generate(features, prompts, *args, **kwargs)
            if best is None:
                best = list(drawn)
                continue
            for index, result in enumerate(drawn):  # per prompt: the higher score wins
                if result.scores and (
                    not best[index].scores or result.scores[0] > best[index].scores[0]
                ):
                    best[index] = result
        assert best is not None
        return best

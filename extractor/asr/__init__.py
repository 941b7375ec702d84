"""Speech engines behind one Protocol, chosen by name from a registry."""

from __future__ import annotations

from pathlib import Path
from typing import Protocol

from .base import SpeechEngine, TranscribeOptions, Transcript, TranscriptSegment


class EngineFactory(Protocol):
    """Builds an engine (unloaded) from the deployment's settings; ``parallel`` is how many
    transcriptions the worker runs at once (``EXTRACTOR_ENGINE_SLOTS``)."""

    def __call__(
        self, model: str | None, threads: int, compute_type: str, cache_dir: Path,
        parallel: int = 1,
    ) -> SpeechEngine: ...  # fmt: skip


def _faster(
    model: str | None, threads: int, compute_type: str, cache_dir: Path, parallel: int = 1
) -> SpeechEngine:
    from .faster import FasterWhisperEngine

    # One model for all of the worker's engine slots, run by as many CTranslate2 workers
    # (inter_threads): the slots share its weights instead of waiting for one another.
    return FasterWhisperEngine(
        model, compute_type=compute_type, threads=threads, parallel=parallel, cache_dir=cache_dir
    )


def _openai(
    model: str | None, threads: int, compute_type: str, cache_dir: Path, parallel: int = 1
) -> SpeechEngine:
    from .openai import OpenAIWhisperEngine

    return OpenAIWhisperEngine(model, cache_dir=cache_dir, threads=threads)


# Keyed by the EXTRACTOR_ASR_ENGINE value; each import stays lazy so torch loads only on demand.
ENGINES: dict[str, EngineFactory] = {"faster-whisper": _faster, "openai-whisper": _openai}

__all__ = ["ENGINES", "SpeechEngine", "TranscribeOptions", "Transcript", "TranscriptSegment"]

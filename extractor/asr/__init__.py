"""Speech engines behind one Protocol, chosen by name from a registry."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from .base import SpeechEngine, TranscribeOptions, Transcript, TranscriptSegment

EngineFactory = Callable[[str | None, int, str, Path], SpeechEngine]


def _faster(model: str | None, threads: int, compute_type: str, cache_dir: Path) -> SpeechEngine:
    from .faster import FasterWhisperEngine

    return FasterWhisperEngine(model, compute_type=compute_type, threads=threads)


def _openai(model: str | None, threads: int, compute_type: str, cache_dir: Path) -> SpeechEngine:
    from .openai import OpenAIWhisperEngine

    return OpenAIWhisperEngine(model, cache_dir=cache_dir, threads=threads)


# Keyed by the EXTRACTOR_ASR_ENGINE value; each import stays lazy so torch loads only on demand.
ENGINES: dict[str, EngineFactory] = {"faster-whisper": _faster, "openai-whisper": _openai}

__all__ = ["ENGINES", "SpeechEngine", "TranscribeOptions", "Transcript", "TranscriptSegment"]

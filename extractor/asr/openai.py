"""openai-whisper (torch, fp32 on CPU), offline: by default on a checkpoint built from the
bundled CTranslate2 weights. torch is imported only when this engine is selected."""

from __future__ import annotations

import logging
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import EngineFailure, EngineUnavailable
from .base import TimedWord, TranscribeOptions, Transcript, TranscriptSegment, speech_regions

log = logging.getLogger(__name__)


class OpenAIWhisperEngine:
    """The reference Whisper implementation.

    It has no voice activity detection of its own, so the same Silero VAD that faster-whisper
    uses decides first whether there is speech at all and which segments to keep.
    """

    name = "openai-whisper"

    def __init__(self, model: str | None, *, cache_dir: Path, threads: int = 1) -> None:
        self.model_name = model
        self.cache_dir = cache_dir
        self.threads = threads
        self._model: Any = None
        # Its temperature fallback samples from torch's one global generator: each
        # transcription seeds it afresh and has it alone, so one upload reads one way.
        self._sampling = threading.Lock()

    @property
    def loaded(self) -> bool:
        return self._model is not None

    def unload(self) -> None:
        self._model = None

    def _load_model(self) -> tuple[Any, str]:
        """A CTranslate2 directory (the default) is converted once and cached; anything else is
        an openai-whisper model name or ``.pt`` path for ``whisper.load_model``."""
        import whisper

        from .ct2_convert import cached_openai_checkpoint, load_openai_model
        from .ct2_model import ModelConversionError
        from .models import model_directory

        source = Path(model_directory(self.model_name, self.cache_dir))
        try:
            if (source / "model.bin").is_file():
                checkpoint = cached_openai_checkpoint(source, self.cache_dir)
                return load_openai_model(checkpoint), str(checkpoint)
            model = whisper.load_model(str(source), device="cpu", download_root=str(self.cache_dir))
            return model, str(source)
        except (ModelConversionError, RuntimeError, OSError, ValueError) as exc:
            raise EngineUnavailable(f"openai-whisper could not load {source}: {exc}") from exc

    def load(self) -> None:
        if self._model is not None:
            return
        import torch

        torch.set_num_threads(self.threads)
        model, checkpoint = self._load_model()
        started = time.monotonic()
        # The first call with word timestamps compiles numba's DTW (~12 s): pay it here.
        from whisper.timing import dtw_cpu

        dtw_cpu(np.random.default_rng(0).random((8, 8)))
        model.transcribe(np.zeros(16_000, np.float32), fp16=False, language="en")
        log.info(
            "openai-whisper loaded and warmed",
            extra={"checkpoint": checkpoint, "warm_s": round(time.monotonic() - started, 2)},
        )
        self._model = model

    def transcribe(self, audio: np.ndarray, options: TranscribeOptions) -> Transcript:
        self.load()
        regions = speech_regions(audio) if options.vad else None
        if regions is not None and not regions:
            return Transcript((), options.language or self._default_language())
        language = options.language if self._model.is_multilingual else "en"
        decode: dict[str, Any] = {"beam_size": options.beam_size, "best_of": options.beam_size}
        if options.beam_size == 1:
            decode = {}
        import torch

        try:
            with self._sampling:
                torch.manual_seed(SAMPLING_SEED)
                result = self._model.transcribe(
                    audio,
                    language=language,
                    fp16=False,
                    word_timestamps=options.word_timestamps,
                    verbose=None,
                    initial_prompt=options.prompt,
                    **decode,
                    **_temperature(options.temperature),
                )
        except (RuntimeError, ValueError) as exc:
            raise EngineFailure(f"openai-whisper failed: {exc}") from exc
        segments = []
        for s in result["segments"]:
            if regions is not None and not _overlaps(s["start"], s["end"], regions):
                continue
            words = tuple(
                TimedWord(w["word"].strip(), w["start"], w["end"]) for w in s.get("words", ())
            )
            detail = {key: s[key] for key in SEGMENT_DETAIL if key in s}
            segments.append(TranscriptSegment(s["start"], s["end"], s["text"], words, detail))
        return Transcript(tuple(segments), result.get("language"))

    def languages(self) -> frozenset[str]:
        from whisper.tokenizer import LANGUAGES

        self.load()
        return frozenset(LANGUAGES) if self._model.is_multilingual else frozenset({"en"})

    def _default_language(self) -> str | None:
        return None if self._model.is_multilingual else "en"


SAMPLING_SEED = 0  # any fixed number: the same samples for the same audio, on every request
SEGMENT_DETAIL = ("tokens", "temperature", "avg_logprob", "compression_ratio", "no_speech_prob")


def _temperature(temperature: float | None) -> dict[str, Any]:
    """openai-whisper's fallback schedule unless a positive temperature is asked for."""
    return {"temperature": temperature} if temperature else {}


def _overlaps(start: float, end: float, regions: list[tuple[float, float]]) -> bool:
    return any(start < r_end and r_start < end for r_start, r_end in regions)

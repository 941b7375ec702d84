"""faster-whisper (CTranslate2, int8 on CPU): the default engine; needs neither torch nor ffmpeg."""

from __future__ import annotations

import functools
import gc
import logging
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import EngineFailure, EngineTimeout, EngineUnavailable
from ..heap import trim_heap
from . import fallback
from .base import TimedWord, TranscribeOptions, Transcript, TranscriptSegment
from .embedding_file import MappedEmbedding, map_token_embedding
from .models import bundled_model_dir
from .sampling import OneSampleAtATime
from .step_turns import StepTurns

log = logging.getLogger(__name__)
# Seconds the current thread's transcription spent in each timed part (see ``_timed``).
_spent = threading.local()


class FasterWhisperEngine:
    """Whisper on CTranslate2; segments are produced lazily, so a cancel stops between them."""

    name = "faster-whisper"
    # Its VAD cuts the silence out and joins the speech before decoding, so the server may do
    # that across its windows and hand it the joined speech (``speech_windows``).
    joins_speech = True

    def __init__(
        self, model: str | None, *, compute_type: str = "int8", threads: int = 1, parallel: int = 1,
        cache_dir: Path | None = None,
    ) -> None:  # fmt: skip
        self.model_name = model or str(bundled_model_dir())
        self.compute_type = compute_type
        self.threads = threads
        self.parallel = parallel  # transcriptions the one model runs at once (num_workers)
        # Where an int8 copy of a float model is written once (ct2_int8.py); None: load as is.
        self.cache_dir = cache_dir
        self._model: Any = None
        self._embedding = MappedEmbedding([])  # the model's matrix read from a file

    @property
    def loaded(self) -> bool:
        return self._model is not None

    def load(self) -> None:
        if self._model is not None:
            return
        from faster_whisper import WhisperModel

        from . import silero

        omp_limit = os.environ.get("OMP_THREAD_LIMIT", "")
        if omp_limit.isdigit() and int(omp_limit) < self.threads:
            # Measured: CTranslate2 then returns garbage text without any error.
            raise EngineUnavailable(
                f"OMP_THREAD_LIMIT={omp_limit} is below EXTRACTOR_ASR_THREADS={self.threads}, which"
                " makes CTranslate2 decode garbage; unset OMP_THREAD_LIMIT (Tesseract gets its own)"
            )
        try:
            model_path = self._model_path()
            self._model = WhisperModel(
                model_path,
                device="cpu",
                compute_type=self.compute_type,
                cpu_threads=self.threads,
                num_workers=self.parallel,
            )
            # Fallback samples one at a time: a batch of 5 took a worker past 300 MB (sampling).
            # Its heavy steps take turns between the threads sharing it (step_turns.py).
            turns = StepTurns()
            self._model.model = OneSampleAtATime(self._model.model, _stop_if_cancelled, turns)
            # Speech that repeats no longer sets off the random fallback (fallback.py).
            fallback.install(self._model)
        except (RuntimeError, ValueError, OSError) as exc:
            raise EngineUnavailable(
                f"faster-whisper could not load {self.model_name}: {exc}"
            ) from exc
        # Its largest matrix read from a file as tokens need it (embedding_file.py): ~20 MB.
        self._embedding = map_token_embedding(Path(model_path), self.cache_dir)
        # Same features, but their scratch memory is returned before the encoder runs.
        self._model.feature_extractor = _timed_features()(**self._model.feat_kwargs)
        self._model.feature_extractor.turns = turns
        silero.install()  # the same VAD without onnxruntime's ~34 MB
        _time_parts()
        self._warm()
        self._embedding.release()
        log.info("faster-whisper loaded", extra={"model": self.model_name})

    def unload(self) -> None:
        """Drop the model: its memory returns once no transcription in flight holds it."""
        self._model = None
        self._embedding = MappedEmbedding([])
        # The model and its wrappers (sampling, fallback) refer to each other: without a
        # collection base's ~80 MB stayed until the garbage collector's next full pass.
        gc.collect()
        trim_heap()

    def whisper_model(self) -> Any:
        """The loaded ``WhisperModel``, for a live decoder that runs on one of its CTranslate2
        workers (``parallel`` counts it): the weights are shared, not loaded twice."""
        self.load()
        return self._model

    def _model_path(self) -> str:
        """The model directory to load: for int8, a copy already quantized (``ct2_int8``)."""
        from .ct2_int8 import loadable_model

        return loadable_model(self.model_name, self.compute_type, self.cache_dir)

    def _warm(self) -> None:
        """Run the decoder and the VAD once, so their buffers and sessions exist before the
        first request: its latency is then the steady one, and so is the worker's RSS."""
        from .base import speech_regions

        silence = np.zeros(16_000, np.float32)  # 1 s at 16 kHz
        language = None if self._model.model.is_multilingual else "en"
        segments, _info = self._model.transcribe(silence, language=language, vad_filter=False)
        for _segment in segments:
            pass
        speech_regions(silence)

    def languages(self) -> frozenset[str]:
        self.load()
        return frozenset(self._model.supported_languages)

    @property
    def multilingual(self) -> bool:
        self.load()
        return bool(self._model.model.is_multilingual)

    def transcribe(self, audio: np.ndarray, options: TranscribeOptions) -> Transcript:
        self.load()
        language = options.language if self.multilingual else "en"
        started = time.perf_counter()
        _spent.parts = parts = {"vad": 0.0, "features": 0.0}
        _spent.cancel = options.cancel  # checked before each of CTranslate2's decodes too
        try:
            segments, info = self._model.transcribe(
                audio,
                language=language,
                beam_size=options.beam_size,
                vad_filter=options.vad,
                word_timestamps=options.word_timestamps,
                initial_prompt=options.prompt,
                # Audio the VAD found to be speech loses no window to Whisper's no-speech
                # guess; a window it doubts is kept and marked instead (fallback.py).
                no_speech_threshold=(
                    None if options.vad or options.speech_only else fallback.NO_SPEECH_THRESHOLD
                ),
                **_temperature(options.temperature),
            )
            out = []
            for segment in segments:
                # CTranslate2 decodes a 30 s window per step of this generator; what it freed
                # goes back before the next window's encoder peak (~1 ms per segment).
                trim_heap()
                _stop_if_cancelled()
                words = tuple(
                    TimedWord(w.word.strip(), w.start, w.end) for w in (segment.words or ())
                )
                detail = {
                    "tokens": list(segment.tokens),
                    "temperature": segment.temperature,
                    "avg_logprob": segment.avg_logprob,
                    "compression_ratio": segment.compression_ratio,
                    "no_speech_prob": segment.no_speech_prob,
                }
                if (suspect := fallback.mark()) is not None:
                    detail["suspect"] = suspect
                out.append(
                    TranscriptSegment(segment.start, segment.end, segment.text, words, detail)
                )
                if options.on_segment is not None:
                    options.on_segment(out[-1])
        except (RuntimeError, ValueError) as exc:
            raise EngineFailure(f"faster-whisper failed: {exc}") from exc
        finally:
            _spent.parts = _spent.cancel = None
            self._embedding.release()  # the token embedding's rows it read
        # Where one window's time went, for bench/stages.py and anyone asking why a request is
        # slow: Silero VAD, the log-mel features, and CTranslate2 (encoder and beam search).
        total = time.perf_counter() - started
        log.debug(
            "window transcribed",
            extra={
                "audio_s": round(len(audio) / 16_000, 3),
                "vad_s": round(parts["vad"], 4),
                "features_s": round(parts["features"], 4),
                "model_s": round(total - parts["vad"] - parts["features"], 4),
            },
        )
        detected = None if language else info.language_probability
        return Transcript(tuple(out), info.language, detected)


def _stop_if_cancelled() -> None:
    """Raise if the transcription running in this thread was cancelled (its request timed out,
    its client left, its job was cancelled); called before every CTranslate2 decode."""
    cancel = getattr(_spent, "cancel", None)
    if cancel is not None and cancel.is_set():
        raise EngineTimeout("transcription took longer than the request timeout")


def _timed(part: str, function: Callable[..., Any]) -> Callable[..., Any]:
    """``function``, adding its seconds to ``part`` of the transcription running in this thread."""

    @functools.wraps(function)
    def timed(*args: Any, **kwargs: Any) -> Any:
        started = time.perf_counter()
        try:
            return function(*args, **kwargs)
        finally:
            parts = getattr(_spent, "parts", None)
            if parts is not None:
                parts[part] += time.perf_counter() - started

    timed.__wrapped_part__ = part  # type: ignore[attr-defined]
    return timed


@functools.cache
def _timed_features() -> type:
    """The trimming feature extractor (``features.py``), its calls timed as "features"."""
    from .features import TrimmingFeatureExtractor

    return type(
        "TimedFeatureExtractor",
        (TrimmingFeatureExtractor,),
        {"__call__": _timed("features", TrimmingFeatureExtractor.__call__)},
    )


def _time_parts() -> None:
    """Time faster-whisper's VAD and feature extraction where ``WhisperModel.transcribe`` calls
    them (a few microseconds per call), once per process."""
    import faster_whisper.transcribe as fw

    if not hasattr(fw.get_speech_timestamps, "__wrapped_part__"):
        fw.get_speech_timestamps = _timed("vad", fw.get_speech_timestamps)


def _temperature(temperature: float | None) -> dict[str, Any]:
    """Whisper's fallback schedule unless a positive temperature is asked for (OpenAI's rule)."""
    return {"temperature": temperature} if temperature else {}

"""A worker's live decoder runs on its file engine's model: the weights once in memory, one
CTranslate2 worker more, so a live decode and a file transcription run at the same time."""

from __future__ import annotations

import threading
from types import SimpleNamespace

import numpy as np
from realtime_support import pcm, transcript_words
from support import requires_espeak

from extractor.asr import TranscribeOptions
from extractor.config import Settings
from extractor.pipeline.extraction import Extractor
from extractor.realtime.worker import realtime_server

pytestmark = requires_espeak


def audio16(text: str) -> np.ndarray:
    return np.frombuffer(pcm(text, rate=16_000), "<i2").astype(np.float32) / 32768


def test_live_decodes_share_the_file_engine_model_and_run_beside_it() -> None:
    settings = Settings()
    assert settings.live_shares_speech_model
    extractor = Extractor(settings)
    assert extractor.speech.parallel == settings.engine_slots + 1  # type: ignore[attr-defined]
    worker = SimpleNamespace(wsgi=SimpleNamespace(extensions={"extractor": extractor}))
    live = realtime_server(worker, settings)
    assert live is not None
    decoder = live.scheduler.decoder
    decoder.load()
    assert decoder._model is extractor.speech.whisper_model()  # type: ignore[attr-defined]

    file_audio = audio16("The quick brown fox jumps over the lazy dog. " * 3)
    transcripts: list[str] = []
    transcriber = threading.Thread(
        target=lambda: transcripts.append(
            " ".join(
                s.text
                for s in extractor.speech.transcribe(file_audio, TranscribeOptions()).segments
            )
        )
    )
    transcriber.start()
    words = decoder.decode(audio16("Good morning, how are you today?"))
    transcriber.join(timeout=120)
    assert transcript_words(" ".join(words)) == ["good", "morning", "how", "are", "you", "today"]
    assert transcript_words(transcripts[0])[:4] == ["the", "quick", "brown", "fox"]


def test_a_live_decoder_with_other_threads_loads_its_own_model() -> None:
    settings = Settings(realtime_threads=2)
    assert not settings.live_shares_speech_model
    extractor = Extractor(settings)
    assert extractor.speech.parallel == settings.engine_slots  # type: ignore[attr-defined]
    worker = SimpleNamespace(wsgi=SimpleNamespace(extensions={"extractor": extractor}))
    live = realtime_server(worker, settings)
    assert live is not None and live.scheduler.decoder.shared is None

"""A worker's live decoder runs on its file engine's model: the weights once in memory, one
CTranslate2 worker more, so a live decode and a file transcription run at the same time."""

from __future__ import annotations

import threading
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest
from realtime_support import ALIKE, heard_alone, likeness, pcm
from support import requires_espeak

from extractor.asr import TranscribeOptions
from extractor.asr.step_turns import SHARED_ENCODE_FRAMES
from extractor.config import Settings
from extractor.pipeline.extraction import Extractor
from extractor.realtime.worker import realtime_server

pytestmark = requires_espeak


def audio16(text: str) -> np.ndarray:
    return np.frombuffer(pcm(text, rate=16_000), "<i2").astype(np.float32) / 32768


@pytest.mark.slow  # seconds of the real model: make test runs it, make test-fast does not
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

    # Not one sentence said over and over: beam search's text would be a loop to the fallback
    # (fallback.py), which samples at random ("the quick roundfacht jump", once in CI).
    file_audio = audio16(
        "The quick brown fox jumps over the lazy dog. A long train left the station at noon."
        " My sister painted the old boat bright blue and yellow."
    )

    def transcribe() -> str:
        segments = extractor.speech.transcribe(file_audio, TranscribeOptions()).segments
        return " ".join(s.text for s in segments)

    # What this CPU hears in each with nothing beside it: which words tiny.en hears in
    # espeak-ng's voice depends on the CPU (CTranslate2 computes int8 with MKL on Intel, oneDNN
    # on AMD: "brown fox" is "round-fark" on all, "lazy dog" "lazy nog" on one).
    alone = transcribe()
    greeting = audio16("Good morning, how are you today?")
    greeting_alone = decoder.decode(greeting)
    transcripts: list[str] = []
    transcriber = threading.Thread(target=lambda: transcripts.append(transcribe()))
    transcriber.start()
    words = decoder.decode(greeting)
    transcriber.join(timeout=120)
    # Each beside the other hears exactly what it heard alone, and the file's text is its
    # audio's (the live decoder, one window, hears the same words in it).
    assert words == greeting_alone and len(words) >= 4
    assert transcripts == [alone]
    assert likeness(alone, heard_alone(decoder, file_audio)) >= ALIKE


class Steps:
    """The CTranslate2 model under the engine's wrapper, each ``encode`` and ``generate`` noted
    as it starts and ends (inside its turn), with the thread and the encoder's frames."""

    def __init__(self, model: Any) -> None:
        self.model, self.events, self._lock = model, [], threading.Lock()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.model, name)

    def _step(self, kind: str, call: Any, *args: Any, **kwargs: Any) -> Any:
        frames = int(args[0].shape[-1]) if kind == "encode" else 0
        step = (threading.current_thread().name, kind, frames)
        with self._lock:
            self.events.append(("start", step))
        try:
            return call(*args, **kwargs)
        finally:
            with self._lock:
                self.events.append(("end", step))

    def encode(self, *args: Any, **kwargs: Any) -> Any:
        return self._step("encode", self.model.encode, *args, **kwargs)

    def generate(self, *args: Any, **kwargs: Any) -> Any:
        return self._step("generate", self.model.generate, *args, **kwargs)


@pytest.mark.slow  # seconds of the real model: make test runs it, make test-fast does not
def test_a_big_encoder_pass_never_runs_beside_another_step_of_the_shared_model() -> None:
    """A file's 30 s encoder beside a live decode took a worker past 300 MB (step_turns.py):
    live decodes of 12 and 22 s windows run while a file of ~40 s is transcribed, and no
    encoder pass over more than 20 s overlaps any other step; both still hear their words."""
    settings = Settings()
    extractor = Extractor(settings)
    worker = SimpleNamespace(wsgi=SimpleNamespace(extensions={"extractor": extractor}))
    live = realtime_server(worker, settings)
    assert live is not None
    decoder = live.scheduler.decoder
    decoder.load()

    # Different sentences: ten copies of one sentence make a window Whisper's compression check
    # rejects, and the fallback then samples at random (once "the quick roundfach stumps").
    file_audio = audio16(
        "The quick brown fox jumps over the lazy dog. A long train left the station at noon."
        " My sister painted the old boat bright blue and yellow. Please remember to water the"
        " plants on the balcony. They say it will rain in the afternoon but stay dry until"
        " evening. The museum opens a new exhibition about ships next week. Our market for next"
        " year looks better than we expected. The children walked across the frozen lake. We"
        " should leave early tomorrow to avoid the traffic. The letter arrived two days late."
    )
    assert len(file_audio) > 30 * 16_000  # at least one full 30 s window
    sentence = audio16("Good morning, how are you today?")
    windows = [np.zeros(seconds * 16_000, np.float32) for seconds in (12, 22)]
    for window in windows:
        window[: len(sentence)] = sentence
    transcripts: list[str] = []

    def transcribe() -> None:
        segments = extractor.speech.transcribe(file_audio, TranscribeOptions()).segments
        transcripts.append(" ".join(s.text for s in segments))

    # What each hears alone (which words depends on the CPU), before the steps are noted.
    transcribe()
    windows_alone = [decoder.decode(window) for window in windows]
    wrapper = extractor.speech.whisper_model().model  # type: ignore[attr-defined]
    steps = Steps(wrapper._model)
    wrapper._model = steps
    transcriber = threading.Thread(target=transcribe, name="file")
    transcriber.start()
    heard = []
    while transcriber.is_alive() or not heard:  # live decodes all along the file's
        heard.append(decoder.decode(windows[len(heard) % 2]))
    transcriber.join()

    in_flight: set[tuple[str, str, int]] = set()
    big_encodes = 0
    for event, step in steps.events:
        if event == "start":
            in_flight.add(step)
        else:
            in_flight.discard(step)
        big = [s for s in in_flight if s[1] == "encode" and s[2] > SHARED_ENCODE_FRAMES]
        assert not big or len(in_flight) == 1, (event, step, in_flight)
        big_encodes += event == "start" and step in big
    assert big_encodes >= 2  # the file's 30 s window and a live 22 s one, at least
    # Both hear what they heard alone, the steps interleaved or not.
    assert transcripts[1] == transcripts[0] and len(transcripts[0].split()) >= 40
    for count, words in enumerate(heard):
        assert words == windows_alone[count % 2] and len(words) >= 4


def test_a_live_decoder_with_other_threads_loads_its_own_model() -> None:
    settings = Settings(realtime_threads=2)
    assert not settings.live_shares_speech_model
    extractor = Extractor(settings)
    assert extractor.speech.parallel == settings.engine_slots  # type: ignore[attr-defined]
    worker = SimpleNamespace(wsgi=SimpleNamespace(extensions={"extractor": extractor}))
    live = realtime_server(worker, settings)
    assert live is not None and live.scheduler.decoder.shared is None

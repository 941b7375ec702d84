"""Where a transcription's time goes: the engine reports its VAD, features and model seconds."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
from support import requires_espeak

from extractor.asr import TranscribeOptions
from extractor.asr.faster import FasterWhisperEngine
from extractor.media import SAMPLE_RATE, decode_audio

pytestmark = requires_espeak


@pytest.fixture(scope="module")
def engine() -> FasterWhisperEngine:
    engine = FasterWhisperEngine(None)
    engine.load()
    return engine


def test_each_window_logs_its_stages(
    engine: FasterWhisperEngine,
    speech_wav: bytes,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    path = tmp_path / "speech.wav"
    path.write_bytes(speech_wav)
    audio = decode_audio(path, max_seconds=60).mono()
    with caplog.at_level(logging.DEBUG, logger="extractor.asr.faster"):
        transcript = engine.transcribe(audio, TranscribeOptions("en"))
    assert "weather" in " ".join(s.text for s in transcript.segments).lower()
    [window] = [r for r in caplog.records if r.getMessage() == "window transcribed"]
    parts = {k: getattr(window, k) for k in ("audio_s", "vad_s", "features_s", "model_s")}
    assert parts["audio_s"] == pytest.approx(len(audio) / SAMPLE_RATE, abs=0.01)
    assert all(v > 0 for v in parts.values()), parts

"""The numpy Silero VAD against faster-whisper's own onnxruntime session, on real speech."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from extractor import samples
from extractor.asr import silero
from extractor.media.audio import SAMPLE_RATE, decode_audio

SENTENCES = (
    "Seven wizards quietly judge boxing matches near the river bank. "
    "After a long pause, the committee approved the budget for next year."
)


def padded(audio: np.ndarray) -> np.ndarray:
    return np.pad(audio, (0, silero.WINDOW - audio.shape[0] % silero.WINDOW))


@pytest.fixture(scope="module")
def speech(tmp_path_factory: pytest.TempPathFactory) -> np.ndarray:
    """Spoken sentences between stretches of silence and of noise, at 16 kHz."""
    wav = tmp_path_factory.mktemp("vad") / "speech.wav"
    wav.write_bytes(samples.speech_wav(SENTENCES))
    voice = decode_audio(wav, max_seconds=600).mono()
    rng = np.random.default_rng(7)
    silence = np.zeros(2 * SAMPLE_RATE, np.float32)
    noise = (rng.standard_normal(3 * SAMPLE_RATE) * 0.05).astype(np.float32)
    return np.concatenate([silence, voice, noise, voice[: SAMPLE_RATE * 2], silence])


def test_probabilities_match_onnxruntime(speech: np.ndarray) -> None:
    from faster_whisper.vad import SileroVADModel

    reference = np.asarray(SileroVADModel(str(silero.model_path()))(padded(speech))).reshape(-1)
    ours = silero.load()(padded(speech))
    assert ours.shape == reference.shape == (len(padded(speech)) // silero.WINDOW,)
    assert np.abs(ours - reference).max() < 1e-4
    assert (reference > 0.5).any() and (reference < 0.2).any()  # speech and non-speech both
    np.testing.assert_array_equal(ours > 0.5, reference > 0.5)


def test_batches_carry_the_state_across(
    speech: np.ndarray, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Cutting the windows into batches must not change a probability: the LSTM's state and
    the 64 samples of context carry over from one batch to the next."""
    whole = silero.load()(padded(speech))
    monkeypatch.setattr(silero, "BATCH", 7)
    np.testing.assert_allclose(silero.load()(padded(speech)), whole, atol=1e-6)


def test_speech_timestamps_are_faster_whispers(speech: np.ndarray) -> None:
    """With the numpy model installed, faster-whisper's own post-processing gives the same
    speech regions as with its onnxruntime session."""
    import faster_whisper.vad as fw_vad

    silero.install()
    ours = fw_vad.get_speech_timestamps(speech, fw_vad.VadOptions())
    reference_model = fw_vad.SileroVADModel(str(silero.model_path()))
    original = fw_vad.get_vad_model
    fw_vad.get_vad_model = lambda: reference_model  # type: ignore[assignment]
    try:
        reference = fw_vad.get_speech_timestamps(speech, fw_vad.VadOptions())
    finally:
        fw_vad.get_vad_model = original
    assert ours == reference
    assert len(ours) >= 1


@pytest.mark.slow
def test_a_worker_transcribes_without_loading_onnxruntime(tmp_path: Path) -> None:
    """The point of it all: the default engine with its VAD on never imports onnxruntime."""
    wav = tmp_path / "speech.wav"
    wav.write_bytes(samples.speech_wav(SENTENCES))
    script = f"""
import json, sys
from pathlib import Path
from extractor.asr.base import TranscribeOptions
from extractor.asr.faster import FasterWhisperEngine
from extractor.media.audio import decode_audio
engine = FasterWhisperEngine(None)
engine.load()
audio = decode_audio(Path({str(wav)!r}), max_seconds=600).mono()
text = " ".join(s.text for s in engine.transcribe(audio, TranscribeOptions(vad=True)).segments)
print(json.dumps({{"text": text, "onnxruntime": "onnxruntime" in sys.modules}}))
"""
    run = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=300, check=True
    )
    result = json.loads(run.stdout.strip().splitlines()[-1])
    assert result["onnxruntime"] is False
    assert "wizards" in result["text"].lower() and "budget" in result["text"].lower()


def test_a_model_of_another_shape_is_refused(tmp_path: Path) -> None:
    """A faster-whisper release with another VAD network must not be run through this one."""
    changed = tmp_path / "other.onnx"
    data = silero.model_path().read_bytes()
    # Rename one weight (same length, so the protobuf stays well-formed): it is then missing.
    changed.write_bytes(data.replace(b"decoder.conv1d.weight", b"decoder.conv1x.weight"))
    with pytest.raises(silero.ModelMismatch, match=r"decoder\.conv1d\.weight"):
        silero.read_weights(changed)
    assert set(silero.read_weights(silero.model_path())) == set(silero.SHAPES)


def test_the_network_refuses_what_it_cannot_window() -> None:
    model = silero.load()
    with pytest.raises(ValueError, match="multiple of 512"):
        model(np.zeros(1000, np.float32))
    assert model(np.zeros(0, np.float32)).shape == (0,)

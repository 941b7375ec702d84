"""Decoding and transcribing audio hold bounded memory: the sample buffer never outgrows the
duration limit, and features are computed window by window with the very same result."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from extractor import samples
from extractor.errors import AudioTooLong
from extractor.media import audio as media_audio
from extractor.media.audio import SAMPLE_RATE
from extractor.pipeline import transcript


@pytest.fixture
def undeclared_length(monkeypatch: pytest.MonkeyPatch) -> None:
    """Files whose container does not state a duration (a live-streamed WebM, a piped WAV):
    the decoder cannot preallocate and has to grow its buffer."""
    monkeypatch.setattr(media_audio, "_declared_seconds", lambda *_args: None)


@pytest.mark.usefixtures("undeclared_length")
def test_the_sample_buffer_grows_no_further_than_the_duration_limit(tmp_path: Path) -> None:
    path = tmp_path / "noise.wav"
    path.write_bytes(samples.silence_and_noise(40))
    audio = media_audio.decode_audio(path, max_seconds=45)
    assert audio.duration == pytest.approx(40, abs=0.01)
    # It starts at 31 s and would double to 62 s; the limit (45 s and 1 s of slack) caps it.
    assert audio.samples.base is not None
    assert audio.samples.base.shape[1] <= 46 * SAMPLE_RATE


@pytest.mark.usefixtures("undeclared_length")
def test_audio_past_the_limit_is_refused_while_decoding(tmp_path: Path) -> None:
    path = tmp_path / "noise.wav"
    path.write_bytes(samples.silence_and_noise(50))
    with pytest.raises(AudioTooLong):
        media_audio.decode_audio(path, max_seconds=45)


def test_a_declared_length_is_allocated_once(tmp_path: Path) -> None:
    path = tmp_path / "noise.flac"
    pcm, rate = samples.decode_wav(samples.silence_and_noise(12))
    path.write_bytes(samples.encode_audio(pcm, rate, "flac"))
    audio = media_audio.decode_audio(path, max_seconds=60)
    assert audio.samples.base is not None
    assert audio.samples.base.shape[1] <= 13 * SAMPLE_RATE  # 12 s declared and 1 s of slack
    assert np.isfinite(audio.samples).all()


def test_a_long_track_waits_on_disk_and_comes_back_window_by_window(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(transcript, "CHUNK_SECONDS", 10)
    rng = np.random.default_rng(3)
    signal = (rng.standard_normal(SAMPLE_RATE * 25) * 0.2).astype(np.float32)
    track = transcript.Track.of(signal, tmp_path / "track.f32")
    assert track.samples is None and (tmp_path / "track.f32").stat().st_size == signal.nbytes
    assert len(track.windows) >= 3
    joined = np.concatenate([track.read(start, end) for start, end in track.windows])
    assert np.array_equal(joined, signal)


def test_a_short_track_stays_in_memory(tmp_path: Path) -> None:
    signal = np.zeros(SAMPLE_RATE * 5, np.float32)
    track = transcript.Track.of(signal, tmp_path / "track.f32")
    assert track.windows == [(0, len(signal))] and track.samples is not None
    assert list(tmp_path.iterdir()) == []

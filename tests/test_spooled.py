"""Audio is decoded in bounded pieces: long audio waits on disk, a piece at a time in memory."""

from __future__ import annotations

import tracemalloc
from pathlib import Path

import numpy as np
import pytest

from extractor import samples
from extractor.errors import AudioTooLong
from extractor.media import audio as media_audio
from extractor.media.audio import SAMPLE_RATE, decode_audio
from extractor.media.spooled import decode_spooled
from extractor.pipeline.transcript import Track, quiet_windows


def noise_flac(path: Path, seconds: float, rate: int = 44_100, channels: int = 2) -> Path:
    rng = np.random.default_rng(5)
    pcm = (rng.standard_normal((channels, int(seconds * rate))) * 0.1).astype(np.float32)
    path.write_bytes(samples.encode_audio(pcm, rate, "flac"))
    return path


@pytest.mark.parametrize("keep_channels", [False, True])
def test_long_audio_is_written_piece_by_piece_with_the_same_samples(
    tmp_path: Path, keep_channels: bool
) -> None:
    path = noise_flac(tmp_path / "noise.flac", 25)
    whole = decode_audio(path, max_seconds=60, keep_channels=keep_channels).samples
    work = tmp_path / "work"
    work.mkdir()
    spooled = decode_spooled(path, work, max_seconds=60, keep_channels=keep_channels,
                             piece_seconds=4)  # fmt: skip
    assert spooled.memory is None and spooled.rows == whole.shape[0] == len(spooled.files)
    assert spooled.length == whole.shape[1] and spooled.source_channels == 2
    for row in range(spooled.rows):
        assert spooled.files[row].stat().st_size == whole.shape[1] * 4
        assert np.array_equal(spooled.read(row, 0, spooled.length), whole[row])
        assert np.array_equal(spooled.read(row, 12_345, 67_890), whole[row, 12_345:67_890])


def test_audio_within_one_piece_stays_in_memory(tmp_path: Path) -> None:
    path = noise_flac(tmp_path / "noise.flac", 3, rate=8_000, channels=1)
    work = tmp_path / "work"
    work.mkdir()
    spooled = decode_spooled(path, work, max_seconds=60, keep_channels=False, piece_seconds=4)
    assert spooled.memory is not None and spooled.files == () and list(work.iterdir()) == []
    assert spooled.duration == pytest.approx(3, abs=0.01)


def test_the_decoder_holds_one_piece_whatever_the_length(tmp_path: Path) -> None:
    path = noise_flac(tmp_path / "noise.flac", 60, rate=48_000)
    tracemalloc.start()  # numpy reports its buffers to tracemalloc
    try:
        spooled = decode_spooled(path, tmp_path, max_seconds=120, keep_channels=True,
                                 piece_seconds=5)  # fmt: skip
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    piece = 2 * 5 * SAMPLE_RATE * 4  # bytes: two rows of 5 s of float32
    assert spooled.duration == pytest.approx(60, abs=0.05)
    assert peak < 1.5 * piece + 1_000_000, peak  # not the 7.7 MB of the whole signal


def test_audio_past_the_limit_is_refused_while_decoding(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(media_audio, "_declared_seconds", lambda *_args: None)  # a piped file
    path = noise_flac(tmp_path / "noise.flac", 20, rate=16_000, channels=1)
    with pytest.raises(AudioTooLong):
        decode_spooled(path, tmp_path, max_seconds=10, keep_channels=False, piece_seconds=4)


def test_a_spooled_track_is_cut_where_the_whole_signal_would_be(tmp_path: Path) -> None:
    path = noise_flac(tmp_path / "noise.flac", 25, rate=16_000, channels=1)
    whole = decode_audio(path, max_seconds=60).mono()
    spooled = decode_spooled(path, tmp_path, max_seconds=60, keep_channels=False,
                             piece_seconds=10)  # fmt: skip
    track = Track.spooled(spooled, 0, 8 * SAMPLE_RATE)
    assert track.windows == quiet_windows(whole, 8 * SAMPLE_RATE) and len(track.windows) >= 3
    joined = np.concatenate([track.read(start, end) for start, end in track.windows])
    assert np.array_equal(joined, whole)


def test_features_in_blocks_are_whisper_s_own(tmp_path: Path) -> None:
    from faster_whisper.feature_extractor import FeatureExtractor

    from extractor.asr.features import TrimmingFeatureExtractor

    rng = np.random.default_rng(9)
    signal = (rng.standard_normal(SAMPLE_RATE * 75) * 0.1).astype(np.float32)
    blocks = TrimmingFeatureExtractor()(signal)
    whole = FeatureExtractor()(signal)
    assert blocks.shape == whole.shape
    np.testing.assert_allclose(blocks, whole, atol=1e-6)

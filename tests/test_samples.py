"""The test material helpers read back what they write (extractor.samples)."""

from __future__ import annotations

import numpy as np

from extractor import samples


def test_a_stereo_wav_decodes_to_one_row_per_channel() -> None:
    """PyAV hands packed (interleaved) PCM as one row of twice the length; each channel must
    come back as its own row, the silent one silent."""
    seconds = np.arange(16_000, dtype=np.float32) / 16_000
    tone = 0.5 * np.sin(2 * np.pi * 440 * seconds)
    wav = samples.encode_audio(np.stack([tone, np.zeros_like(tone)]), 16_000, "wav")
    decoded, rate = samples.decode_wav(wav)
    assert rate == 16_000 and decoded.shape == (2, 16_000)
    assert np.abs(decoded[0] - tone).max() < 1e-3
    assert not decoded[1].any()

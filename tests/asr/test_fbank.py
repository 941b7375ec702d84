"""The speaker embeddings' filterbank features (extractor.asr.fbank) against senko's own C++:
its library built from senko 0.2.2's source for an AVX2 host wrote fbank_reference.npz (how:
fbank_reference.py), the wheel's copy of it needing AVX-512."""

from __future__ import annotations

import numpy as np
from fbank_reference import REFERENCE, WINDOWS, reference_input

from extractor.asr.fbank import BINS, fbank


def test_features_are_senko_s_to_float_rounding() -> None:
    reference = np.load(REFERENCE)
    flat, counts, offsets, bins = fbank(reference_input(), WINDOWS)
    assert bins == BINS == 80
    assert counts.tolist() == [reference[f"window{i}"].shape[0] for i in range(len(WINDOWS))]
    assert offsets.tolist() == (np.cumsum([0, *counts[:-1]]) * BINS).tolist()
    assert flat.dtype == np.float32 and flat.size == counts.sum() * BINS
    for index, (count, offset) in enumerate(zip(counts, offsets, strict=True)):
        ours = flat[offset : offset + count * BINS].reshape(count, BINS)
        # features span about +-20; both sides sum in float32 (senko's with -ffast-math)
        np.testing.assert_allclose(ours, reference[f"window{index}"], atol=1e-3, rtol=0)


def test_a_window_is_its_own_audio_only() -> None:
    """A window shorter than a frame is padded with zeros, not with the audio after it, and
    the features of a window do not depend on the others asked for with it."""
    audio = reference_input()
    alone = fbank(audio, [(1.0, 1.01)])[0]
    silent_after = audio.copy()
    silent_after[int(1.01 * 16_000) :] = 0.0
    assert np.array_equal(alone, fbank(silent_after, [(1.0, 1.01)])[0])
    together = fbank(audio, [(0.0, 0.5), (1.0, 1.01)])
    assert np.array_equal(together[0][together[2][1] :], alone)


def test_no_window_makes_no_features() -> None:
    flat, counts, offsets, bins = fbank(reference_input(), [])
    assert flat.size == counts.size == offsets.size == 0 and bins == BINS

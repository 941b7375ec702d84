"""Whisper's log-mel features computed a block of frames at a time, then the scratch memory
handed back to the system.

faster-whisper computes the features of a whole window at once before the encoder runs: the
framed signal, its complex spectrum and its magnitudes, about 50 MB of intermediates per minute
of audio (measured), in the calling thread, while the encoder and the decoder allocate in
CTranslate2's own thread. Here the same features are computed ``BLOCK_FRAMES`` frames (30 s) at a
time, so the intermediates stay those of 30 s whatever the window's length, which lets the
server transcribe long windows (fewer encoder passes, no cut inside a sentence) without their
peak; and what they freed is trimmed before the encoder's peak.

The same features up to float32 rounding: BLAS sums a block's matrix product in another order
than the whole window's, so a few hundred of a minute's 400,000 values differ in their last bit.
"""

from __future__ import annotations

from contextlib import nullcontext

import numpy as np
from faster_whisper.feature_extractor import FeatureExtractor

from ..heap import trim_heap
from .step_turns import StepTurns

BLOCK_FRAMES = 3000  # frames of features computed at once: 30 s at Whisper's 10 ms hop


class TrimmingFeatureExtractor(FeatureExtractor):
    """faster-whisper's ``FeatureExtractor``, the same features in blocks, then ``malloc_trim``;
    with ``turns``, computed beside the model's other light steps only (``step_turns``)."""

    turns: StepTurns | None = None

    def __call__(
        self, waveform: np.ndarray, padding: int = 160, chunk_length: int | None = None
    ) -> np.ndarray:
        with self.turns.beside() if self.turns is not None else nullcontext():
            if (
                chunk_length is not None
                or len(waveform) + padding <= BLOCK_FRAMES * self.hop_length
            ):
                features: np.ndarray = super().__call__(waveform, padding, chunk_length)
            else:
                features = self._in_blocks(waveform, padding)
            trim_heap()
        return features

    def _in_blocks(self, waveform: np.ndarray, padding: int) -> np.ndarray:
        """``FeatureExtractor.__call__`` block by block: each frame's spectrum depends only on
        its own 400 samples, and the one global step (the floor 8 below the loudest value) is
        applied once every block is done."""
        signal = np.pad(waveform.astype(np.float32, copy=False), (0, padding))
        half = self.n_fft // 2
        padded = np.pad(signal, (half, half), mode="reflect")  # what stft(center=True) does
        del signal
        frames = 1 + (len(padded) - self.n_fft) // self.hop_length
        window = np.hanning(self.n_fft + 1)[:-1].astype("float32")
        out = np.empty((self.mel_filters.shape[0], frames - 1), np.float32)  # last one dropped
        for first in range(0, frames - 1, BLOCK_FRAMES):
            last = min(first + BLOCK_FRAMES, frames - 1)
            piece = padded[first * self.hop_length : (last - 1) * self.hop_length + self.n_fft]
            stft = self.stft(
                piece, self.n_fft, self.hop_length, window=window, return_complex=True,
                center=False,
            ).astype("complex64")  # fmt: skip
            magnitudes = np.abs(stft) ** 2
            mel = self.mel_filters @ magnitudes
            out[:, first:last] = np.log10(np.clip(mel, a_min=1e-10, a_max=None))
        np.maximum(out, out.max() - 8.0, out=out)
        out += 4.0
        out /= 4.0
        return out

"""Whisper's log-mel features, followed by handing their scratch memory back to the system.

faster-whisper computes the features of a whole window before the encoder runs (about 50 MB of
intermediates per minute of audio, measured), in the calling thread, while the encoder and the
decoder allocate in CTranslate2's own thread: what the features (and the VAD before them) freed
stays in this thread's glibc arena, useless to CTranslate2 and still part of the worker's RSS.
Trimming right after the features, just before the encoder's peak, keeps it out of that peak.
"""

from __future__ import annotations

import numpy as np
from faster_whisper.feature_extractor import FeatureExtractor

from ..heap import trim_heap


class TrimmingFeatureExtractor(FeatureExtractor):
    """faster-whisper's ``FeatureExtractor``, identical features, then ``malloc_trim``."""

    def __call__(
        self, waveform: np.ndarray, padding: int = 160, chunk_length: int | None = None
    ) -> np.ndarray:
        features: np.ndarray = super().__call__(waveform, padding, chunk_length)
        trim_heap()
        return features

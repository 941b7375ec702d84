"""extractor/asr/fbank.py against senko's own C++ filterbank, on generated talks: the features,
the CAM++ embeddings made from each, and the time each takes (median of 3).

senko's wheel ships its C++ built for AVX-512; build it for the host from senko's source as
tests/asr/fbank_reference.py says, then::

    OPENBLAS_NUM_THREADS=1 python -m bench.speakers_fbank build/libfbank_extractor.so
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from extractor.asr.fbank import Features, fbank

from .talks import talk

TALKS = (("test", 0), ("test", 8), ("tuning", 3))  # 289 s of 3 voices, 23 s, 54 s

sys.path.insert(0, str(Path(__file__).parent.parent / "tests" / "asr"))
from fbank_reference import senko_extractor  # noqa: E402  (senko's library through ctypes)


def talk_windows(model: Any, set_name: str, number: int) -> tuple[np.ndarray, list[Any]]:
    """A generated talk at 16 kHz as senko reads it, and the speech windows it embeds."""
    made = talk(set_name, number).conversation
    positions = np.arange(0, made.samples.shape[1], made.rate / 16_000)
    audio = np.interp(positions, np.arange(made.samples.shape[1]), made.samples[0])
    audio = model._normalize_audio_samples(audio.astype(np.float32), 16_000)
    return audio, model._generate_subsegments(model._perform_vad(audio), False)


def lowest_cosine(a: np.ndarray, b: np.ndarray) -> float:
    """The lowest cosine similarity between the rows of ``a`` and the same rows of ``b``."""
    norms = np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1)
    return float(((a * b).sum(1) / norms).min())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.speakers_fbank", description=__doc__)
    parser.add_argument("library", help="senko's libfbank_extractor.so, built for this host")
    parser.add_argument("--out", type=Path, help="also write the lines to this file")
    args = parser.parse_args(argv)
    import senko
    import torch

    torch.set_num_threads(1)
    model = senko.Diarizer(device="cpu", vad="silero", warmup=False, quiet=True)
    theirs = senko_extractor(args.library)
    lines = []
    for set_name, number in TALKS:
        audio, windows = talk_windows(model, set_name, number)
        extractors = {"C++": theirs, "numpy": fbank}
        spent: dict[str, list[float]] = {name: [] for name in extractors}
        got: dict[str, Features] = {}
        for _ in range(3):
            for name, extract in extractors.items():
                started = time.perf_counter()
                got[name] = extract(audio, windows)
                spent[name].append(time.perf_counter() - started)
        cpp, ours = got["C++"], got["numpy"]
        gap = max(
            float(np.abs(cpp[0][a : a + n * 80] - ours[0][b : b + n * 80]).max())
            for a, b, n in zip(cpp[2], ours[2], cpp[1], strict=True)
        )
        embedded = [
            model._generate_embeddings(f[0], f[1], [int(o) for o in f[2]], 80) for f in (cpp, ours)
        ]
        lines.append(
            f"- {set_name} {number}: {len(audio) / 16_000:.0f} s, {len(windows)} windows;"
            f" C++ {statistics.median(spent['C++']):.3f} s,"
            f" numpy {statistics.median(spent['numpy']):.3f} s; features differ by at most"
            f" {gap:.1e}; embeddings' cosine: lowest {lowest_cosine(*embedded):.6f}"
        )
        print(lines[-1], flush=True)
    if args.out:
        args.out.write_text("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""The voice space speakers are clustered in: CAM++ embeddings projected onto the directions
that tell voices apart rather than what one voice says.

CAM++'s 192 numbers for one 1.5 s window carry the voice, but also the words and the melody of
that window. Measured on the tuning talks (``bench/speakers.md``), windows are 99% nearest their
own speaker's mean voice, yet two voices' means can be as close (cosine 0.94) as a window is to
its own mean (0.87): clustering in the raw space splits one voice by what it says before it
splits two voices. A linear discriminant (within-speaker scatter whitened, then the directions
of most between-speaker scatter) fitted on the tuning talks' windows removes most of that:
``python -m bench.speakers_space`` fits it and writes ``voice_space.npz`` next to this module
(a 192 x 32 matrix, 25 KB, shipped in the wheel; nothing is fetched at run time).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from pathlib import Path

import numpy as np

SPACE = Path(__file__).with_name("voice_space.npz")


@dataclass(frozen=True)
class VoiceSpace:
    """The projection: subtract ``mean`` from a unit CAM++ embedding, multiply by
    ``projection`` (192, dims)."""

    mean: np.ndarray
    projection: np.ndarray

    def project(self, embeddings: np.ndarray) -> np.ndarray:
        """Rows of CAM++ ``embeddings`` (n, 192) as unit vectors in this space (n, dims)."""
        unit = embeddings.astype(np.float64)
        unit /= np.maximum(np.linalg.norm(unit, axis=1, keepdims=True), 1e-12)
        voiced = (unit - self.mean) @ self.projection
        return voiced / np.maximum(np.linalg.norm(voiced, axis=1, keepdims=True), 1e-12)


@functools.cache
def shipped() -> VoiceSpace:
    """The space in ``voice_space.npz``, read once per process."""
    with np.load(SPACE) as data:
        return VoiceSpace(
            data["mean"].astype(np.float64), data["projection"].astype(np.float64)
        )  # fmt: skip


def fit(groups: list[np.ndarray], dims: int, regularise: float = 0.5) -> VoiceSpace:
    """The projection from windows grouped by speaker (one (n_i, 192) array per speaker of
    each talk): within-speaker scatter whitened, then the ``dims`` directions of most
    between-speaker scatter. ``regularise`` times the mean within-speaker variance is added
    to every direction first: espeak-ng's voices hardly vary in some directions where real
    voices on a telephone line do, and whitening those fully made the real call one speaker
    (0.5 chosen by cross-validation on the tuning talks, with the call checked)."""
    units = [g.astype(np.float64) / np.linalg.norm(g, axis=1, keepdims=True) for g in groups]
    every = np.concatenate(units)
    mean = every.mean(axis=0)
    means = np.stack([u.mean(axis=0) for u in units])
    within = sum((u - m).T @ (u - m) for u, m in zip(units, means, strict=True)) / len(every)
    within += regularise * np.trace(within) / within.shape[0] * np.eye(within.shape[0])
    between = (means - mean).T @ (means - mean) / len(units)
    values, vectors = np.linalg.eigh(within)
    whiten = vectors / np.sqrt(values)
    spread, directions = np.linalg.eigh(whiten.T @ between @ whiten)
    order = np.argsort(spread)[::-1][:dims]
    projection = whiten @ directions[:, order]
    # eigh's signs are arbitrary; fix them so a refit gives the same file.
    projection *= np.where(
        projection[np.abs(projection).argmax(axis=0), np.arange(dims)] < 0, -1, 1
    )
    return VoiceSpace(mean.astype(np.float32), projection.astype(np.float32))


def save(space: VoiceSpace) -> None:
    """Write ``space`` as the shipped ``voice_space.npz``."""
    np.savez(SPACE, mean=space.mean, projection=space.projection)

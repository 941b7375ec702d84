"""Rules on the TIMESTAMP labels of an audio reply: one per line, in milliseconds, in order and
inside the audio."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from typing import Any

from ..findings import Finding, failed, first_failure, passed, skipped
from ..probes import AudioSample, Probe
from .reading import on_json

END_TOLERANCE_MS = 500  # encoders pad audio; a segment may end this far past the samples
SECONDS_MIN_AUDIO_MS = 3000  # only audio this long tells seconds from milliseconds


# -- timestamps ---------------------------------------------------------------------------


def timestamp_labels(doc: dict[str, Any]) -> list[tuple[int, dict[str, Any]]]:
    return [(i, lab) for i, lab in enumerate(doc["labels"]) if lab.get("type") == "TIMESTAMP"]


@on_json
def json_timestamp_per_line(probe: Probe, doc: dict[str, Any]) -> Finding:
    labels = timestamp_labels(doc)

    def problems() -> Iterator[str]:
        for i, label in labels:
            if label["startCellLine"] != label["endCellLine"]:
                yield (
                    f"labels[{i}]: spans lines {label['startCellLine']}..{label['endCellLine']};"
                    " a TIMESTAMP covers one line"
                )
        per_line = Counter(label["startCellLine"] for _i, label in labels)
        for cell in doc["cells"]:
            if per_line[cell["line"]] != 1:
                yield f"cell line {cell['line']} has {per_line[cell['line']]} TIMESTAMP labels"

    return first_failure(problems())


@on_json
def json_timestamps_ms(probe: Probe, doc: dict[str, Any]) -> Finding:
    sample = probe.sample
    assert isinstance(sample, AudioSample)
    ends = [label["endTimestampMillis"] for _i, label in timestamp_labels(doc)]
    if not ends:
        return skipped("no TIMESTAMP labels to judge")
    last, duration = max(ends), sample.duration_ms
    if duration < SECONDS_MIN_AUDIO_MS:
        return skipped(f"the audio ({duration} ms) is too short to tell the unit")
    if last <= duration / 1000 + 1:
        return failed(
            f"timestamps look like seconds, not milliseconds: the last end is {last} for"
            f" {duration} ms of speech (expected about {duration})"
        )
    if last < duration / 2:
        return failed(
            f"timestamps end at {last} ms but the speech lasts {duration} ms: not milliseconds?"
        )
    return passed(f"ends {last}/{duration} ms")


@on_json
def json_timestamps_order(probe: Probe, doc: dict[str, Any]) -> Finding:
    labels = sorted(timestamp_labels(doc), key=lambda item: item[1]["startCellLine"])

    def problems() -> Iterator[str]:
        previous: tuple[int, int] | None = None
        for i, label in labels:
            start, end = label["startTimestampMillis"], label["endTimestampMillis"]
            if start > end:
                yield f"labels[{i}]: starts at {start} ms, after its end {end} ms"
            if previous is not None and start < previous[1]:
                yield (
                    f"labels[{i}]: starts at {start} ms, before labels[{previous[0]}]"
                    f" (an earlier line) at {previous[1]} ms"
                )
            previous = (i, start)

    return first_failure(problems())


@on_json
def json_timestamps_in_audio(probe: Probe, doc: dict[str, Any]) -> Finding:
    sample = probe.sample
    assert isinstance(sample, AudioSample)
    limit = sample.duration_ms + END_TOLERANCE_MS

    def problems() -> Iterator[str]:
        for i, label in timestamp_labels(doc):
            for key in ("startTimestampMillis", "endTimestampMillis"):
                if not 0 <= label[key] <= limit:
                    yield (
                        f"labels[{i}].{key} = {label[key]} lies outside the audio"
                        f" (0..{sample.duration_ms} ms, +{END_TOLERANCE_MS} ms allowed)"
                    )

    return first_failure(problems())

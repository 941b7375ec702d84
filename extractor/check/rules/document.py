"""Rules on the Importable JSON reply as a document: it parses, matches the schema, and its
cells and labels agree with each other and hold the drawn or spoken words."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import jsonschema

from ..findings import Finding, failed, first_failure, passed, skipped
from ..probes import JSON_TYPE, OcrSample, Probe
from .reading import (
    Unjudgeable,
    cells_by_place,
    document,
    expected_words,
    importable_validator,
    json_path,
    label_token,
    on_json,
    recall_finding,
    words_of,
)

# -- Importable JSON ----------------------------------------------------------------------


def json_parses(probe: Probe) -> Finding:
    reply = probe.reply_in(JSON_TYPE)
    if reply is None:
        return skipped(probe.missing_reason(JSON_TYPE))
    try:
        document(reply)
    except Unjudgeable as exc:
        return failed(f"{exc}: {reply.excerpt()}")
    return passed()


@on_json
def json_schema(probe: Probe, doc: dict[str, Any]) -> Finding:
    errors = sorted(importable_validator().iter_errors(doc), key=lambda e: list(e.absolute_path))
    if not errors:
        return passed()
    best = jsonschema.exceptions.best_match(errors)
    more = f" (+{len(errors) - 1} more)" if len(errors) > 1 else ""
    return failed(f"{json_path(best.absolute_path)}: {best.message}{more}")


@on_json
def json_type(probe: Probe, doc: dict[str, Any]) -> Finding:
    expected = "BOUNDING_BOX" if isinstance(probe.sample, OcrSample) else "TIMESTAMP"
    if doc.get("type") != expected:
        return failed(f"type is {doc.get('type')!r}; a {probe.sample.kind} reply is {expected!r}")
    return passed()


@on_json
def json_content(probe: Probe, doc: dict[str, Any]) -> Finding:
    def problems() -> Iterator[str]:
        for i, cell in enumerate(doc["cells"]):
            joined = " ".join(cell["tokens"])
            if cell["content"] != joined:
                yield f"cells[{i}].content {cell['content']!r} != tokens joined {joined!r}"

    return first_failure(problems())


@on_json
def json_label_tokens(probe: Probe, doc: dict[str, Any]) -> Finding:
    cells = cells_by_place(doc)

    def problems() -> Iterator[str]:
        for i, label in enumerate(doc["labels"]):
            for end in ("start", "end"):
                place = (label[f"{end}CellLine"], label[f"{end}CellIndex"])
                cell = cells.get(place)
                if cell is None:
                    yield f"labels[{i}]: no cell at line {place[0]}, index {place[1]}"
                    break
                k = label[f"{end}TokenIndex"]
                if not 0 <= k < len(cell["tokens"]):
                    yield (
                        f"labels[{i}]: {end}TokenIndex {k} is past the tokens of cell line"
                        f" {place[0]} (it has {len(cell['tokens'])}: 0..{len(cell['tokens']) - 1})"
                    )
                    break
            else:
                start = (label["startCellLine"], label["startTokenIndex"])
                stop = (label["endCellLine"], label["endTokenIndex"])
                if start > stop:
                    yield f"labels[{i}]: starts at (line, token) {start}, after its end {stop}"

    return first_failure(problems())


@on_json
def json_label_chars(probe: Probe, doc: dict[str, Any]) -> Finding:
    cells = cells_by_place(doc)

    def problems() -> Iterator[str]:
        for i, label in enumerate(doc["labels"]):
            first, last = label_token(label, cells, "start"), label_token(label, cells, "end")
            if first is None or last is None:
                continue  # json.label-tokens reports it
            start, end = label["startCharIndex"], label["endCharIndex"]
            if start >= len(first):
                yield f"labels[{i}]: startCharIndex {start} is past {first!r}"
            elif end == len(last):
                yield (
                    f"labels[{i}]: endCharIndex {end} points past {last!r}; it is inclusive,"
                    f" so the last character is {len(last) - 1}"
                )
            elif end > len(last):
                yield f"labels[{i}]: endCharIndex {end} is past {last!r} (last is {len(last) - 1})"
            elif (label["startCellLine"], label["startTokenIndex"]) == (
                label["endCellLine"], label["endTokenIndex"],
            ) and start > end:  # fmt: skip
                yield f"labels[{i}]: startCharIndex {start} > endCharIndex {end} in one token"

    return first_failure(problems())


@on_json
def json_words(probe: Probe, doc: dict[str, Any]) -> Finding:
    expected, threshold = expected_words(probe)
    got = [w for cell in doc["cells"] for w in words_of(" ".join(cell["tokens"]))]
    return recall_finding(expected, got, threshold)

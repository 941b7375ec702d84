"""Documents in the Importable format: built from text, read from extractor replies, labeled.

Everything here is pure (no database, no HTTP), so the rules about lines, tokens, speakers and
spans are tested directly.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from extractor.labeling.errors import JobFailure
from extractor.schemas import importable_errors

# `Speaker 1: good morning`: a short name starting with a letter, so `10:30 call` stays text.
SPEAKER_PREFIX = re.compile(r"^(?P<speaker>[^\W\d_][\w .'-]{0,39}?)\s*:\s+(?P<text>\S.*)$")

# The document type of TOKEN_BASED projects (extractor replies are BOUNDING_BOX or TIMESTAMP).
TOKEN_BASED_TYPE = "TOKEN_BASED"
KIND_TO_TYPE = {"OCR": "BOUNDING_BOX", "AUDIO": "TIMESTAMP", "TOKEN_BASED": TOKEN_BASED_TYPE}


def cell(
    line: int, text: str, metadata: list[dict[str, str]] | None = None
) -> dict[str, Any] | None:
    """One cell from a line of text (None if blank); content is its tokens joined by spaces."""
    tokens = text.split()
    if not tokens:
        return None
    return {
        "content": " ".join(tokens),
        "index": 0,
        "line": line,
        "metadata": metadata or [],
        "tokens": tokens,
    }


def cells_from_text(text: str, *, speakers: bool = False) -> list[dict[str, Any]]:
    """One cell per non-empty line, ``line`` counting kept lines from 0.

    With ``speakers`` (audio), a leading ``Name:`` goes to the cell's metadata as
    ``{"key": "speaker", "value": Name}`` and out of its content.
    """
    cells: list[dict[str, Any]] = []
    for raw in text.splitlines():
        metadata: list[dict[str, str]] = []
        line_text = raw
        if speakers:
            match = SPEAKER_PREFIX.match(raw.strip())
            if match:
                metadata = [{"key": "speaker", "value": match["speaker"].strip()}]
                line_text = match["text"]
        made = cell(len(cells), line_text, metadata)
        if made is not None:
            cells.append(made)
    return cells


def importable_from_text(name: str, kind: str, text: str) -> dict[str, Any]:
    """A document of ``kind`` from plain text (a TOKEN_BASED upload or a text/plain reply)."""
    return {
        "name": name,
        "type": KIND_TO_TYPE[kind],
        "cells": cells_from_text(text, speakers=kind == "AUDIO"),
        "labelSets": [],
        "labels": [],
        "pages": [],
    }


def decode_text(data: bytes, what: str, charset: str | None = None) -> str:
    """Bytes to text, failing the job with a clear message when they are not text."""
    try:
        return data.decode(charset or "utf-8").removeprefix("\ufeff")
    except (UnicodeDecodeError, LookupError) as exc:
        raise JobFailure(f"{what} is not {charset or 'UTF-8'} text", charset=charset) from exc


def importable_from_reply(
    name: str, kind: str, content_type: str, content: bytes, charset: str | None = None
) -> dict[str, Any]:
    """Interpret an extractor's reply by its Content-Type alone, as the outbound contract says."""
    if content_type == "text/plain":
        return importable_from_text(
            name, kind, decode_text(content, "the extractor's reply", charset)
        )
    if content_type == "application/json":
        try:
            document = json.loads(content)
        except (UnicodeDecodeError, ValueError) as exc:
            raise JobFailure("the extractor replied invalid JSON", document=name) from exc
        errors = importable_errors(document, limit=1)
        if errors:
            raise JobFailure(
                f"the extractor's JSON reply is not in the Importable format: at {errors[0][:300]}",
                document=name,
            )
        expected = KIND_TO_TYPE[kind]
        if document["type"] != expected:
            raise JobFailure(
                f"the extractor replied a {document['type']} document to an {kind} project "
                f"(expected {expected})",
                document=name,
            )
        document.setdefault("pages", [])
        return dict(document)
    raise JobFailure(
        f"the extractor replied Content-Type {content_type or '(none)'!r}; "
        "expected application/json or text/plain",
        document=name,
    )


@dataclass(frozen=True)
class Entity:
    """One prediction: a label over characters ``start``..``end`` (end exclusive) of a line."""

    label: str
    start: int
    end: int
    layer: int = 0
    confidence: float | None = None


def token_offsets(tokens: Sequence[str]) -> list[tuple[int, int]]:
    """Each token's [start, end) in the cell's content (tokens joined by single spaces)."""
    offsets: list[tuple[int, int]] = []
    position = 0
    for token in tokens:
        offsets.append((position, position + len(token)))
        position += len(token) + 1
    return offsets


def span_label(cell_: dict[str, Any], entity: Entity, labeler: str) -> dict[str, Any] | None:
    """The SPAN label an entity gives on a cell, or None when it overlaps no token.

    A span covers every token it overlaps, whole: it starts at char 0 of the first token the
    entity touches and ends at the last char of the last one (end inclusive, like the other
    labels). Token-based labeling works on tokens, so a prediction that cuts a token (``Corp``
    of ``Corp.``) labels the whole token rather than a fragment no annotator could select.
    """
    touched = [
        index
        for index, (start, end) in enumerate(token_offsets(cell_["tokens"]))
        if start < entity.end and entity.start < end
    ]
    if not touched:
        return None
    first, last = touched[0], touched[-1]
    label: dict[str, Any] = {
        "type": "SPAN",
        "labelName": entity.label,
        "startCellLine": cell_["line"],
        "startCellIndex": cell_["index"],
        "startTokenIndex": first,
        "startCharIndex": 0,
        "endCellLine": cell_["line"],
        "endCellIndex": cell_["index"],
        "endTokenIndex": last,
        "endCharIndex": len(cell_["tokens"][last]) - 1,
        "layer": entity.layer,
        "counter": 0,
        "labeledBy": labeler,
    }
    if entity.confidence is not None:
        label["confidenceScore"] = entity.confidence
    return label


def sentences(cells: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """What the prediction API receives for each cell: its line, its text and its metadata."""
    return [{"id": c["line"], "text": c["content"], "metadata": c["metadata"]} for c in cells]

"""A finished job's Document, stored as JSON and read back equal, field for field.

A job keeps what the engine found (the ``Document``), not one rendering of it: ``GET
/v1/jobs/{id}/result`` renders it in the format that request negotiates, through the same
``render`` as ``POST /extract``, so the reply is byte-equal to the synchronous one in every
format without running the engine again. JSON keeps every value exactly (floats by their
shortest repr, ints, text); tuples come back as tuples, the kind as its enum.
"""

from __future__ import annotations

import json
from typing import Any

from extractor.replies.importable import BoundingBox, Document, DocumentKind, Line, Page, Word


def dump_document(document: Document) -> bytes:
    """The document as UTF-8 JSON (what the job store keeps)."""
    stored = {
        "name": document.name,
        "kind": document.kind.value,
        "lines": [_dump_line(line) for line in document.lines],
        "pages": [
            [page.index, page.width, page.height, page.rotation, page.skew]
            for page in document.pages
        ],
        "language": document.language,
        "duration_ms": document.duration_ms,
        "extra": document.extra,
    }
    return json.dumps(stored, ensure_ascii=False, separators=(",", ":")).encode()


def load_document(data: bytes) -> Document:
    """The document ``dump_document`` stored."""
    stored = json.loads(data)
    return Document(
        name=stored["name"],
        kind=DocumentKind(stored["kind"]),
        lines=tuple(_load_line(line) for line in stored["lines"]),
        pages=tuple(Page(*page) for page in stored["pages"]),
        language=stored["language"],
        duration_ms=stored["duration_ms"],
        extra=stored["extra"],
    )


def _dump_line(line: Line) -> dict[str, Any]:
    return {
        "words": [_dump_word(word) for word in line.words],
        "page_index": line.page_index,
        "block": line.block,
        "paragraph": line.paragraph,
        "start_ms": line.start_ms,
        "end_ms": line.end_ms,
        "speaker": line.speaker,
        "word_timings": line.word_timings,
        "detail": None if line.detail is None else dict(line.detail),
    }


def _load_line(stored: dict[str, Any]) -> Line:
    return Line(
        words=tuple(_load_word(word) for word in stored["words"]),
        page_index=stored["page_index"],
        block=stored["block"],
        paragraph=stored["paragraph"],
        start_ms=stored["start_ms"],
        end_ms=stored["end_ms"],
        speaker=stored["speaker"],
        word_timings=stored["word_timings"],
        detail=stored["detail"],
    )


def _dump_word(word: Word) -> list[Any]:
    box = word.box
    corners = None if box is None else [box.left, box.top, box.right, box.bottom]
    return [word.text, corners, word.start_ms, word.end_ms, word.confidence]


def _load_word(stored: list[Any]) -> Word:
    text, corners, start_ms, end_ms, confidence = stored
    box = None if corners is None else BoundingBox(*corners)
    return Word(text, box, start_ms, end_ms, confidence)

"""A finished job's Document, stored as JSON and read back equal, field for field.

A job keeps what the engine found (the ``Document``), not one rendering of it: ``GET
/v1/jobs/{id}/result`` renders it in the format that request negotiates, through the same
``render`` as ``POST /extract``, so the reply is byte-equal to the synchronous one in every
format without running the engine again. JSON keeps every value exactly (floats by their
shortest repr, ints, text); tuples come back as tuples, the kind as its enum.

A long document's lines are in a spool on disk (``replies.spool``): ``packed_document`` writes
them into the deflated JSON a line at a time, one page of them in memory, so storing a 100-page
job's result no longer holds all its ``Line`` objects, their JSON tree and its text at once.
"""

from __future__ import annotations

import json
import zlib
from collections.abc import Iterator
from typing import Any

from extractor.replies.importable import BoundingBox, Document, DocumentKind, Line, Page, Word


def dump_document(document: Document) -> bytes:
    """The document as UTF-8 JSON (what the job store keeps, deflated)."""
    return b"".join(document_pieces(document))


def packed_document(document: Document, level: int = 6) -> bytes:
    """``dump_document`` deflated (``store.unpack`` reads it), made a line at a time: only the
    deflated bytes grow with the document (a transcript's JSON shrinks ~5x)."""
    deflate = zlib.compressobj(level)
    packed = [deflate.compress(piece) for piece in document_pieces(document)]
    packed.append(deflate.flush())
    return b"".join(packed)


def document_pieces(document: Document) -> Iterator[bytes]:
    """``dump_document``'s JSON in pieces, one per line of the document: the same bytes as one
    ``json.dumps`` of the whole (``tests/async_jobs/test_documents.py`` checks it)."""
    yield b'{"name":' + _json(document.name) + b',"kind":' + _json(document.kind.value)
    yield b',"lines":['
    for number, line in enumerate(document.lines):
        yield (b"," if number else b"") + _json(_dump_line(line))
    pages = [
        [page.index, page.width, page.height, page.rotation, page.skew] for page in document.pages
    ]
    yield b'],"pages":' + _json(pages) + b',"language":' + _json(document.language)
    yield b',"duration_ms":' + _json(document.duration_ms) + b',"extra":' + _json(document.extra)
    yield b"}"


def _json(value: Any) -> bytes:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode()


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

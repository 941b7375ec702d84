"""A finished job's Document, stored as JSON and read back equal, field for field.

A job keeps what the engine found (the ``Document``), not one rendering of it: ``GET
/v1/jobs/{id}/result`` renders it in the format that request negotiates, through the same
``render`` as ``POST /extract``, so the reply is byte-equal to the synchronous one in every
format without running the engine again. JSON keeps every value exactly (floats by their
shortest repr, ints, text); tuples come back as tuples, the kind as its enum.

A long document's lines are in a spool on disk (``replies.spool``): ``packed_document`` writes
them into the deflated JSON a line at a time, one page of them in memory, so storing a 100-page
job's result no longer holds all its ``Line`` objects, their JSON tree and its text at once;
``read_document`` reads them back into a spool the same way, for the result's reply to be
written from it as a long synchronous reply is (``pipeline.reply.document_reply``).
"""

from __future__ import annotations

import codecs
import json
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from extractor.replies.importable import BoundingBox, Document, DocumentKind, Line, Page, Word
from extractor.replies.spool import PageSpool

INFLATE_BYTES = 64 * 1024  # of the stored bytes inflated at a time
LINES_PER_PIECE = 500  # a page's lines go to the spool together; an audio document's by these


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
    # A page stored before rotation_confidence existed has five fields: Page(*page) reads both.
    pages = [
        [page.index, page.width, page.height, page.rotation, page.skew, page.rotation_confidence]
        for page in document.pages
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


def read_document(packed: bytes, spool_path: Path) -> Document:
    """The document ``packed_document`` stored, read a line at a time: its lines go to a
    ``PageSpool`` at ``spool_path`` a page at a time, and come back as that spool for a document
    of more than one page (as the synchronous path spools them), else in memory."""
    stored = _StoredJson(packed)
    head: dict[str, Any] = {}
    for key in ("name", "kind"):
        stored.expect(f'{"{" if key == "name" else ","}"{key}":')
        head[key] = stored.value()
    stored.expect(',"lines":[')
    spool = PageSpool(spool_path)
    try:
        piece: list[Line] = []
        more = not stored.ahead("]")
        while more:
            line = _load_line(stored.value())
            if piece and (line.page_index != piece[0].page_index or len(piece) >= LINES_PER_PIECE):
                spool.add(piece)
                piece = []
            piece.append(line)
            more = stored.ahead(",")
            if not more:
                stored.expect("]")
        if piece:
            spool.add(piece)
        for key in ("pages", "language", "duration_ms", "extra"):
            stored.expect(f',"{key}":')
            head[key] = stored.value()
        stored.expect("}")
    except BaseException:
        spool.discard()
        raise
    pages = tuple(Page(*page) for page in head["pages"])
    lines = spool.close()
    return Document(
        name=head["name"], kind=DocumentKind(head["kind"]),
        lines=lines if len(pages) > 1 else tuple(lines), pages=pages,
        language=head["language"], duration_ms=head["duration_ms"], extra=head["extra"],
    )  # fmt: skip


class _StoredJson:
    """A stored document's JSON, inflated and decoded a value at a time (``read_document``)."""

    def __init__(self, packed: bytes) -> None:
        self._packed = memoryview(packed)
        self._at = 0
        self._inflate = zlib.decompressobj()
        self._utf8 = codecs.getincrementaldecoder("utf-8")()
        self._decoder = json.JSONDecoder()
        self._text = ""
        self._pos = 0

    def _more(self) -> None:
        if self._at >= len(self._packed) and self._inflate.eof:
            raise ValueError("the stored document ends early")
        chunk = self._packed[self._at : self._at + INFLATE_BYTES]
        self._at += len(chunk)
        data = self._inflate.decompress(chunk) if chunk else self._inflate.flush()
        self._text = self._text[self._pos :] + self._utf8.decode(data, final=not chunk)
        self._pos = 0
        if not chunk and not data:
            raise ValueError("the stored document ends early")

    def ahead(self, literal: str) -> bool:
        """Whether ``literal`` comes next; if so, it is taken."""
        while len(self._text) - self._pos < len(literal):
            self._more()
        if self._text.startswith(literal, self._pos):
            self._pos += len(literal)
            return True
        return False

    def expect(self, literal: str) -> None:
        if not self.ahead(literal):
            raise ValueError(f"the stored document lacks {literal!r} at {self._pos}")

    def value(self) -> Any:
        """The next JSON value; one that ends where the text read so far ends may go on (a
        number's digits), so it counts only once the text goes past it."""
        while True:
            try:
                value, end = self._decoder.raw_decode(self._text, self._pos)
                if end < len(self._text):
                    self._pos = end
                    return value
            except json.JSONDecodeError:
                pass
            self._more()


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

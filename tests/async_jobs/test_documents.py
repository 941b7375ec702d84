"""A job's stored Document reads back equal in every field, so every reply rendered from it is
byte-equal to the synchronous one (the end-to-end check: test_jobs_api.py)."""

from __future__ import annotations

import dataclasses
import json
import zlib
from pathlib import Path

import pytest

from extractor.async_jobs import documents
from extractor.async_jobs.documents import (
    _dump_line,
    dump_document,
    load_document,
    packed_document,
    read_document,
)  # fmt: skip
from extractor.async_jobs.store import unpack
from extractor.replies.importable import BoundingBox, Document, DocumentKind, Line, Page, Word
from extractor.replies.spool import PageSpool, SpooledLines

# The fields the store knows; a new field of the model must be stored too (and added here).
KNOWN_FIELDS = {
    Document: {"name", "kind", "lines", "pages", "language", "duration_ms", "extra"},
    Line: {
        "words",
        "page_index",
        "block",
        "paragraph",
        "start_ms",
        "end_ms",
        "speaker",
        "word_timings",
        "detail",
    },
    Word: {"text", "box", "start_ms", "end_ms", "confidence"},
    Page: {"index", "width", "height", "rotation", "skew", "rotation_confidence"},
    BoundingBox: {"left", "top", "right", "bottom"},
}


def test_the_store_knows_every_field_of_the_model() -> None:
    for model, known in KNOWN_FIELDS.items():
        assert {f.name for f in dataclasses.fields(model)} == known, model.__name__


def test_every_value_reads_back_equal() -> None:
    ocr = Document(
        name="scan é.png",
        kind=DocumentKind.OCR,
        lines=(
            Line(
                (Word("Hello", BoundingBox(1, 2, 30, 40), confidence=96.123456789),
                 Word("wörld", BoundingBox(31, 2, 60, 40), confidence=0.1 + 0.2)),
                page_index=0, block=1, paragraph=2,
            ),
        ),
        pages=(Page(0, 2480, 3508, 90, -0.35, 45.0),),
        extra={"note": [1, 2.5, None]},
    )  # fmt: skip
    audio = Document(
        name="talk.wav",
        kind=DocumentKind.AUDIO,
        lines=(
            Line(
                (Word("one", start_ms=0, end_ms=410), Word("two", start_ms=420, end_ms=900)),
                start_ms=0, end_ms=900, speaker="Speaker 1", word_timings=True,
                detail={"tokens": [50364, 472], "avg_logprob": -0.2718281828, "temperature": 0.0},
            ),
        ),
        language="en",
        duration_ms=1000,
    )  # fmt: skip
    for document in (ocr, audio):
        back = load_document(dump_document(document))
        assert back == document
        assert back.extra == document.extra
        assert [line.detail for line in back.lines] == [line.detail for line in document.lines]
        assert dump_document(back) == dump_document(document)


def test_a_spooled_document_is_stored_a_line_at_a_time_as_one_json_would_be(
    tmp_path: Path,
) -> None:
    """``packed_document`` reads a long document's lines from its spool and writes the same
    JSON as one ``json.dumps`` of the whole (what the store kept before), deflated."""
    spool = PageSpool(tmp_path / "lines.spool")
    pages = []
    for index in range(3):
        words = (Word(f"wörd{index}", BoundingBox(1, 2, 30, 40), confidence=91.5),)
        spool.add([Line(words, page_index=index, block=1, paragraph=1)] * (index + 1))
        pages.append(Page(index, 2480, 3508, 0, 0.0))
    spool.add([])  # a blank page
    pages.append(Page(3, 2480, 3508, 0, 0.0))
    document = Document(
        name="long.pdf", kind=DocumentKind.OCR, lines=spool.close(), pages=tuple(pages)
    )
    whole = {
        "name": document.name,
        "kind": document.kind.value,
        "lines": [_dump_line(line) for line in document.lines],
        "pages": [
            [p.index, p.width, p.height, p.rotation, p.skew, p.rotation_confidence]
            for p in document.pages
        ],
        "language": None,
        "duration_ms": None,
        "extra": {},
    }
    one_dump = json.dumps(whole, ensure_ascii=False, separators=(",", ":")).encode()
    assert dump_document(document) == one_dump
    assert unpack(packed_document(document)) == one_dump
    back = load_document(unpack(packed_document(document)))
    assert back.lines == tuple(document.lines) and len(back.lines) == 6
    empty = dataclasses.replace(document, lines=(), pages=())
    assert load_document(unpack(packed_document(empty))) == empty


def long_document(tmp_path: Path, pages: int = 4) -> Document:
    spool = PageSpool(tmp_path / "written.spool")
    for index in range(pages):
        words = tuple(
            Word(f"wörd{index}-{n} é€😀", BoundingBox(n, 2, n + 30, 40), confidence=91.5 + n / 7)
            for n in range(40)
        )
        spool.add([Line(words, page_index=index, block=1, paragraph=k) for k in range(index)])
    return Document(
        name='long "é".pdf', kind=DocumentKind.OCR, lines=spool.close(),
        pages=tuple(Page(i, 2480, 3508, 90 * (i % 2), -0.25) for i in range(pages)),
        extra={"note": [1, 2.5, None]},
    )  # fmt: skip


@pytest.mark.parametrize("inflate_bytes", [7, 1000, 64 * 1024])
def test_a_stored_document_reads_back_a_line_at_a_time_into_a_spool(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, inflate_bytes: int
) -> None:
    """``read_document`` gives what ``load_document`` gives, its lines in a spool when it has
    more than one page, however the stored bytes are cut (a character, a number split)."""
    monkeypatch.setattr(documents, "INFLATE_BYTES", inflate_bytes)
    written = long_document(tmp_path)
    packed = packed_document(written)
    back = read_document(packed, tmp_path / "read.spool")
    assert isinstance(back.lines, SpooledLines)
    assert back == load_document(unpack(packed))
    assert tuple(back.lines) == tuple(written.lines) and len(back.lines) == 6
    assert back.extra == {"note": [1, 2.5, None]} and back.pages == written.pages
    one_page = dataclasses.replace(written, lines=tuple(written.lines)[:2], pages=written.pages[:1])
    again = read_document(packed_document(one_page), tmp_path / "one.spool")
    assert again == one_page and isinstance(again.lines, tuple)  # as /extract: in memory
    empty = dataclasses.replace(written, lines=(), pages=())
    assert read_document(packed_document(empty), tmp_path / "empty.spool") == empty


def test_a_damaged_stored_document_is_an_error_not_a_hang(tmp_path: Path) -> None:
    packed = packed_document(long_document(tmp_path))
    cut = zlib.compress(zlib.decompress(packed)[:-40])
    with pytest.raises(ValueError, match="ends early"):
        read_document(cut, tmp_path / "cut.spool")
    assert not (tmp_path / "cut.spool").exists()


def test_a_page_stored_before_its_turn_had_a_confidence_still_loads() -> None:
    stored = (
        b'{"name":"old.png","kind":"BOUNDING_BOX","lines":[],"pages":[[0,10,20,90,0.5]],'
        b'"language":null,"duration_ms":null,"extra":{}}'
    )
    assert load_document(stored).pages == (Page(0, 10, 20, 90, 0.5, None),)

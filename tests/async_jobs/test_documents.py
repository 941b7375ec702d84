"""A job's stored Document reads back equal in every field, so every reply rendered from it is
byte-equal to the synchronous one (the end-to-end check: test_jobs_api.py)."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

from extractor.async_jobs.documents import _dump_line, dump_document, load_document, packed_document
from extractor.async_jobs.store import unpack
from extractor.replies.importable import BoundingBox, Document, DocumentKind, Line, Page, Word
from extractor.replies.spool import PageSpool

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
    Page: {"index", "width", "height", "rotation", "skew"},
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
        pages=(Page(0, 2480, 3508, 90, -0.35),),
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
        "pages": [[p.index, p.width, p.height, p.rotation, p.skew] for p in document.pages],
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

"""A job's stored Document reads back equal in every field, so every reply rendered from it is
byte-equal to the synchronous one (the end-to-end check: test_jobs_api.py)."""

from __future__ import annotations

import dataclasses

from extractor.async_jobs.documents import dump_document, load_document
from extractor.replies.importable import BoundingBox, Document, DocumentKind, Line, Page, Word

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

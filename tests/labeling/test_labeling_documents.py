"""The pure rules of documents: lines and tokens, speaker labels, reply interpretation, spans."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from extractor.labeling.autolabel import Batch, parse_reply, plan_batches
from extractor.labeling.documents import (
    Entity,
    cells_from_text,
    importable_from_reply,
    span_label,
    token_offsets,
)
from extractor.labeling.errors import JobFailure
from extractor.replies.schemas import importable_schema


def test_audio_lines_keep_their_speaker_in_metadata() -> None:
    text = "Speaker 1: good morning\nSPEAKER_00:  hello there\n10:30 is the time\nno speaker here\n"
    cells = cells_from_text(text, speakers=True)
    assert [(c["content"], c["metadata"]) for c in cells] == [
        ("good morning", [{"key": "speaker", "value": "Speaker 1"}]),
        ("hello there", [{"key": "speaker", "value": "SPEAKER_00"}]),
        ("10:30 is the time", []),
        ("no speaker here", []),
    ]
    # OCR text keeps a colon as text.
    assert cells_from_text("Total: 12", speakers=False)[0]["tokens"] == ["Total:", "12"]


def test_json_replies_must_be_importable_and_of_the_projects_type() -> None:
    good = {
        "name": "a.wav",
        "type": "TIMESTAMP",
        "cells": [{"content": "hi", "index": 0, "line": 0, "metadata": [], "tokens": ["hi"]}],
        "labelSets": [],
        "labels": [],
        "pages": [],
    }
    made = importable_from_reply("a.wav", "AUDIO", "application/json", json.dumps(good).encode())
    assert made == good
    with pytest.raises(JobFailure, match="expected TIMESTAMP"):
        importable_from_reply(
            "a.png",
            "AUDIO",
            "application/json",
            json.dumps({**good, "type": "BOUNDING_BOX", "pages": []}).encode(),
        )
    with pytest.raises(JobFailure, match="not in the Importable format: at cells/0"):
        broken = {**good, "cells": [{"content": "hi"}]}
        importable_from_reply("a.wav", "AUDIO", "application/json", json.dumps(broken).encode())
    with pytest.raises(JobFailure, match="invalid JSON"):
        importable_from_reply("a.wav", "AUDIO", "application/json", b"{nope")
    with pytest.raises(JobFailure, match="Content-Type 'text/html'"):
        importable_from_reply("a.wav", "AUDIO", "text/html", b"<p>hi</p>")
    with pytest.raises(JobFailure, match="not UTF-8"):
        importable_from_reply("a.wav", "AUDIO", "text/plain", b"\xff\xfe\xfa")
    assert (
        importable_from_reply("a.txt", "OCR", "text/plain", "Grüße".encode("latin-1"), "latin-1")[
            "cells"
        ][0]["content"]
        == "Grüße"
    )


def test_the_importable_schema_is_valid() -> None:
    importable_schema()  # checked against the 2020-12 meta-schema when loaded


CELL: dict[str, Any] = {
    "content": "John works at Abcd Corp.",
    "index": 0,
    "line": 3,
    "metadata": [],
    "tokens": ["John", "works", "at", "Abcd", "Corp."],
}


@pytest.mark.parametrize(
    ("start", "end", "tokens"),
    [
        (0, 4, (0, 0)),  # exactly "John"
        (14, 23, (3, 4)),  # "Abcd Corp" cuts "Corp." -> the whole token
        (1, 2, (0, 0)),  # inside a token
        (4, 5, None),  # only the space between tokens
        (0, 24, (0, 4)),  # the whole line
        (10, 14, (2, 2)),  # "at " plus a space
    ],
)
def test_a_span_covers_every_token_it_overlaps(
    start: int, end: int, tokens: tuple[int, int] | None
) -> None:
    label = span_label(CELL, Entity("ORG", start, end, layer=1), "ann@example.com")
    if tokens is None:
        assert label is None
        return
    assert label is not None
    first, last = tokens
    assert (label["startTokenIndex"], label["endTokenIndex"]) == (first, last)
    assert label["startCharIndex"] == 0
    assert label["endCharIndex"] == len(CELL["tokens"][last]) - 1
    assert label["startCellLine"] == label["endCellLine"] == 3
    assert label["layer"] == 1 and label["labeledBy"] == "ann@example.com"
    assert "confidenceScore" not in label


@given(st.lists(st.text(alphabet="abcXYZ.,", min_size=1, max_size=6), min_size=1, max_size=8))
def test_token_offsets_point_into_the_content(tokens: list[str]) -> None:
    content = " ".join(tokens)
    for token, (start, end) in zip(tokens, token_offsets(tokens), strict=True):
        assert content[start:end] == token


def test_batches_never_mix_documents() -> None:
    documents = [("d1", "a.txt", 5), ("d2", "b.txt", 2), ("d3", "c.txt", 0)]
    assert [(b.document_id, b.start, b.stop) for b in plan_batches(documents, 2)] == [
        ("d1", 0, 2),
        ("d1", 2, 4),
        ("d1", 4, 5),
        ("d2", 0, 2),
    ]
    assert [b.stop - b.start for b in plan_batches(documents, 0)] == [5, 2]


def reply(entities: list[dict[str, Any]], sentence: int = 3, document: str = "d1") -> Any:
    return {"documents": [{"id": document, "labels": [{"id": sentence, "entities": entities}]}]}


def test_reply_parsing() -> None:
    batch = Batch("d1", "a.txt", [CELL])
    labels = parse_reply(
        reply([{"label": "PER", "start_char": 0, "end_char": 4, "confidence_score": 0.5}]),
        batch,
        "x@example.com",
        1,
    )
    assert labels == [
        {
            "documentId": "d1",
            "label": span_label(CELL, Entity("PER", 0, 4, 0, 0.5), "x@example.com"),
        }
    ]
    for garbage, message in [
        (reply([], sentence=4), "did not send"),
        (reply([], document="d2"), "did not send"),
        (reply([{"label": "X", "start_char": 5, "end_char": 5}]), "outside"),
        (reply([{"label": "X", "start_char": 0, "end_char": 99}]), "outside"),
        (reply([{"label": "", "start_char": 0, "end_char": 1}]), "malformed"),
        (reply([{"label": "X", "start_char": -1, "end_char": 1}]), "malformed"),
        ([], "malformed"),
    ]:
        with pytest.raises(JobFailure, match=message):
            parse_reply(garbage, batch, "x@example.com", 1)

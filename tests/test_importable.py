"""Rendering a Document: Importable JSON per REFERENCE.md §1, text/plain, WebVTT and SRT."""

from __future__ import annotations

from typing import Any

from extractor.replies.importable import (
    BoundingBox,
    Document,
    DocumentKind,
    Line,
    Page,
    Word,
    to_importable,
    to_srt,
    to_text,
    to_vtt,
)


def ocr_document() -> Document:
    line = Line(
        (
            Word("SHIHLIN", BoundingBox(10, 20, 80, 40)),
            Word("TAIWAN", BoundingBox(90, 20, 150, 40)),
        ),
        page_index=0,
    )
    return Document("sign.png", DocumentKind.OCR, (line,), pages=(Page(0, 200, 100),))


def audio_document() -> Document:
    return Document(
        "call.wav",
        DocumentKind.AUDIO,
        (
            Line((Word("good"), Word("morning")), start_ms=0, end_ms=1500, speaker="Speaker 1"),
            Line((Word("hello"),), start_ms=3_723_004, end_ms=3_724_000),
        ),
        language="en",
        duration_ms=3_725_000,
    )


def test_published_ocr_example_shape(validator: Any) -> None:
    body = to_importable(ocr_document())
    validator.validate(body)
    assert body["cells"] == [
        {
            "content": "SHIHLIN TAIWAN",
            "index": 0,
            "line": 0,
            "metadata": [],
            "tokens": ["SHIHLIN", "TAIWAN"],
        }
    ]
    first = body["labels"][0]
    assert first == {
        "startCellLine": 0, "startCellIndex": 0, "startTokenIndex": 0, "startCharIndex": 0,
        "endCellLine": 0, "endCellIndex": 0, "endTokenIndex": 0, "endCharIndex": 6,
        "layer": 0, "counter": 0, "type": "BOUNDING_BOX", "pageIndex": 0, "nodeCount": 4,
        "x0": 10, "y0": 20, "x1": 80, "y1": 20, "x2": 80, "y2": 40, "x3": 10, "y3": 40,
    }  # fmt: skip
    assert body["labelSets"] == [] and body["name"] == "sign.png"
    assert body["pages"] == [{"pageIndex": 0, "pageWidth": 200, "pageHeight": 100}]


def test_timestamp_shape(validator: Any) -> None:
    body = to_importable(audio_document())
    validator.validate(body)
    assert body["type"] == "TIMESTAMP" and body["pages"] == [] and body["language"] == "en"
    assert body["cells"][0]["metadata"] == [{"key": "speaker", "value": "Speaker 1"}]
    assert body["cells"][0]["content"] == "good morning"
    label = body["labels"][0]
    assert (label["id"], label["endTokenIndex"], label["endCharIndex"]) == (1, 1, 6)
    assert (label["startTimestampMillis"], label["endTimestampMillis"]) == (0, 1500)
    assert body["labels"][1]["id"] == 2


def test_text_has_speaker_prefix_only_where_known() -> None:
    assert to_text(audio_document()) == "Speaker 1: good morning\nhello\n"
    assert to_text(ocr_document()) == "SHIHLIN TAIWAN\n"


def test_subtitles() -> None:
    assert to_vtt(audio_document()) == (
        "WEBVTT\n\n00:00:00.000 --> 00:00:01.500\n<v Speaker 1>good morning\n\n"
        "01:02:03.004 --> 01:02:04.000\nhello\n"
    )
    assert to_srt(audio_document()) == (
        "1\n00:00:00,000 --> 00:00:01,500\nSpeaker 1: good morning\n\n"
        "2\n01:02:03,004 --> 01:02:04,000\nhello\n"
    )


def test_schema_rejects_what_the_format_forbids(validator: Any) -> None:
    body = to_importable(ocr_document())
    broken = [
        {**body, "pages": None},
        {**body, "type": "TIMESTAMP"},
        {**body, "labels": [{**body["labels"][0], "nodeCount": 3}]},
        {**body, "labels": [{**body["labels"][0], "x0": 1.5}]},
        {**body, "cells": [{**body["cells"][0], "tokens": ["two words"]}]},
        {**body, "cells": [{**body["cells"][0], "metadata": [{"key": "k"}]}]},
        {**body, "labelSets": [{}]},
    ]
    for document in broken:
        assert not validator.is_valid(document)

"""The Document model and its renderings: Importable JSON, text/plain, WebVTT and SRT.

Engines build a ``Document``; the HTTP layer renders it. Every format comes from the same
``Document``, so the JSON and the text of one extraction can never disagree.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from enum import Enum
from typing import Any


class DocumentKind(Enum):
    OCR = "BOUNDING_BOX"
    AUDIO = "TIMESTAMP"


@dataclass(frozen=True)
class BoundingBox:
    """An axis-aligned word box in integer page pixels; ``right``/``bottom`` are exclusive."""

    left: int
    top: int
    right: int
    bottom: int

    def corners(self) -> dict[str, int]:
        """The four corners clockwise from the top-left, as the Importable format names them."""
        return {
            "x0": self.left, "y0": self.top,
            "x1": self.right, "y1": self.top,
            "x2": self.right, "y2": self.bottom,
            "x3": self.left, "y3": self.bottom,
        }  # fmt: skip


@dataclass(frozen=True)
class Word:
    """One token of a line: its text and, where known, its box (OCR) or time span (audio)."""

    text: str
    box: BoundingBox | None = None
    start_ms: int | None = None
    end_ms: int | None = None
    confidence: float | None = None


@dataclass(frozen=True)
class Line:
    """One text line: a cell in Importable JSON, a line in text/plain."""

    words: tuple[Word, ...]
    page_index: int | None = None  # OCR: the page the line lies on
    block: int | None = None  # OCR: Tesseract's block number on the page (hOCR, ALTO, TSV)
    paragraph: int | None = None  # OCR: Tesseract's paragraph number within the block
    start_ms: int | None = None  # audio: when the line starts, in milliseconds
    end_ms: int | None = None  # audio: when it ends, in milliseconds
    speaker: str | None = None  # audio: "Speaker 1", where known
    word_timings: bool = False  # audio: put each word's time span in the cell's metadata
    # audio: the engine's own numbers for the segment (see TranscriptSegment.detail); not part
    # of the Importable format, shown only by renderings that have a place for them
    detail: Mapping[str, Any] | None = field(default=None, compare=False)

    @property
    def tokens(self) -> list[str]:
        return [w.text for w in self.words]

    @property
    def content(self) -> str:
        return " ".join(self.tokens)


@dataclass(frozen=True)
class Page:
    index: int
    width: int  # pixels
    height: int  # pixels
    # OCR: how the page was turned to be read upright (orientation.Turn): degrees clockwise in
    # quarter turns (0, 90, 180, 270), then a small signed skew; its boxes are in the
    # upload's pixels all the same
    rotation: int = 0
    skew: float = 0.0
    # How sure the turn is: points of mean word confidence (0-100) the turned reading gained
    # over the page read as it lay (None: not turned, or turned by Tesseract on its own)
    rotation_confidence: float | None = None

    @property
    def text_angle(self) -> float:
        """Degrees counterclockwise the page's text lies at in the upload (hOCR's textangle,
        ALTO's ROTATION): the clockwise turn that set it upright."""
        return round((self.rotation + self.skew) % 360, 1)


@dataclass(frozen=True)
class Document:
    """What one extraction found, in reading (OCR) or time (audio) order."""

    name: str
    kind: DocumentKind
    # a tuple, or for a long document its lines spooled to disk a page at a time
    # (``replies.spool.SpooledLines``), read back on each pass
    lines: Sequence[Line]
    pages: tuple[Page, ...] = ()
    language: str | None = None
    duration_ms: int | None = None
    extra: dict[str, Any] = field(default_factory=dict, compare=False)


# -- Importable JSON ----------------------------------------------------------------------


def _span(line: int, first: int, last: int, last_token: str) -> dict[str, int]:
    return {
        "startCellLine": line,
        "startCellIndex": 0,
        "startTokenIndex": first,
        "startCharIndex": 0,
        "endCellLine": line,
        "endCellIndex": 0,
        "endTokenIndex": last,
        "endCharIndex": len(last_token) - 1,  # inclusive, as the published example counts
        "layer": 0,
        "counter": 0,
    }


def _cell(number: int, line: Line, page: Page | None = None) -> dict[str, Any]:
    metadata: list[dict[str, str]] = []
    if page is not None and page.rotation:
        metadata.append({"key": "rotation", "value": str(page.rotation)})
    if page is not None and page.skew:
        metadata.append({"key": "skew", "value": f"{page.skew:g}"})
    if page is not None and page.rotation_confidence is not None:
        metadata.append({"key": "rotationConfidence", "value": f"{page.rotation_confidence:g}"})
    if line.speaker:
        metadata.append({"key": "speaker", "value": line.speaker})
    if line.word_timings:
        timings = [{"word": w.text, "startMs": w.start_ms, "endMs": w.end_ms} for w in line.words]
        metadata.append({"key": "wordTimestamps", "value": json.dumps(timings)})
    if line.detail and line.detail.get("suspect"):  # audio: kept, but the decoder doubted it
        metadata.append({"key": "suspect", "value": str(line.detail["suspect"])})
    return {
        "content": line.content,
        "index": 0,
        "line": number,
        "metadata": metadata,
        "tokens": line.tokens,
    }


def _ocr_labels(number: int, line: Line) -> Iterator[dict[str, Any]]:
    for k, word in enumerate(line.words):
        if word.box is None:
            continue
        yield {
            **_span(number, k, k, word.text),
            "type": "BOUNDING_BOX",
            "pageIndex": line.page_index or 0,
            "nodeCount": 4,
            **word.box.corners(),
        }


def importable_parts(
    document: Document, lines: Iterable[Line], first: int = 0
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The cells and labels of ``lines``, the document's lines numbered from ``first`` on: a
    whole reply's (``to_importable``) or one piece of a streamed one (``replies.streamed``)."""
    cells: list[dict[str, Any]] = []
    labels: list[dict[str, Any]] = []
    pages = {page.index: page for page in document.pages}
    for number, line in enumerate(lines, start=first):
        cells.append(_cell(number, line, pages.get(line.page_index or 0)))
        if document.kind is DocumentKind.OCR:
            labels.extend(_ocr_labels(number, line))
        else:
            labels.append(
                {
                    **_span(number, 0, len(line.words) - 1, line.words[-1].text),
                    "type": "TIMESTAMP",
                    "id": number + 1,
                    "startTimestampMillis": line.start_ms or 0,
                    "endTimestampMillis": line.end_ms or 0,
                }
            )
    return cells, labels


def importable_shell(
    document: Document, cells: list[dict[str, Any]], labels: list[dict[str, Any]]
) -> dict[str, Any]:
    """The Importable JSON object of ``document`` with these cells and labels, keys in the
    order every reply has them."""
    reply: dict[str, Any] = {
        "name": document.name,
        "type": document.kind.value,
        "cells": cells,
        "labelSets": [],
        "labels": labels,
        "pages": [
            {"pageIndex": p.index, "pageWidth": p.width, "pageHeight": p.height}
            for p in document.pages
        ],
    }
    if document.language:
        reply["language"] = document.language
    if "language_probability" in document.extra:  # detected by a multilingual model
        reply["languageProbability"] = document.extra["language_probability"]
    return reply


def to_importable(document: Document) -> dict[str, Any]:
    """Render the Importable JSON object (REFERENCE.md §1) of ``document``."""
    return importable_shell(document, *importable_parts(document, document.lines))


# -- text renderings ----------------------------------------------------------------------


def to_text(document: Document) -> str:
    """One line per text line, no blank lines; audio lines carry ``Speaker N: `` where known."""
    return "".join(text_line(line) for line in document.lines)


def text_line(line: Line) -> str:
    """One line of the text/plain rendering, its newline included."""
    prefix = f"{line.speaker}: " if line.speaker else ""
    return prefix + line.content + "\n"


def _clock(ms: int, separator: str) -> str:
    hours, rest = divmod(ms, 3_600_000)
    minutes, rest = divmod(rest, 60_000)
    seconds, millis = divmod(rest, 1000)
    return f"{hours:02d}:{minutes:02d}:{seconds:02d}{separator}{millis:03d}"


def _cue_text(line: Line, vtt: bool) -> str:
    if not line.speaker:
        return line.content
    return f"<v {line.speaker}>{line.content}" if vtt else f"{line.speaker}: {line.content}"


def to_vtt(document: Document) -> str:
    """WebVTT cues, one per line (audio documents)."""
    cues = ["WEBVTT\n"]
    for line in document.lines:
        start, end = _clock(line.start_ms or 0, "."), _clock(line.end_ms or 0, ".")
        cues.append(f"{start} --> {end}\n{_cue_text(line, vtt=True)}\n")
    return "\n".join(cues)


def to_srt(document: Document) -> str:
    """SubRip cues, numbered from 1, one per line (audio documents)."""
    cues = []
    for n, line in enumerate(document.lines, start=1):
        start, end = _clock(line.start_ms or 0, ","), _clock(line.end_ms or 0, ",")
        cues.append(f"{n}\n{start} --> {end}\n{_cue_text(line, vtt=False)}\n")
    return "\n".join(cues)

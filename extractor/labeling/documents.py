"""Documents in the Importable format: built from text, read from extractor replies, labeled.

Everything here is pure (no database, no HTTP), so the rules about lines, tokens, speakers and
spans are tested directly.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from extractor.config import LabelingSettings
from extractor.labeling.errors import JobFailure
from extractor.labeling.reply_json import (
    ReplyLimits,
    ReplyRefused,
    extraction_limits,
    parse_reply_json,
)
from extractor.replies.schemas import importable_errors

# `Speaker 1: good morning`: a short name starting with a letter, so `10:30 call` stays text.
SPEAKER_PREFIX = re.compile(r"^(?P<speaker>[^\W\d_][\w .'-]{0,39}?)\s*:\s+(?P<text>\S.*)$")

# The document type of TOKEN_BASED projects (extractor replies are BOUNDING_BOX or TIMESTAMP).
TOKEN_BASED_TYPE = "TOKEN_BASED"
KIND_TO_TYPE = {"OCR": "BOUNDING_BOX", "AUDIO": "TIMESTAMP", "TOKEN_BASED": TOKEN_BASED_TYPE}


# Exactly the boundaries of `str.splitlines`, found one at a time instead of listed all at once.
LINE_BREAK = re.compile("\r\n|[\n\r\v\f\x1c\x1d\x1e\x85\u2028\u2029]")
# Exactly the tokens of `str.split()`: re's `\s` and str's whitespace are the same Unicode set.
TOKEN = re.compile(r"\S+")


def iter_lines(text: str) -> Iterator[str]:
    """``text.splitlines()`` one line at a time: a million short lines never exist as a list."""
    start = 0
    for match in LINE_BREAK.finditer(text):
        yield text[start : match.start()]
        start = match.end()
    if start < len(text):
        yield text[start:]


class DocumentTooLarge(JobFailure):
    """A document, or its project, is over a line or token limit (``limit`` names the setting)."""

    def __init__(self, message: str, field: str, maximum: int) -> None:
        super().__init__(message, limit=LabelingSettings.variable(field), maximum=maximum)
        self.field = field
        self.maximum = maximum


@dataclass
class TextBudget:
    """Lines and tokens one project may still build, charged document by document.

    Counting happens while a document is built, so the line and token past a limit are the last
    ones ever made: a 2 MB upload of ``"a\\n" * 10**6`` used to become 459 MB of cells before
    anything looked at it. The same budget measures uploads when they are received (nothing
    kept) and builds the documents in the job.
    """

    max_document_lines: int = LabelingSettings.max_document_lines
    max_document_tokens: int = LabelingSettings.max_document_tokens
    max_project_lines: int = LabelingSettings.max_project_lines
    max_project_tokens: int = LabelingSettings.max_project_tokens
    project_lines: int = 0
    project_tokens: int = 0

    @classmethod
    def from_settings(cls, settings: LabelingSettings) -> TextBudget:
        """A fresh budget for one project under ``settings``' limits."""
        return cls(
            settings.max_document_lines,
            settings.max_document_tokens,
            settings.max_project_lines,
            settings.max_project_tokens,
        )

    def _room(self, lines: int, tokens: int) -> tuple[int, int]:
        """Lines and tokens the current document, ``lines`` and ``tokens`` long, may still add."""
        return (
            min(self.max_document_lines, self.max_project_lines - self.project_lines) - lines,
            min(self.max_document_tokens, self.max_project_tokens - self.project_tokens) - tokens,
        )

    def _refuse(self, name: str, what: str, lines: int, tokens: int) -> DocumentTooLarge:
        """The error for the first limit ``lines`` more lines or ``tokens`` more tokens cross."""
        document = {"lines": self.max_document_lines, "tokens": self.max_document_tokens}[what]
        project = {"lines": self.max_project_lines, "tokens": self.max_project_tokens}[what]
        so_far = {"lines": self.project_lines, "tokens": self.project_tokens}[what]
        if {"lines": lines, "tokens": tokens}[what] > document:
            return DocumentTooLarge(
                f"{name!r} has more than {document} {what}, the limit of one document "
                f"({LabelingSettings.variable(f'max_document_{what}')})",
                f"max_document_{what}",
                document,
            )
        return DocumentTooLarge(
            f"the project's documents have more than {project} {what} together, the limit of "
            f"one project ({LabelingSettings.variable(f'max_project_{what}')}; {so_far} before {name!r})",
            f"max_project_{what}",
            project,
        )

    def kept_lines(
        self, name: str, text: str, *, speakers: bool = False
    ) -> Iterator[tuple[str, list[dict[str, str]]]]:
        """Each non-empty line's text and metadata (a speaker), charged to this budget first.

        Tokens are counted, not listed, so a 10 MB line of words costs no memory here; raises
        :class:`DocumentTooLarge` at the first line or token over a limit.
        """
        lines = tokens = 0
        for raw in iter_lines(text):
            metadata: list[dict[str, str]] = []
            line_text = raw
            if speakers:
                match = SPEAKER_PREFIX.match(raw.strip())
                if match:
                    metadata = [{"key": "speaker", "value": match["speaker"].strip()}]
                    line_text = match["text"]
            line_room, token_room = self._room(lines, tokens)
            count = 0
            for _ in TOKEN.finditer(line_text):
                count += 1
                if count > token_room:
                    raise self._refuse(name, "tokens", lines, tokens + count)
            if count == 0:
                continue
            if line_room == 0:
                raise self._refuse(name, "lines", lines + 1, tokens)
            lines += 1
            tokens += count
            yield line_text, metadata
        self.project_lines += lines
        self.project_tokens += tokens

    def cells(self, name: str, text: str, *, speakers: bool = False) -> Iterator[dict[str, Any]]:
        """The cells of ``text`` (see :func:`cells_from_text`), charged to this budget as made."""
        for line, (line_text, metadata) in enumerate(
            self.kept_lines(name, text, speakers=speakers)
        ):
            yield _cell(line, line_text.split(), metadata)

    def measure(self, name: str, text: str) -> None:
        """Charge a TOKEN_BASED upload's lines and tokens without making any cell."""
        for _ in self.kept_lines(name, text):
            pass

    def charge(self, name: str, document: dict[str, Any]) -> None:
        """Count an already-parsed document (an extractor's JSON reply) against the budget."""
        lines = len(document["cells"])
        tokens = sum(len(c["tokens"]) for c in document["cells"])
        line_room, token_room = self._room(0, 0)
        if lines > line_room:
            raise self._refuse(name, "lines", lines, 0)
        if tokens > token_room:
            raise self._refuse(name, "tokens", 0, tokens)
        self.project_lines += lines
        self.project_tokens += tokens


def _cell(line: int, tokens: list[str], metadata: list[dict[str, str]]) -> dict[str, Any]:
    """A cell of non-empty ``tokens``; its content is the tokens joined by single spaces."""
    return {
        "content": " ".join(tokens),
        "index": 0,
        "line": line,
        "metadata": metadata,
        "tokens": tokens,
    }


def cell(
    line: int, text: str, metadata: list[dict[str, str]] | None = None
) -> dict[str, Any] | None:
    """One cell from a line of text (None if blank); content is its tokens joined by spaces."""
    tokens = text.split()
    if not tokens:
        return None
    return _cell(line, tokens, metadata or [])


def cells_from_text(
    text: str, *, speakers: bool = False, budget: TextBudget | None = None, name: str = "text"
) -> list[dict[str, Any]]:
    """One cell per non-empty line, ``line`` counting kept lines from 0, within ``budget``
    (the default limits when none is given).

    With ``speakers`` (audio), a leading ``Name:`` goes to the cell's metadata as
    ``{"key": "speaker", "value": Name}`` and out of its content.
    """
    return list((budget or TextBudget()).cells(name, text, speakers=speakers))


def importable_from_text(
    name: str, kind: str, text: str, budget: TextBudget | None = None
) -> dict[str, Any]:
    """A document of ``kind`` from plain text (a TOKEN_BASED upload or a text/plain reply)."""
    return {
        "name": name,
        "type": KIND_TO_TYPE[kind],
        "cells": cells_from_text(text, speakers=kind == "AUDIO", budget=budget, name=name),
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
    name: str,
    kind: str,
    content_type: str,
    content: bytes,
    charset: str | None = None,
    budget: TextBudget | None = None,
    limits: ReplyLimits | None = None,
) -> dict[str, Any]:
    """Interpret an extractor's reply by its Content-Type alone, as the outbound contract says.

    The reply is already bounded in bytes by the outbound client; a JSON reply is measured
    against ``limits`` (nesting, values, string and number lengths) before it is parsed, and
    ``budget`` bounds its lines and tokens (the default limits when either is not given).
    """
    budget = budget or TextBudget()
    if content_type == "text/plain":
        return importable_from_text(
            name, kind, decode_text(content, "the extractor's reply", charset), budget
        )
    if content_type == "application/json":
        try:
            document = parse_reply_json(
                content, limits or extraction_limits(LabelingSettings()), "the extractor"
            )
        except ReplyRefused as refused:
            refused.details["document"] = name
            raise
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
        budget.charge(name, document)
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

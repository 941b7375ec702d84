"""Replies written to a file a piece at a time: the Importable JSON and text/plain of a long
document, never whole in memory.

``pipeline.reply`` renders a spooled document (``replies.spool``) into a file of the request's
work directory with these, before the first byte is sent (a failure is still a proper error
reply), then streams the file. The bytes are those of ``to_importable`` serialized with
``json.dumps`` and of ``to_text``: the pieces are joined with the separators ``json.dumps`` uses
(``", "``, ``": "``, ASCII only), and a test compares both ways on many documents.

Each piece of the JSON (the cells and labels of ``PIECE_LINES`` lines) is checked against the
Importable schema inside the document's own shell (name, type, pages, language): the schema's
rules are all per item or on those fields, so a reply whose every piece passes is valid whole.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable, Iterator, Sequence
from itertools import islice
from pathlib import Path
from typing import Any, TextIO

from extractor.replies.formats import alto_pieces, hocr_pieces, tsv_pieces
from extractor.replies.importable import (
    Document,
    Line,
    importable_parts,
    importable_shell,
    text_line,
)

PIECE_LINES = 200  # lines rendered, checked and written at a time (a dense page has ~100)
Validate = Callable[[dict[str, Any]], None]
Writer = Callable[[Document, TextIO, Path, "Validate | None"], None]


def _pieces(lines: Sequence[Line]) -> Iterator[tuple[int, list[Line]]]:
    """``lines`` in pieces of ``PIECE_LINES``, each with the number of its first line."""
    them = iter(lines)
    first = 0
    while piece := list(islice(them, PIECE_LINES)):
        yield first, piece
        first += len(piece)


def _join(out: TextIO, items: list[dict[str, Any]], first: bool) -> bool:
    """Write ``items`` as a JSON array's next elements; whether none has been written yet."""
    for item in items:
        out.write(("" if first else ", ") + json.dumps(item))
        first = False
    return first


def write_importable(
    document: Document, out: TextIO, scratch: Path, validate: Validate | None
) -> None:
    """``json.dumps(to_importable(document)) + "\\n"`` into ``out``, a piece at a time; the
    labels wait in ``scratch`` (a file path) while the cells are written."""
    empty = importable_shell(document, [], [])
    head = json.dumps({"name": empty["name"], "type": empty["type"]})[:-1]
    tail = {
        key: value
        for key, value in empty.items()
        if key not in ("name", "type", "cells", "labelSets", "labels")
    }
    out.write(head + ', "cells": [')
    no_cell = no_label = True
    with scratch.open("w+", encoding="ascii", newline="") as labels:
        for first, piece in _pieces(document.lines):
            cells, piece_labels = importable_parts(document, piece, first)
            if validate is not None:
                validate(importable_shell(document, cells, piece_labels))
            no_cell = _join(out, cells, no_cell)
            no_label = _join(labels, piece_labels, no_label)
        if no_cell and validate is not None:
            validate(empty)
        out.write('], "labelSets": [], "labels": [')
        labels.seek(0)
        shutil.copyfileobj(labels, out)
    scratch.unlink()
    out.write("], " + json.dumps(tail)[1:] + "\n")


def write_text(document: Document, out: TextIO, scratch: Path, validate: Validate | None) -> None:
    """``to_text(document)`` into ``out``, a line at a time."""
    del scratch, validate  # text has no schema and needs no second file
    for line in document.lines:
        out.write(text_line(line))


def _pieces_writer(pieces: Callable[[Document], Iterator[str]]) -> Writer:
    """A writer of the page-layout formats, whose renderers yield their text a piece at a
    time, page after page (``formats.hocr_pieces`` and the others)."""

    def write(document: Document, out: TextIO, scratch: Path, validate: Validate | None) -> None:
        del scratch, validate
        for piece in pieces(document):
            out.write(piece)

    return write


# The formats a spooled document is streamed in (the subtitle formats are audio's only).
WRITERS: dict[str, Writer] = {
    "json": write_importable,
    "text": write_text,
    "hocr": _pieces_writer(hocr_pieces),
    "alto": _pieces_writer(alto_pieces),
    "tsv": _pieces_writer(tsv_pieces),
}

"""One path from a saved file to a reply: sniff -> negotiate -> extract -> render.

``POST /extract`` (``views.py``) and ``extractor extract`` (``cli.py``) both call
``extract_reply``, so the checks, their order and the bytes of a reply are the same from the
web and the command line. Nothing here knows HTTP: the caller saves the upload into a
``workspace`` and turns errors into its own kind of answer.
"""

from __future__ import annotations

import json
import time
from collections.abc import Generator, Iterator, MutableMapping
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path, PurePosixPath, PureWindowsPath
from typing import TYPE_CHECKING

from extractor.config import Settings
from extractor.errors import EmptyUpload, PayloadTooLarge
from extractor.media.sniff import MediaKind, Sniffed, sniff
from extractor.media.workdirs import request_workdir
from extractor.pipeline.extraction import Extractor, Timings
from extractor.pipeline.negotiate import choose_format
from extractor.pipeline.request import ExtractionRequest
from extractor.pipeline.scans import write_pdf_reply
from extractor.replies.formats import ReplyFormat
from extractor.replies.importable import Document
from extractor.replies.schemas import importable_validator
from extractor.replies.spool import SpooledLines
from extractor.replies.streamed import WRITERS

if TYPE_CHECKING:
    from flask import Response

SNIFF_BYTES = 2048  # enough for every signature media.sniff knows
UPLOAD_NAME = "upload"  # the name of a reply whose upload named no file
REPLY_NAME = "reply"  # a long document's rendered reply, in its request's work directory
REPLY_PIECE_BYTES = 256 * 1024  # read and sent at a time from it


@contextmanager
def workspace(settings: Settings) -> Iterator[Path]:
    """A private directory for one extraction's files, removed with everything in it after."""
    with request_workdir(settings.tmp_dir) as workdir:
        yield workdir


@dataclass(frozen=True)
class Reply:
    """An extraction's Document and its rendering in the negotiated format: in memory, or for
    a spooled (long) document in a file of the request's work directory, sent from there a
    piece at a time (the file goes with the directory)."""

    document: Document
    format: ReplyFormat
    body: str | None  # what to send: the text, or the JSON serialized; None: in ``spooled``
    spooled: Path | None = None  # the rendered reply (UTF-8 but a PDF's), when not in ``body``

    @property
    def size(self) -> int:
        """The reply's length in bytes (its Content-Length)."""
        if self.spooled is not None:
            return self.spooled.stat().st_size
        return len(self.text().encode())

    def text(self) -> str:
        """The whole reply (read from its file if spooled: for the command line)."""
        if self.body is not None:
            return self.body
        assert self.spooled is not None
        return self.spooled.read_text(encoding="utf-8")

    def pieces(self) -> Generator[bytes]:
        """The reply's bytes, ``REPLY_PIECE_BYTES`` at a time from a spooled one."""
        if self.body is not None:
            yield self.body.encode()
            return
        assert self.spooled is not None
        with self.spooled.open("rb") as file:
            while piece := file.read(REPLY_PIECE_BYTES):
                yield piece


def extract_reply(
    extractor: Extractor,
    path: Path,
    name: str | None,
    workdir: Path,
    request: ExtractionRequest,
    *,
    accept: str | None = None,
    timings: Timings | None = None,
    log_fields: MutableMapping[str, object] | None = None,
    json_indent: int | None = None,
) -> Reply:
    """Answer for the file at ``path`` (inside ``workdir``) as ``request`` asks (its format
    wins over ``accept``, the Accept header's preferences).

    The checks run in the documented order: size (413), empty (400), kind (415), format (400
    or 406), then decoding and the engine. ``log_fields`` receives what the request log
    reports; ``name`` is the client's file name, of which only the base name is kept.
    """
    settings = extractor.settings
    deadline = time.monotonic() + settings.request_timeout  # a PDF reply is drawn within it
    timings = timings or Timings()
    fields: MutableMapping[str, object] = {} if log_fields is None else log_fields
    sniffed = check_upload(path, settings, fields)
    reply_format = choose_format(
        accept, request.format, settings.default_format,
        audio=sniffed.kind is MediaKind.AUDIO,
    )  # fmt: skip
    fields["format"] = reply_format.name
    document = extractor.extract(path, reply_name(name), sniffed, workdir, request, timings)
    with timings.stage("render"):
        if reply_format.scanned:  # drawn over the upload's pages, while it is here
            reply = Reply(document, reply_format, None, workdir / REPLY_NAME)
            assert reply.spooled is not None
            write_pdf_reply(document, path, sniffed, workdir, settings, reply.spooled, deadline)
        else:
            reply = document_reply(document, reply_format, workdir, settings, json_indent)
    log_document(document, fields)
    return reply


def document_reply(
    document: Document, reply_format: ReplyFormat, workdir: Path, settings: Settings,
    json_indent: int | None = None,
) -> Reply:  # fmt: skip
    """``document`` rendered in ``reply_format``: a spooled (long) one into a file of
    ``workdir`` a piece at a time, any other in memory. A stored job's result goes this way
    too, so it is byte-equal to the synchronous reply."""
    writer = WRITERS.get(reply_format.name)
    if isinstance(document.lines, SpooledLines) and writer and json_indent is None:
        reply = Reply(document, reply_format, None, workdir / REPLY_NAME)
        validate = importable_validator().validate if settings.validate_replies else None
        assert reply.spooled is not None
        with reply.spooled.open("w", encoding="utf-8", newline="") as out:
            writer(document, out, workdir / "labels.spool", validate)
        return reply
    body = render(document, reply_format, validate=settings.validate_replies,
                  json_indent=json_indent)  # fmt: skip
    return Reply(document, reply_format, body)


class StreamedReply:
    """A spooled reply's bytes, read from its file as they are sent (a WSGI body). Its
    workspace is removed when the body is closed: sent whole, the client gone, or the send
    deadline passed (the server closes a body in every case). A class, not a generator: a
    generator closed before its first piece would never run its ``finally``."""

    def __init__(self, reply: Reply, held: ExitStack) -> None:
        self._pieces = reply.pieces()
        self._held = held

    def __iter__(self) -> Iterator[bytes]:
        return self

    def __next__(self) -> bytes:
        return next(self._pieces)

    def close(self) -> None:
        self._pieces.close()
        self._held.close()


def reply_response(reply: Reply, held: ExitStack) -> Response:
    """The response that sends ``reply``: from memory, its workspace (``held``) closed now; from
    its file, the workspace closed with the response's body (``StreamedReply``). Flask is
    imported here: ``extractor extract`` takes this module without the web layer."""
    from flask import Response

    media_type = reply.format.media_type
    if reply.spooled is None:
        held.close()
        return Response(reply.body, content_type=media_type)
    return Response(
        StreamedReply(reply, held), content_type=media_type,
        headers={"Content-Length": str(reply.size)},
    )  # fmt: skip


def check_upload(
    path: Path, settings: Settings, fields: MutableMapping[str, object], field: str = "upload"
) -> Sniffed:
    """What the saved upload is, after the size (413) and empty (400) checks."""
    size = path.stat().st_size
    if size > settings.max_upload_bytes:
        raise PayloadTooLarge(
            f"the upload has {size} bytes; the limit is {settings.max_upload_bytes}"
        )
    if size == 0:
        raise EmptyUpload(f"the uploaded file {field!r} is empty")
    with path.open("rb") as fh:
        sniffed = sniff(fh.read(SNIFF_BYTES))
    fields.update(kind=sniffed.kind.value, media=sniffed.format, bytes=size)
    return sniffed


def log_document(document: Document, fields: MutableMapping[str, object]) -> None:
    """What the request log and the metrics report of an extraction's result."""
    fields.update(
        lines=len(document.lines), pages=len(document.pages), audio_ms=document.duration_ms
    )


def render(
    document: Document, reply_format: ReplyFormat, *, validate: bool, json_indent: int | None
) -> str:
    """``document`` in ``reply_format``; a JSON object is checked against the Importable
    schema first when ``validate`` (our own bug if it fails: a logged 500)."""
    body = reply_format.render(document)
    if isinstance(body, str):
        return body
    if validate:
        importable_validator().validate(body)
    return json.dumps(body, indent=json_indent) + "\n"


def reply_name(filename: str | None) -> str:
    """The base name of a client's file name: no directory of either separator survives, so
    ``../../etc/passwd.png`` comes back as ``passwd.png``; nothing left means ``upload``."""
    if not filename:
        return UPLOAD_NAME
    base = PureWindowsPath(PurePosixPath(filename).name).name  # Windows splits on / and \
    base = base.strip()
    return base if base not in ("", ".", "..") else UPLOAD_NAME

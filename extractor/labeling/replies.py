"""A GraphQL reply's bytes, known and capped before it is built, and documents sent as stored.

A document's ``importable`` is the bulk of any reply (10 MB of text is 20 MB of JSON), so it is
never loaded as Python objects to be serialized again. Resolving it charges the document's
recorded size (``documents.size_bytes``) to the request's :class:`ReplyBudget` and yields a
:class:`StoredJSON` placeholder; a request over ``max_reply_bytes`` is refused whole, before
any document is read. The reply is then written as a stream (:func:`reply_chunks`) in which
each placeholder is replaced by the document's JSON text exactly as the database holds it,
read in pieces from one snapshot (:func:`stored_pieces`). One query therefore holds at most
one piece of one document at once, whatever its reply size: 4 aliases of ``getProject { documents { importable } }`` on five
10 MB documents used to make a 409 MB reply and take the process from 1.2 to 2.5 GB.
"""

from __future__ import annotations

import json
import re
import secrets
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import Text, cast, func, select
from sqlalchemy.orm import Session

from extractor.config import LabelingSettings
from extractor.heap import trim_heap
from extractor.labeling.db import Database
from extractor.labeling.errors import LimitExceededError
from extractor.labeling.models import Document, stored_size

# Bytes of a document's text read and written at a time (the WSGI server sends each piece).
WRITE_BYTES = 1024 * 1024
# Characters of a document read by one query on PostgreSQL. Each query detoasts the whole
# value again (decompressing it): 1 MiB slices took a 21 MB document 21 decompressions, and four
# clients reading documents left another tenant's query waiting 16.7 s; 8 MiB slices cost 3.
POSTGRESQL_SLICE = 8 * 1024 * 1024
# After a reply that carried this many bytes of documents, freed memory goes back to the system
# (glibc keeps a thread's freed text for later otherwise, at the high-water mark).
TRIM_AFTER_BYTES = 4 * 1024 * 1024


@dataclass(frozen=True)
class StoredJSON:
    """A document's ``importable`` in a reply, to be copied from the database when written."""

    document_id: str
    size: int


@dataclass
class ReplyBudget:
    """The document bytes one request's reply may still carry (``max_reply_bytes``).

    Charged by each ``importable`` resolved, in execution order; once over, the request is
    refused and :attr:`refusal` says why.
    """

    settings: LabelingSettings
    used: int = 0
    documents: list[StoredJSON] = field(default_factory=list)
    refusal: LimitExceededError | None = None

    def charge(self, document_id: str, size: int) -> StoredJSON:
        """The placeholder of one document's ``importable``, its ``size`` bytes charged first;
        LIMIT_EXCEEDED (also kept in :attr:`refusal`) when the reply would be over its cap."""
        if self.refusal is not None:
            raise self.refusal
        maximum = self.settings.max_reply_bytes
        if self.used + size > maximum:
            advice = (
                f"document {document_id} alone has {size} bytes: only a higher limit can send it"
                if size > maximum
                else "ask for fewer documents at a time (documents(offset, limit))"
            )
            self.refusal = LimitExceededError.of_setting(
                self.settings,
                "max_reply_bytes",
                f"The reply would carry more than {maximum} bytes of documents; {advice}",
            )
            raise self.refusal
        self.used += size
        stored = StoredJSON(document_id, size)
        self.documents.append(stored)
        return stored


def measure_documents(session: Session, document_ids: list[str]) -> dict[str, int]:
    """The stored bytes of documents with no recorded size (rows written around the ORM), so
    the budget never under-counts; every document the service writes has its size already."""
    rows = session.execute(
        select(Document.id, stored_size(Document.importable)).where(Document.id.in_(document_ids))
    )
    return {document_id: int(size or 0) for document_id, size in rows}


def stored_pieces(db: Database, document_id: str) -> Iterator[bytes] | None:
    """A document's ``importable`` JSON text as stored, ``WRITE_BYTES`` at a time, all from one
    snapshot of the database (never a mix of two versions of a document being labeled); None
    when there is no such document.

    Never the whole text at once: reading it whole cost twice its size (the driver's buffer and
    the string), 4 x 42 MB for four clients reading 21 MB documents on PostgreSQL. SQLite reads
    it through incremental blob I/O in a read snapshot (WAL: writers go on meanwhile);
    PostgreSQL in 8 MiB slices of a REPEATABLE READ transaction (MVCC: nothing waits on it).
    """
    if db.is_postgresql:
        return _postgresql_pieces(db, document_id)
    return _sqlite_pieces(db, document_id)


def _sqlite_pieces(db: Database, document_id: str) -> Iterator[bytes] | None:
    connection = db.engine.raw_connection()  # no SQLAlchemy transaction: no write lock taken
    try:
        sqlite = connection.driver_connection
        assert sqlite is not None
        row = sqlite.execute("SELECT rowid FROM documents WHERE id = ?", (document_id,)).fetchone()
        # Read-only: a writable blob handle (sqlite3's default) holds the database's write lock.
        blob = (
            None
            if row is None
            else sqlite.blobopen("documents", "importable", row[0], readonly=True)
        )
    except BaseException:
        connection.close()
        raise
    if blob is None:
        connection.close()
        return None

    def pieces() -> Iterator[bytes]:
        try:
            with blob:
                while piece := blob.read(WRITE_BYTES):
                    yield piece
        finally:
            connection.close()

    return pieces()


def _postgresql_pieces(db: Database, document_id: str) -> Iterator[bytes] | None:
    text = cast(Document.importable, Text)
    length = select(func.length(text)).where(Document.id == document_id)
    connection = db.engine.connect().execution_options(isolation_level="REPEATABLE READ")
    try:
        transaction = connection.begin()
        total = connection.execute(length).scalar()
    except BaseException:
        connection.close()
        raise
    if total is None:
        connection.close()
        return None

    def pieces() -> Iterator[bytes]:
        try:
            for start in range(1, int(total) + 1, POSTGRESQL_SLICE):
                piece = connection.execute(
                    select(func.substr(text, start, POSTGRESQL_SLICE)).where(
                        Document.id == document_id
                    )
                ).scalar()
                piece = str(piece or "")
                for offset in range(0, len(piece), WRITE_BYTES):
                    yield piece[offset : offset + WRITE_BYTES].encode()
                del piece
            transaction.rollback()  # read only
        finally:
            connection.close()

    return pieces()


def _placeholder(nonce: str) -> Callable[[Any], str]:
    """``json.dumps``' ``default``: a :class:`StoredJSON` becomes a marker string carrying a
    per-reply random ``nonce``, which no client-sent string can spell out."""

    def default(value: Any) -> str:
        if isinstance(value, StoredJSON):
            return f"\x00{nonce}:{value.document_id}"
        raise TypeError(f"{type(value).__name__} is not JSON serializable")

    return default


def reply_chunks(result: dict[str, Any], db: Database) -> tuple[bytes | None, Iterator[bytes]]:
    """The JSON reply to ``result``: whole when it holds no document (first item), else as
    pieces in which every :class:`StoredJSON` is its document's stored text (second item).

    A document deleted meanwhile is written as ``null``.
    """
    nonce = secrets.token_hex(16)
    body = json.dumps(result, separators=(",", ":"), default=_placeholder(nonce))
    marker = re.compile(r'"\\u0000' + nonce + r':([^"]*)"')
    if marker.search(body) is None:
        return body.encode(), iter(())
    return None, _stream(marker.split(body), db)


def _stream(pieces: list[str], db: Database) -> Iterator[bytes]:
    """``pieces`` alternate reply text and document ids: write the text, then each document."""
    written = 0
    try:
        for index, piece in enumerate(pieces):
            if index % 2 == 0:
                yield piece.encode()
                continue
            document = stored_pieces(db, piece)
            if document is None:
                yield b"null"
                continue
            for chunk in document:
                written += len(chunk)
                yield chunk
    finally:
        if written >= TRIM_AFTER_BYTES:
            trim_heap()

"""Where asynchronous extraction jobs live: the job queue's tables plus one row per job of our
own (``extraction_jobs``: the upload's name and kind, the options, the webhook's state and, once
it succeeded, the Document).

**Everything is in the database**, uploads and results included: the queue keeps an upload in
``job_uploads`` rows of ``CHUNK_BYTES`` each until the job ends, and the result is one
compressed row. Every replica that can reach the database can run any job and answer for any
result, with no shared volume to provision (a ReadWriteMany volume is what Kubernetes makes
hardest), and the upload, the job and its result are written and deleted in the same
transactions, so no crash leaves a file without its job or a job without its file. Chunks keep
memory flat: a 200 MB upload is written and read 1 MiB at a time, never held whole.
"""

from __future__ import annotations

import zlib
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

from sqlalchemy import (
    JSON,
    DateTime,
    ForeignKey,
    Integer,
    LargeBinary,
    MetaData,
    String,
    Text,
    delete,
    func,
    insert,
    select,
    text,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

from extractor.jobs import JobsBase, Sessions, utcnow
from extractor.jobs.db import Database

# One row of job_uploads: small enough that reading one costs little memory, large enough that
# a 200 MB upload is 200 inserts.
CHUNK_BYTES = 1024 * 1024
# The PostgreSQL advisory lock key that serializes creating the tables (any fixed number).
SCHEMA_LOCK = 0x45787472  # "Extr"


class ExtractionBase(DeclarativeBase):
    """Declarative base of the extraction jobs' own table (the queue's tables are its own)."""

    metadata = MetaData(
        naming_convention={"ix": "ix_%(column_0_label)s", "pk": "pk_%(table_name)s"}
    )


class WebhookState:
    """Where a job's webhook is: none yet due, due (or retrying), delivered, or given up."""

    WAITING = "waiting"  # the job has not ended
    DUE = "due"  # the job ended: to send (again at ``webhook_next_at``)
    DELIVERED = "delivered"
    FAILED = "failed"  # out of attempts, or refused for good (4xx, refused address)


class ExtractionJob(ExtractionBase):
    """What one extraction job is about, beside its queue row (same id)."""

    __tablename__ = "extraction_jobs"
    job_id: Mapped[str] = mapped_column(String(80), primary_key=True)
    filename: Mapped[str] = mapped_column(String(500))
    media_kind: Mapped[str] = mapped_column(String(16))  # audio, image, pdf
    media_format: Mapped[str] = mapped_column(String(40))  # what the sniffer named it
    size: Mapped[int] = mapped_column(Integer)
    # The options given (ExtractionRequest.given(): JSON values, the format apart), read from
    # the client's text by the same code as /extract when submitted (4xx).
    options: Mapped[dict[str, Any]] = mapped_column(JSON)
    format: Mapped[str | None] = mapped_column(String(16))  # ?format= at submit, if any
    client: Mapped[str] = mapped_column(String(80))
    document: Mapped[bytes | None] = mapped_column(LargeBinary)  # zlib of documents.dump
    callback_url: Mapped[str | None] = mapped_column(Text)
    webhook_state: Mapped[str | None] = mapped_column(String(16), index=True)
    webhook_attempts: Mapped[int] = mapped_column(Integer, default=0)
    webhook_next_at: Mapped[datetime | None] = mapped_column(DateTime)
    webhook_locked_until: Mapped[datetime | None] = mapped_column(DateTime)
    webhook_last: Mapped[str | None] = mapped_column(String(300))  # the last attempt's outcome
    webhook_delivered_at: Mapped[datetime | None] = mapped_column(DateTime)
    created_at: Mapped[datetime] = mapped_column(DateTime, default=utcnow, index=True)


class ExtractionPdf(ExtractionBase):
    """A piece of a job's searchable PDF (``format=pdf``), drawn while the job ran: the upload
    it is drawn from is gone once the job ends. ``CHUNK_BYTES`` a row, as uploads are, so it
    is written and sent a piece at a time; deleted with its job's row."""

    __tablename__ = "extraction_pdfs"
    job_id: Mapped[str] = mapped_column(
        ForeignKey("extraction_jobs.job_id", ondelete="CASCADE"), primary_key=True
    )
    position: Mapped[int] = mapped_column(Integer, primary_key=True)
    content: Mapped[bytes] = mapped_column(LargeBinary)


def save_pdf(db: Sessions, job_id: str, path: Path) -> None:
    """Store the PDF at ``path`` as ``job_id``'s, in place of an earlier attempt's."""
    with db.session() as session:
        session.execute(delete(ExtractionPdf).where(ExtractionPdf.job_id == job_id))
        with path.open("rb") as fh:
            position = 0
            while chunk := fh.read(CHUNK_BYTES):
                values = {"job_id": job_id, "position": position, "content": chunk}
                session.execute(insert(ExtractionPdf).values(**values))
                position += 1


def pdf_size(db: Sessions, job_id: str) -> tuple[int, int] | None:
    """How many pieces ``job_id``'s PDF has and its length in bytes; None without one."""
    with db.session() as session:
        pieces, size = session.execute(
            select(func.count(), func.sum(func.length(ExtractionPdf.content))).where(
                ExtractionPdf.job_id == job_id
            )
        ).one()
    return (int(pieces), int(size)) if pieces else None


def pdf_pieces(db: Sessions, job_id: str, pieces: int) -> Iterator[bytes]:
    """``job_id``'s PDF, one stored piece read at a time."""
    for position in range(pieces):
        with db.session() as session:
            piece = session.scalars(
                select(ExtractionPdf.content).where(
                    ExtractionPdf.job_id == job_id, ExtractionPdf.position == position
                )
            ).one()
        yield piece


def open_database(url: str) -> Database:
    """The job database at ``url`` with the queue's tables and ours created where missing.

    One process at a time: the workers of a server and the replicas of a deployment start
    together, and on PostgreSQL all but one concurrent CREATE TABLE of a name fail (a duplicate
    catalog row), which left those processes without job threads. A transaction-scoped
    advisory lock lines them up; SQLite's write transactions already do.
    """
    db = Database(url)
    with db.engine.begin() as connection:
        if connection.dialect.name == "postgresql":
            connection.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": SCHEMA_LOCK})
        JobsBase.metadata.create_all(connection)
        ExtractionBase.metadata.create_all(connection)
    return db


def upload_chunks(
    path: Path, filename: str, chunk_bytes: int = CHUNK_BYTES
) -> Iterator[tuple[str, bytes]]:
    """The saved upload as ``(filename, chunk)`` pairs, the shape the queue stores uploads in."""
    with path.open("rb") as fh:
        while chunk := fh.read(chunk_bytes):
            yield filename, chunk


def unpack(stored: bytes) -> bytes:
    """The Document's JSON back (stored by ``documents.packed_document``)."""
    return zlib.decompress(stored)

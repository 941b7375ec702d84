"""The job queue's tables: jobs, the results of their finished steps, and their uploads.

They have their own metadata, so any service can hold them; a service that also has the owners
(the labeling service's ``users``) adds the foreign key in its migrations, not here, so the
queue depends on nothing above it. The schema is the one the labeling migrations 0001-0004 made.
"""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any

from sqlalchemy import (
    JSON,
    DateTime,
    Float,
    ForeignKey,
    Index,
    Integer,
    LargeBinary,
    MetaData,
    String,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

# The same constraint names as the labeling tables, so migrations can refer to them.
NAMING_CONVENTION = {
    "ix": "ix_%(column_0_label)s",
    "uq": "uq_%(table_name)s_%(column_0_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}


class JobStatus(StrEnum):
    """Where a job is; the stored words are those the labeling API has always shown."""

    QUEUED = "QUEUED"
    RUNNING = "IN_PROGRESS"
    SUCCEEDED = "DELIVERED"
    FAILED = "FAILED"
    CANCELLED = "CANCELLED"


# A job a worker may (still) take: queued, or running under a lease that may have expired.
RUNNABLE = (JobStatus.QUEUED, JobStatus.RUNNING)
ENDED = (JobStatus.SUCCEEDED, JobStatus.FAILED, JobStatus.CANCELLED)


def utcnow() -> datetime:
    """Now in UTC, naive: SQLite keeps no zone, so every timestamp is stored as naive UTC."""
    return datetime.now(UTC).replace(tzinfo=None)


def new_id() -> str:
    """A fresh opaque identifier (UUID4 text)."""
    return str(uuid.uuid4())


class JobsBase(DeclarativeBase):
    """Declarative base of the queue's own tables."""

    metadata = MetaData(naming_convention=NAMING_CONVENTION)


class Job(JobsBase):
    """A unit of background work leased by one worker at a time.

    ``locked_by``/``locked_until`` form the lease: a worker that stops heart-beating loses it and
    the job is claimed again. ``checkpoint`` keeps a small marker of what a resumed run may skip;
    the results of finished steps live in :class:`JobResult` rows, so a checkpoint costs what
    one step produced, never everything so far. ``tenant`` and ``claimed_at`` drive fair claims;
    ``run_seconds`` is the worker time spent on the job over all its runs, held against the
    job deadline.
    """

    __tablename__ = "jobs"
    __table_args__ = (
        Index("ix_jobs_claim", "status", "locked_until"),
        Index("ix_jobs_tenant_status", "tenant", "status"),
        Index("ix_jobs_tenant_claimed_at", "tenant", "claimed_at"),
    )
    id: Mapped[str] = mapped_column(String(80), primary_key=True)
    kind: Mapped[str] = mapped_column(String(40))
    owner_id: Mapped[str] = mapped_column(String(36), index=True)
    tenant: Mapped[str] = mapped_column(String(80))
    status: Mapped[str] = mapped_column(String(16))
    progress: Mapped[int] = mapped_column(Integer, default=0)
    errors: Mapped[list[dict[str, Any]]] = mapped_column(JSON, default=list)
    result_id: Mapped[str | None] = mapped_column(String(80))
    payload: Mapped[dict[str, Any]] = mapped_column(JSON)
    checkpoint: Mapped[dict[str, Any] | None] = mapped_column(JSON)
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    locked_by: Mapped[str | None] = mapped_column(String(120))
    locked_until: Mapped[datetime | None] = mapped_column(DateTime)
    heartbeat_at: Mapped[datetime | None] = mapped_column(DateTime)
    claimed_at: Mapped[datetime | None] = mapped_column(DateTime)
    run_seconds: Mapped[float] = mapped_column(Float, default=0.0)
    created_at: Mapped[datetime] = mapped_column(DateTime, default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(DateTime, default=utcnow)


class JobResult(JobsBase):
    """What one finished step of a running job produced (a batch's labels, a built document).

    One row per step, written in the transaction that advances the job's checkpoint, read back
    when the job succeeds and deleted when it ends.
    """

    __tablename__ = "job_results"
    job_id: Mapped[str] = mapped_column(ForeignKey("jobs.id", ondelete="CASCADE"), primary_key=True)
    step: Mapped[int] = mapped_column(Integer, primary_key=True)
    data: Mapped[Any] = mapped_column(JSON)
    created_at: Mapped[datetime] = mapped_column(DateTime, default=utcnow)


class JobUpload(JobsBase):
    """A file enqueued with its job, kept in the database until the job ends.

    The database, not a local disk, so a worker on another machine can process it.
    """

    __tablename__ = "job_uploads"
    id: Mapped[str] = mapped_column(String(36), primary_key=True, default=new_id)
    job_id: Mapped[str] = mapped_column(ForeignKey("jobs.id", ondelete="CASCADE"), index=True)
    position: Mapped[int] = mapped_column(Integer)
    filename: Mapped[str] = mapped_column(String(500))
    content: Mapped[bytes] = mapped_column(LargeBinary)

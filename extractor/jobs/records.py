"""What the queue hands out: plain frozen values, never live rows, so no caller can write a job
behind the queue's back."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from extractor.jobs.tables import Job


@dataclass(frozen=True)
class JobRecord:
    """A job as its owner may see it: never its payload (which may hold a secret)."""

    id: str
    kind: str
    owner_id: str
    status: str
    progress: int
    errors: list[dict[str, Any]]
    result_id: str | None
    attempts: int
    created_at: datetime
    updated_at: datetime
    claimed_at: datetime | None = None  # when a worker last took it


def record_of(job: Job) -> JobRecord:
    """The record of a row."""
    return JobRecord(
        id=job.id,
        kind=job.kind,
        owner_id=job.owner_id,
        status=job.status,
        progress=job.progress,
        errors=list(job.errors or []),
        result_id=job.result_id,
        attempts=job.attempts,
        created_at=job.created_at,
        updated_at=job.updated_at,
        claimed_at=job.claimed_at,
    )


@dataclass(frozen=True)
class JobPage:
    """One page of an owner's jobs, newest first; ``next`` is the cursor of the following page
    (None on the last one)."""

    jobs: list[JobRecord]
    next: str | None


@dataclass(frozen=True)
class ClaimedJob:
    """What a worker needs of a job it has just leased."""

    id: str
    kind: str
    owner_id: str
    payload: dict[str, Any]
    checkpoint: dict[str, Any] | None
    attempts: int
    tenant: str
    run_seconds: float


@dataclass(frozen=True)
class Upload:
    """One file enqueued with a job."""

    position: int
    filename: str
    content: bytes

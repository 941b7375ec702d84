"""The job database away for a moment while a job runs: a job whose details cannot be read as
it starts is left to its lease and retried, never failed for good (the queue's workers retry
on the queue's StorageError, and the job routes' 503, JobsUnavailable, must reach them as one);
a job that ends while its webhook cannot be marked due keeps its own outcome."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

import pytest

from extractor.async_jobs.errors import JobsUnavailable
from extractor.async_jobs.extraction_jobs import KIND, ExtractionJobs
from extractor.async_jobs.handler import ExtractionHandler
from extractor.async_jobs.owners import SHARED_OWNER as OWNER
from extractor.async_jobs.work import ExtractionWork
from extractor.config import Settings
from extractor.errors import UnsupportedMedia
from extractor.jobs import JobQueue, JobStatus, QueuePolicy, WorkerPool
from extractor.jobs.db import Database, create_tables


class DatabaseAway:
    """The handler's view of the jobs while their database does not answer."""

    def get(self, job_id: str) -> Any:
        raise JobsUnavailable("the job database is not answering; retry shortly")

    def webhook_due(self, job_id: str) -> None:
        raise AssertionError("a job that never ran has no webhook due")


class WebhookAway:
    """Jobs whose details read, but whose webhooks cannot be marked due."""

    def get(self, job_id: str) -> Any:
        return SimpleNamespace(options={}, filename="page.png", format=None)

    def webhook_due(self, job_id: str) -> None:
        raise JobsUnavailable("the job database is not answering; retry shortly")


class UnreadablePage:
    """An extraction that fails as ``POST /extract`` would (a 415)."""

    def extract(self, *args: Any) -> bytes:
        raise UnsupportedMedia("Tesseract could not read page 1: Image too small to scale!!")


@pytest.fixture
def queue(tmp_path: Path) -> Iterator[JobQueue]:
    db = Database(f"sqlite:///{tmp_path / 'jobs.db'}")
    create_tables(db)
    try:
        yield JobQueue(db, QueuePolicy(lease_seconds=30))
    finally:
        db.dispose()


def run_one_job(queue: JobQueue, jobs: object, work: object) -> Any:
    """Enqueue a job, run it through an ExtractionHandler on ``jobs`` and ``work``: its record."""
    with queue.db.session() as session:
        job_id = queue.enqueue(session, KIND, OWNER, {}).id
    handler = ExtractionHandler(
        cast(ExtractionJobs, jobs), cast(ExtractionWork, work), Settings(job_niceness=0)
    )
    claimed = queue.claim("worker")
    assert claimed is not None and claimed.id == job_id
    WorkerPool(queue, {KIND: handler}, threads=1).run_one(claimed, "worker")
    (record,) = queue.get(OWNER, [job_id])
    assert record is not None
    return record


def test_a_database_error_as_a_job_starts_leaves_it_to_be_retried(queue: JobQueue) -> None:
    record = run_one_job(queue, DatabaseAway(), None)
    # Still held under its lease, to be taken again when it expires; not FAILED.
    assert record.status == JobStatus.RUNNING and record.errors == []


def test_a_failed_job_keeps_its_error_when_its_webhook_cannot_be_marked(
    queue: JobQueue,
) -> None:
    record = run_one_job(queue, WebhookAway(), UnreadablePage())
    assert record.status == JobStatus.FAILED
    (error,) = record.errors
    assert error["stack"].startswith("Tesseract could not read page 1")
    assert error["args"]["code"] == "unsupported_media_type"

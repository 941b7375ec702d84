"""A job whose details cannot be read as it starts (the job database away for a moment) is
left to its lease and retried, never failed for good: the queue's workers retry on the
queue's StorageError, and the job routes' 503 (JobsUnavailable) must reach them as one."""

from __future__ import annotations

from pathlib import Path
from typing import Any, cast

from extractor.async_jobs.errors import JobsUnavailable
from extractor.async_jobs.extraction_jobs import KIND, OWNER, ExtractionJobs
from extractor.async_jobs.handler import ExtractionHandler
from extractor.async_jobs.work import ExtractionWork
from extractor.config import Settings
from extractor.jobs import JobQueue, JobStatus, QueuePolicy, WorkerPool
from extractor.jobs.db import Database, create_tables


class DatabaseAway:
    """The handler's view of the jobs while their database does not answer."""

    def get(self, job_id: str) -> Any:
        raise JobsUnavailable("the job database is not answering; retry shortly")

    def webhook_due(self, job_id: str) -> None:
        raise AssertionError("a job that never ran has no webhook due")


def test_a_database_error_as_a_job_starts_leaves_it_to_be_retried(tmp_path: Path) -> None:
    db = Database(f"sqlite:///{tmp_path / 'jobs.db'}")
    create_tables(db)
    try:
        queue = JobQueue(db, QueuePolicy(lease_seconds=30))
        with db.session() as session:
            job_id = queue.enqueue(session, KIND, OWNER, {}).id
        jobs = cast(ExtractionJobs, DatabaseAway())
        handler = ExtractionHandler(jobs, cast(ExtractionWork, None), Settings(job_niceness=0))
        pool = WorkerPool(queue, {KIND: handler}, threads=1)
        claimed = queue.claim("worker")
        assert claimed is not None and claimed.id == job_id
        pool.run_one(claimed, "worker")
        (record,) = queue.get(OWNER, [job_id])
        assert record is not None
        # Still held under its lease, to be taken again when it expires; not FAILED.
        assert record.status == JobStatus.RUNNING and record.errors == []
    finally:
        db.dispose()

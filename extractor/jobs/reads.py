"""Reading jobs: an owner's jobs by id or page by page, counts for metrics, a job's uploads and
step results. The half of the queue that never writes; :class:`~extractor.jobs.JobQueue` adds
the writes.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import AbstractContextManager
from typing import Any, Protocol

from sqlalchemy import func, or_, select, text, true
from sqlalchemy.orm import Session

from extractor.jobs.records import JobPage, JobRecord, Upload, record_of
from extractor.jobs.tables import Job, JobResult, JobStatus, JobUpload


class Sessions(Protocol):
    """Where the queue gets its transactions: one session per ``with``, committed at its end,
    rolled back on error, database errors raised as :class:`~extractor.jobs.StorageError`."""

    def session(self) -> AbstractContextManager[Session]:
        """One transaction."""
        ...


def iter_step_results(session: Session, job_id: str) -> Iterator[Any]:
    """The data of the job's finished steps, in step order, read one step at a time: a
    success that writes each as it comes holds one step's data, not the whole job's (500
    documents of 200 KB each were +500 MB read at once, issue 18)."""
    steps = list(
        session.scalars(
            select(JobResult.step).where(JobResult.job_id == job_id).order_by(JobResult.step)
        )
    )
    for step in steps:
        yield session.scalar(
            select(JobResult.data).where(JobResult.job_id == job_id, JobResult.step == step)
        )


def queued_of_tenant(session: Session, tenant: str, kind: str) -> int:
    """How many jobs of ``kind`` ``tenant`` has waiting (QUEUED), in the caller's transaction,
    for a per-tenant cap checked before an enqueue in the same transaction. On PostgreSQL a
    transaction-scoped advisory lock on the tenant makes two concurrent enqueues count one
    after the other (SQLite's BEGIN IMMEDIATE already serializes them)."""
    if session.get_bind().dialect.name == "postgresql":
        session.execute(
            text("SELECT pg_advisory_xact_lock(hashtext(:key))"), {"key": f"tenant:{tenant}"}
        )
    count = session.scalar(
        select(func.count())
        .select_from(Job)
        .where(Job.tenant == tenant, Job.kind == kind, Job.status == JobStatus.QUEUED)
    )
    return int(count or 0)


def step_results(session: Session, job_id: str) -> list[Any]:
    """The data of the job's finished steps, in step order (read when it succeeds)."""
    return list(
        session.scalars(
            select(JobResult.data).where(JobResult.job_id == job_id).order_by(JobResult.step)
        )
    )


class JobReads:
    """Queries of the jobs tables that change nothing."""

    def __init__(self, db: Sessions) -> None:
        self.db = db

    # -- reading ------------------------------------------------------------------------------

    def get(self, owner_id: str | None, job_ids: Sequence[str]) -> list[JobRecord | None]:
        """The owner's jobs in the order asked, None where unknown or someone else's (owner
        None: anyone's, for a service's own bookkeeping, never a client's read)."""
        mine = Job.owner_id == owner_id if owner_id is not None else true()
        with self.db.session() as session:
            rows = session.scalars(select(Job).where(Job.id.in_(list(job_ids)), mine))
            found = {job.id: record_of(job) for job in rows}
            return [found.get(job_id) for job_id in job_ids]

    def list_jobs(
        self,
        owner_id: str,
        *,
        statuses: Sequence[JobStatus] | None = None,
        limit: int = 50,
        after: str | None = None,
    ) -> JobPage:
        """The owner's jobs newest first, ``limit`` at a time, optionally of some statuses.

        ``after`` is the ``next`` cursor of the previous page (the last job id shown): keyset
        paging, so a page stays cheap and stable however many jobs come and go meanwhile.
        """
        query = select(Job).where(Job.owner_id == owner_id)
        if statuses:
            query = query.where(Job.status.in_(list(statuses)))
        with self.db.session() as session:
            if after is not None:
                last = session.get(Job, after)
                if last is None or last.owner_id != owner_id:
                    return JobPage([], None)
                query = query.where(
                    or_(
                        Job.created_at < last.created_at,
                        (Job.created_at == last.created_at) & (Job.id < last.id),
                    )
                )
            rows = list(
                session.scalars(query.order_by(Job.created_at.desc(), Job.id.desc()).limit(limit))
            )
            page = [record_of(job) for job in rows]
        more = len(page) == limit and limit > 0
        return JobPage(page, page[-1].id if more else None)

    def counts(self) -> dict[tuple[str, str], int]:
        """How many jobs there are of each ``(kind, status)`` (for metrics)."""
        with self.db.session() as session:
            rows = session.execute(
                select(Job.kind, Job.status, func.count()).group_by(Job.kind, Job.status)
            )
            return {(kind, status): int(count) for kind, status, count in rows}

    def uploads(self, job_id: str) -> list[Upload]:
        """The files enqueued with a job, in their order."""
        with self.db.session() as session:
            rows = session.scalars(
                select(JobUpload).where(JobUpload.job_id == job_id).order_by(JobUpload.position)
            )
            return [Upload(row.position, row.filename, row.content) for row in rows]

    def upload_count(self, job_id: str) -> int:
        """How many files were enqueued with a job."""
        with self.db.session() as session:
            count = session.scalar(
                select(func.count()).select_from(JobUpload).where(JobUpload.job_id == job_id)
            )
            return int(count or 0)

    def upload(self, job_id: str, position: int) -> Upload:
        """The file at ``position`` (0, 1, ... in enqueue order): one at a time, so a job of
        500 files holds one in memory."""
        with self.db.session() as session:
            row = session.execute(
                select(JobUpload.filename, JobUpload.content).where(
                    JobUpload.job_id == job_id, JobUpload.position == position
                )
            ).one()
            return Upload(position, row.filename, row.content)

    def step_results(self, job_id: str) -> list[Any]:
        """The data of the job's finished steps so far, in step order."""
        with self.db.session() as session:
            return step_results(session, job_id)

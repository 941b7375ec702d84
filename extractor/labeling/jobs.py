"""Jobs kept in the database and the workers that lease them.

A job is claimed by setting ``locked_by`` and a lease (``locked_until``) in one conditional
UPDATE, after ``SELECT ... FOR UPDATE SKIP LOCKED`` on PostgreSQL (SQLite has no SKIP LOCKED; its
write transactions are serialized, so the conditional UPDATE alone decides). A running job's lease
is renewed by a heartbeat thread; a worker that dies stops renewing it and the job is claimed again
and resumed from its checkpoint. Every write a worker makes is conditional on still holding the
lease, so a worker that was only slow can never overwrite the one that took over.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from functools import partial
from typing import Any, Protocol, cast

from sqlalchemy import CursorResult, delete, or_, select, update
from sqlalchemy.orm import Session

from extractor.labeling.config import LabelingSettings
from extractor.labeling.db import Database
from extractor.labeling.errors import JobFailure, JobInterrupted, StorageError
from extractor.labeling.models import Job, JobUpload, utcnow

log = logging.getLogger(__name__)

QUEUED, IN_PROGRESS, DELIVERED, FAILED = "QUEUED", "IN_PROGRESS", "DELIVERED", "FAILED"
RUNNABLE = (QUEUED, IN_PROGRESS)
# Payload keys removed once a job ends: a finished job keeps no credential.
SECRET_PAYLOAD_KEYS = frozenset({"secretKey"})


def iso(moment: datetime) -> str:
    """A stored naive-UTC timestamp as ISO-8601 with its zone spelled out."""
    return moment.isoformat(timespec="milliseconds") + "Z"


def job_view(job: Job) -> dict[str, Any]:
    """The GraphQL ``Job`` of a row: never its payload (which may hold a secret)."""
    return {
        "id": job.id,
        "status": job.status,
        "progress": job.progress,
        "errors": list(job.errors or []),
        "resultId": job.result_id,
        "createdAt": iso(job.created_at),
        "updatedAt": iso(job.updated_at),
    }


def new_job_id(kind: str) -> str:
    """``<Kind>Queue:<uuid4>``, the id form clients know from ``AutoLabelQueue:...``."""
    return f"{kind}Queue:{uuid.uuid4()}"


@dataclass(frozen=True)
class ClaimedJob:
    """What a worker needs of a job it has just leased."""

    id: str
    kind: str
    owner_id: str
    payload: dict[str, Any]
    checkpoint: dict[str, Any] | None
    attempts: int


class JobHandler(Protocol):
    """Runs one kind of job; must end by calling ``run.deliver`` or raising JobFailure."""

    kind: str

    def run(self, run: JobRun) -> None:
        """Do the work, checkpointing through ``run`` and delivering atomically at the end."""
        ...


class JobQueue:
    """Enqueue, claim and settle jobs in the database; every settle is lease-checked."""

    def __init__(self, db: Database, settings: LabelingSettings) -> None:
        self.db = db
        self.settings = settings
        self._listeners: list[Callable[[], None]] = []

    @property
    def lease(self) -> timedelta:
        """How long a claim or a heartbeat keeps a job ours."""
        return timedelta(seconds=self.settings.job_lease_seconds)

    def on_enqueue(self, listener: Callable[[], None]) -> None:
        """Call ``listener`` after each enqueue in this process (wakes local workers at once)."""
        self._listeners.append(listener)

    def notify(self) -> None:
        """Tell local workers a job is waiting; remote ones find it at their next poll."""
        for listener in self._listeners:
            listener()

    def claim(self, worker_id: str) -> ClaimedJob | None:
        """Lease the oldest runnable job whose lease is free or expired, or return None."""
        while True:
            now = utcnow()
            with self.db.session() as session:
                free = or_(Job.locked_until.is_(None), Job.locked_until < now)
                candidate = session.execute(
                    select(Job.id, Job.attempts)
                    .where(Job.status.in_(RUNNABLE), free)
                    .order_by(Job.created_at, Job.id)
                    .limit(1)
                    .with_for_update(skip_locked=True)
                ).first()
                if candidate is None:
                    return None
                if candidate.attempts >= self.settings.job_max_attempts:
                    self._give_up(session, candidate.id, candidate.attempts, now)
                    continue
                taken = _rows(
                    session,
                    update(Job)
                    .where(Job.id == candidate.id, Job.status.in_(RUNNABLE), free)
                    .values(
                        status=IN_PROGRESS,
                        locked_by=worker_id,
                        locked_until=now + self.lease,
                        heartbeat_at=now,
                        attempts=Job.attempts + 1,
                        updated_at=now,
                    )
                    .execution_options(synchronize_session=False),
                )
                if taken.rowcount != 1:
                    return None
                job = session.get(Job, candidate.id, populate_existing=True)
                assert job is not None
                return ClaimedJob(
                    id=job.id,
                    kind=job.kind,
                    owner_id=job.owner_id,
                    payload=dict(job.payload),
                    checkpoint=job.checkpoint,
                    attempts=job.attempts,
                )

    def _give_up(self, session: Session, job_id: str, attempts: int, now: datetime) -> None:
        """Fail a job that has killed or outlived its worker too many times."""
        log.warning("job %s failed for good after %d attempts", job_id, attempts)
        job = session.get(Job, job_id)
        assert job is not None
        job.status = FAILED
        job.errors = [
            *(job.errors or []),
            error_entry(f"the job was interrupted {attempts} times (workers stopped or died)"),
        ]
        job.payload = scrub(job.payload)
        job.checkpoint = None
        job.locked_by = job.locked_until = None
        job.updated_at = now
        session.execute(delete(JobUpload).where(JobUpload.job_id == job_id))

    def _owned(self, job_id: str, worker_id: str) -> Any:
        """The WHERE clause of every write a leaseholder makes."""
        return (Job.id == job_id) & (Job.locked_by == worker_id) & (Job.status == IN_PROGRESS)

    def heartbeat(self, job_id: str, worker_id: str) -> bool:
        """Extend the lease; False when it is no longer ours."""
        now = utcnow()
        with self.db.session() as session:
            result = _rows(
                session,
                update(Job)
                .where(self._owned(job_id, worker_id))
                .values(locked_until=now + self.lease, heartbeat_at=now),
            )
            return result.rowcount == 1

    def save_progress(
        self, job_id: str, worker_id: str, progress: int, checkpoint: dict[str, Any] | None
    ) -> bool:
        """Record progress and what a resumed run may skip; False when the lease is lost."""
        now = utcnow()
        with self.db.session() as session:
            values: dict[str, Any] = {"progress": progress, "updated_at": now}
            if checkpoint is not None:
                values["checkpoint"] = checkpoint
            result = _rows(
                session, update(Job).where(self._owned(job_id, worker_id)).values(**values)
            )
            return result.rowcount == 1

    def deliver(self, job_id: str, worker_id: str, write: Callable[[Session], str | None]) -> bool:
        """Write the job's result and mark it DELIVERED in one transaction, if still ours.

        The job row is updated first: on PostgreSQL that locks it, so a worker that lost the lease
        and finishes late blocks, then finds the row no longer its own and writes nothing.
        """
        now = utcnow()
        with self.db.session() as session:
            job = session.scalar(
                select(Job).where(self._owned(job_id, worker_id)).with_for_update()
            )
            if job is None:
                return False
            result_id = write(session)
            job.status = DELIVERED
            job.progress = 100
            job.result_id = result_id
            job.payload = scrub(job.payload)
            job.checkpoint = None
            job.locked_by = job.locked_until = None
            job.updated_at = now
            return True

    def fail(self, job_id: str, worker_id: str, failure: JobFailure) -> bool:
        """Mark the job FAILED with a JobError built from ``failure``, if still ours."""
        now = utcnow()
        with self.db.session() as session:
            job = session.scalar(
                select(Job).where(self._owned(job_id, worker_id)).with_for_update()
            )
            if job is None:
                return False
            job.status = FAILED
            job.errors = [*(job.errors or []), error_entry(failure.message, failure.details)]
            job.payload = scrub(job.payload)
            job.checkpoint = None
            job.locked_by = job.locked_until = None
            job.updated_at = now
            session.execute(delete(JobUpload).where(JobUpload.job_id == job_id))
            return True

    def release(self, job_id: str, worker_id: str) -> None:
        """Give the job back at once (a stopping worker), so another can resume it now."""
        with self.db.session() as session:
            session.execute(
                update(Job)
                .where(self._owned(job_id, worker_id))
                .values(locked_by=None, locked_until=None, attempts=Job.attempts - 1)
            )


def _rows(session: Session, statement: Any) -> CursorResult[Any]:
    """Execute a DML statement; its result has the ``rowcount`` lease checks rely on."""
    return cast(CursorResult[Any], session.execute(statement))


def scrub(payload: Mapping[str, Any]) -> dict[str, Any]:
    """The payload without its credentials."""
    return {key: value for key, value in payload.items() if key not in SECRET_PAYLOAD_KEYS}


def error_entry(message: str, details: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """One ``JobError``: an id, a readable ``stack`` (never a traceback) and its arguments."""
    return {"id": str(uuid.uuid4()), "stack": message, "args": dict(details or {})}


class JobRun:
    """One leased execution of a job, handed to its handler; keeps the lease alive meanwhile."""

    def __init__(
        self, queue: JobQueue, job: ClaimedJob, worker_id: str, stopping: threading.Event
    ) -> None:
        self.queue = queue
        self.job = job
        self.worker_id = worker_id
        self._stopping = stopping
        self._lost = threading.Event()
        self._done = threading.Event()
        self._heart = threading.Thread(target=self._beat, name=f"heartbeat-{job.id}", daemon=True)
        self.delivered = False

    def __enter__(self) -> JobRun:
        self._heart.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._done.set()
        self._heart.join()

    def _beat(self) -> None:
        interval = self.queue.settings.job_heartbeat_seconds
        while not self._done.wait(interval):
            try:
                if not self.queue.heartbeat(self.job.id, self.worker_id):
                    log.warning("lost the lease of job %s", self.job.id)
                    self._lost.set()
                    return
            except StorageError:
                log.exception("heartbeat of job %s failed; retrying", self.job.id)

    def check(self) -> None:
        """Raise JobInterrupted when the worker stops or the lease went to another worker."""
        if self._lost.is_set():
            raise JobInterrupted(f"lease of {self.job.id} lost")
        if self._stopping.is_set():
            raise JobInterrupted(f"worker stopping during {self.job.id}")

    @property
    def lease_lost(self) -> bool:
        """Whether another worker may own the job now."""
        return self._lost.is_set()

    def progress(self, percent: int, checkpoint: dict[str, Any] | None = None) -> None:
        """Save progress (capped at 99 until delivered) and a checkpoint, then check the lease."""
        if not self.queue.save_progress(
            self.job.id, self.worker_id, min(max(percent, 0), 99), checkpoint
        ):
            self._lost.set()
        self.check()

    def deliver(self, write: Callable[[Session], str | None]) -> None:
        """Write the result and mark the job DELIVERED atomically."""
        self.check()
        if not self.queue.deliver(self.job.id, self.worker_id, write):
            self._lost.set()
            raise JobInterrupted(f"lease of {self.job.id} lost before delivery")
        self.delivered = True


class WorkerPool:
    """Threads that claim and run jobs until stopped; used embedded and by `worker`."""

    def __init__(
        self,
        queue: JobQueue,
        handlers: Mapping[str, JobHandler],
        threads: int,
        name: str | None = None,
    ) -> None:
        self.queue = queue
        self.handlers = dict(handlers)
        self.size = threads
        self.name = name or f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
        self._stopping = threading.Event()
        self._wake = threading.Event()
        self._threads: list[threading.Thread] = []
        queue.on_enqueue(self._wake.set)

    def start(self) -> None:
        """Start the worker threads (idempotent)."""
        if self._threads:
            return
        self._stopping.clear()
        for index in range(self.size):
            thread = threading.Thread(
                target=self._loop, args=(f"{self.name}:{index}",), name=f"labeling-worker-{index}"
            )
            thread.daemon = True
            thread.start()
            self._threads.append(thread)
        log.info("started %d labeling worker thread(s) as %s", self.size, self.name)

    def stop(self, timeout: float = 30.0) -> None:
        """Ask every thread to stop after its current step and wait for them; jobs are released."""
        self._stopping.set()
        self._wake.set()
        for thread in self._threads:
            thread.join(timeout)
        self._threads = []

    def _loop(self, worker_id: str) -> None:
        poll = self.queue.settings.job_poll_seconds
        while not self._stopping.is_set():
            try:
                job = self.queue.claim(worker_id)
            except Exception:
                # Whatever went wrong (the database is away, most likely), a worker thread that
                # dies would stall every job silently: log it and try again at the next poll.
                log.exception("cannot claim jobs; retrying")
                job = None
            if job is None:
                self._wake.wait(poll)
                self._wake.clear()
                continue
            self.run_one(job, worker_id)

    def run_one(self, job: ClaimedJob, worker_id: str) -> None:
        """Run one claimed job to DELIVERED or FAILED, or hand it back when interrupted."""
        handler = self.handlers.get(job.kind)
        log.info("worker %s runs job %s (attempt %d)", worker_id, job.id, job.attempts)
        with JobRun(self.queue, job, worker_id, self._stopping) as run:
            try:
                if handler is None:
                    raise JobFailure(f"no worker knows jobs of kind {job.kind!r}")
                handler.run(run)
                if not run.delivered:
                    raise JobFailure("the job ended without a result")
                log.info("job %s delivered", job.id)
            except JobInterrupted as exc:
                log.info("job %s interrupted: %s", job.id, exc)
                if not run.lease_lost:
                    self._settle(partial(self.queue.release, job.id, worker_id))
            except JobFailure as failure:
                log.info("job %s failed: %s", job.id, failure.message)
                self._settle(partial(self.queue.fail, job.id, worker_id, failure))
            except StorageError:
                # The database is away: leave the lease to expire so the job is retried.
                log.exception("job %s could not be stored; it will be retried", job.id)
            except Exception:
                log.exception("job %s crashed", job.id)
                crash = JobFailure("internal error while running the job (see the server log)")
                self._settle(partial(self.queue.fail, job.id, worker_id, crash))

    @staticmethod
    def _settle(action: Callable[[], object]) -> None:
        try:
            action()
        except StorageError:
            log.exception("cannot record the end of a job; its lease will expire")

"""Jobs kept in the database and the workers that lease them.

A job is claimed by setting ``locked_by`` and a lease (``locked_until``) in one conditional
UPDATE, after ``SELECT ... FOR UPDATE SKIP LOCKED`` on PostgreSQL (SQLite has no SKIP LOCKED; its
write transactions are serialized, so the conditional UPDATE alone decides). A running job's lease
is renewed by a heartbeat thread; a worker that dies stops renewing it and the job is claimed again
and resumed from its checkpoint. Every write a worker makes is conditional on still holding the
lease, so a worker that was only slow can never overwrite the one that took over.

Claims are fair between tenants (a team, or one user's personal jobs): the tenant with the
fewest running jobs goes first, then the one served longest ago, then the oldest job. A running
job whose tenant holds more than ``job_tenant_share`` of the running jobs while another tenant
waits hands its worker over at its next step (``JobRun.share_point``); results of finished steps
are kept in ``job_results`` rows, so nothing is redone. A job also has a deadline in worker time.
A stopping worker lets the call in flight end (bounded by that call's timeouts), keeps its
result and then releases the job, so no request is ever sent twice by a deploy.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from functools import partial
from typing import Any, Protocol, cast

from sqlalchemy import CursorResult, delete, func, or_, select, update
from sqlalchemy.orm import Session, aliased

from extractor.heap import limit_heap_retention, trim_heap
from extractor.labeling.config import LabelingSettings
from extractor.labeling.db import Database
from extractor.labeling.errors import JobFailure, JobInterrupted, StorageError
from extractor.labeling.metrics import observe_claim
from extractor.labeling.models import Job, JobResult, JobUpload, utcnow

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
    tenant: str
    run_seconds: float


class JobYielded(JobInterrupted):
    """The job hands its worker to another tenant's waiting job; it is released, not failed."""


def _leased(job: Any, now: datetime) -> Any:
    """Jobs a worker holds right now (``job`` is :class:`Job` or an alias of it)."""
    return (job.status == IN_PROGRESS) & job.locked_by.is_not(None) & (job.locked_until >= now)


def iter_step_results(session: Session, job_id: str) -> Iterator[Any]:
    """The data of the job's finished steps, in step order, read one step at a time: a
    delivery that writes each as it comes holds one step's data, not the whole job's (500
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


def step_results(session: Session, job_id: str) -> list[Any]:
    """The data of the job's finished steps, in step order (read at delivery)."""
    return list(
        session.scalars(
            select(JobResult.data).where(JobResult.job_id == job_id).order_by(JobResult.step)
        )
    )


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
        """Lease a runnable job whose lease is free or expired, fairly between tenants, or None.

        Order: the tenant with the fewest running jobs, then the tenant served longest ago (a
        job that yielded goes behind the others), then the oldest job.
        """
        while True:
            now = utcnow()
            with self.db.session() as session:
                free = or_(Job.locked_until.is_(None), Job.locked_until < now)
                mate, served = aliased(Job), aliased(Job)
                running = (
                    select(func.count())
                    .select_from(mate)
                    .where(mate.tenant == Job.tenant, _leased(mate, now))
                    .scalar_subquery()
                )
                last_served = (
                    select(func.max(served.claimed_at))
                    .where(served.tenant == Job.tenant)
                    .scalar_subquery()
                )
                candidate = session.execute(
                    select(Job.id, Job.attempts, Job.updated_at)
                    .where(Job.status.in_(RUNNABLE), free)
                    .order_by(running, last_served.asc().nulls_first(), Job.created_at, Job.id)
                    .limit(1)
                    .with_for_update(skip_locked=True, of=Job)
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
                        claimed_at=now,
                        attempts=Job.attempts + 1,
                        updated_at=now,
                    )
                    .execution_options(synchronize_session=False),
                )
                if taken.rowcount != 1:
                    return None
                job = session.get(Job, candidate.id, populate_existing=True)
                assert job is not None
                # Waiting since it was queued, or since a worker handed it back.
                observe_claim(job.kind, (now - candidate.updated_at).total_seconds())
                return ClaimedJob(
                    id=job.id,
                    kind=job.kind,
                    owner_id=job.owner_id,
                    payload=dict(job.payload),
                    checkpoint=job.checkpoint,
                    attempts=job.attempts,
                    tenant=job.tenant,
                    run_seconds=job.run_seconds,
                )

    def should_yield(self, tenant: str) -> bool:
        """Whether a job of ``tenant`` should hand its worker over: another tenant's job waits
        and ``tenant`` holds more than ``job_tenant_share`` of the running jobs."""
        if self.settings.job_tenant_share >= 1:
            return False  # a tenant can never hold more than all of them: no query needed
        now = utcnow()
        with self.db.session() as session:
            free = or_(Job.locked_until.is_(None), Job.locked_until < now)
            waiting = session.scalar(
                select(Job.id).where(Job.status.in_(RUNNABLE), free, Job.tenant != tenant).limit(1)
            )
            if waiting is None:
                return False
            total, mine = session.execute(
                select(func.count(), func.count().filter(Job.tenant == tenant)).where(
                    _leased(Job, now)
                )
            ).one()
            return bool(mine > self.settings.job_tenant_share * total)

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
        session.execute(delete(JobResult).where(JobResult.job_id == job_id))

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

    def save_step(
        self,
        job_id: str,
        worker_id: str,
        progress: int,
        checkpoint: dict[str, Any] | None,
        run_seconds: float | None = None,
        result: tuple[int, Any] | None = None,
    ) -> bool:
        """Record progress, the checkpoint and one step's ``(step, data)`` result in one
        transaction, if the lease is still ours: the bytes written are those of this step only.
        """
        now = utcnow()
        with self.db.session() as session:
            values: dict[str, Any] = {"progress": progress, "updated_at": now}
            if checkpoint is not None:
                values["checkpoint"] = checkpoint
            if run_seconds is not None:
                values["run_seconds"] = run_seconds
            owned = _rows(
                session, update(Job).where(self._owned(job_id, worker_id)).values(**values)
            )
            if owned.rowcount != 1:
                return False
            if result is not None:
                step, data = result
                # A step redone after a lost lease replaces the row its first run may have left.
                session.execute(
                    delete(JobResult).where(JobResult.job_id == job_id, JobResult.step == step)
                )
                session.add(JobResult(job_id=job_id, step=step, data=data))
            return True

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
            session.execute(delete(JobResult).where(JobResult.job_id == job_id))
            job.status = DELIVERED
            job.progress = 100
            job.result_id = result_id
            job.payload = scrub(job.payload)
            job.checkpoint = None
            job.locked_by = job.locked_until = None
            job.updated_at = now
            return True

    def fail(
        self, job_id: str, worker_id: str, failure: JobFailure, run_seconds: float | None = None
    ) -> bool:
        """Mark the job FAILED with a JobError built from ``failure``, if still ours, with the
        worker time it used in all (``run_seconds``, when known)."""
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
            if run_seconds is not None:
                job.run_seconds = run_seconds
            session.execute(delete(JobUpload).where(JobUpload.job_id == job_id))
            session.execute(delete(JobResult).where(JobResult.job_id == job_id))
            return True

    def release(self, job_id: str, worker_id: str, run_seconds: float | None = None) -> None:
        """Give the job back at once (a stopping or yielding worker), so another can resume it
        now; the claim is not counted as an attempt."""
        values: dict[str, Any] = {
            "locked_by": None,
            "locked_until": None,
            "attempts": Job.attempts - 1,
        }
        if run_seconds is not None:
            values["run_seconds"] = run_seconds
        with self.db.session() as session:
            session.execute(update(Job).where(self._owned(job_id, worker_id)).values(**values))


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
        self._started = time.monotonic()
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

    def run_seconds(self) -> float:
        """Worker time spent on the job: earlier runs' (as stored) plus this one's so far."""
        return self.job.run_seconds + (time.monotonic() - self._started)

    def check(self, *, deadline: bool = True) -> None:
        """Raise JobInterrupted when the worker stops or the lease went to another worker, and
        JobFailure once the job has used up its deadline (unless ``deadline`` is False)."""
        if self._lost.is_set():
            raise JobInterrupted(f"lease of {self.job.id} lost")
        limit = self.queue.settings.job_deadline_seconds
        if deadline and self.run_seconds() > limit:
            raise JobFailure(
                f"the job did not finish within its deadline of {limit:g} seconds of work",
                deadlineSeconds=limit,
            )
        if self._stopping.is_set():
            raise JobInterrupted(f"worker stopping during {self.job.id}")

    def share_point(self) -> None:
        """A point where the job can stop and resume losslessly: hand the worker over (raise
        JobYielded) when our tenant holds more than its share of the running jobs while another
        tenant's job waits."""
        if self.queue.should_yield(self.job.tenant):
            raise JobYielded(f"{self.job.id} yields its worker to another tenant")

    @property
    def lease_lost(self) -> bool:
        """Whether another worker may own the job now."""
        return self._lost.is_set()

    def progress(
        self,
        percent: int,
        checkpoint: dict[str, Any] | None = None,
        result: tuple[int, Any] | None = None,
    ) -> None:
        """Save progress (capped at 99 until delivered), a checkpoint and the ``(step, data)``
        result of the step just finished, in one transaction; then check the lease."""
        if not self.queue.save_step(
            self.job.id,
            self.worker_id,
            min(max(percent, 0), 99),
            checkpoint,
            self.run_seconds(),
            result,
        ):
            self._lost.set()
        self.check()

    def deliver(self, write: Callable[[Session], str | None]) -> None:
        """Write the result and mark the job DELIVERED atomically (all work is done by now, so
        the deadline no longer applies)."""
        self.check(deadline=False)
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
        # A job's memory (a reply of up to OUTBOUND_MAX_REPLY_BYTES, its text, what parsing it
        # made) goes back to the system when the job ends: fixed mmap and trim thresholds and
        # one arena, so that what one job thread freed is not held for it alone (issue 18).
        limit_heap_retention()
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
        """Ask every thread to stop after its current step and wait for them; jobs are released.

        A thread inside an outbound call is waited for even past ``timeout``: cutting the call
        would lose a reply the API already computed and make the next worker send the request
        again. Calls end within their own total timeouts, so the wait stays bounded; only a
        thread stuck past those (a bug) is left behind, its lease then expiring.
        """
        self._stopping.set()
        self._wake.set()
        settings = self.queue.settings
        grace = time.monotonic() + timeout
        for thread in self._threads:
            thread.join(max(grace - time.monotonic(), 0))
        busy = [thread for thread in self._threads if thread.is_alive()]
        if busy:
            log.warning(
                "%d job(s) still in a call after %g s; waiting for the call to end so its reply "
                "is kept and its request never sent twice",
                len(busy),
                timeout,
            )
            longest = max(settings.outbound_total_timeout, settings.prediction_total_timeout)
            limit = time.monotonic() + longest + settings.job_lease_seconds
            for thread in busy:
                thread.join(max(limit - time.monotonic(), 0))
            if any(thread.is_alive() for thread in busy):
                log.error("a labeling worker thread outlived every call timeout; leaving it")
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
                    release = partial(self.queue.release, job.id, worker_id, run.run_seconds())
                    self._settle(release)
            except JobFailure as failure:
                log.info("job %s failed: %s", job.id, failure.message)
                used = run.run_seconds()
                self._settle(partial(self.queue.fail, job.id, worker_id, failure, used))
            except StorageError:
                # The database is away: leave the lease to expire so the job is retried.
                log.exception("job %s could not be stored; it will be retried", job.id)
            except Exception:
                log.exception("job %s crashed", job.id)
                crash = JobFailure("internal error while running the job (see the server log)")
                self._settle(partial(self.queue.fail, job.id, worker_id, crash))
            finally:
                trim_heap()  # ~1 ms per job: the job's garbage is not the process's new size

    @staticmethod
    def _settle(action: Callable[[], object]) -> None:
        try:
            action()
        except StorageError:
            log.exception("cannot record the end of a job; its lease will expire")

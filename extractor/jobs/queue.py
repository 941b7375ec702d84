"""The job queue: the only code that builds job rows or queries the jobs tables.

A job is claimed by setting ``locked_by`` and a lease (``locked_until``) in one conditional
UPDATE, after ``SELECT ... FOR UPDATE SKIP LOCKED`` on PostgreSQL (SQLite has no SKIP LOCKED; its
write transactions are serialized, so the conditional UPDATE alone decides). A running job's lease
is renewed by its worker's heartbeat; a worker that dies stops renewing it and the job is claimed
again and resumed from its checkpoint. Every write a worker makes is conditional on still holding
the lease, so a worker that was only slow can never overwrite the one that took over, and a job
cancelled meanwhile is never finished by its worker.

Claims are fair between tenants (a team, or one user's personal jobs): the tenant with the
fewest running jobs goes first, then the one served longest ago, then the oldest job. A tenant
holding more than ``tenant_share`` of the running jobs while another tenant waits is asked to
hand a worker over (:meth:`JobQueue.should_yield`).
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable, Collection, Iterable, Mapping
from datetime import datetime
from typing import Any, cast

from sqlalchemy import CursorResult, case, delete, event, func, or_, select, text, true, update
from sqlalchemy.orm import Session, aliased

from extractor.jobs.cleanup import JobCleanup
from extractor.jobs.errors import JobFailure, OwnerCapReached
from extractor.jobs.policy import QueuePolicy
from extractor.jobs.reads import JobReads, Sessions
from extractor.jobs.records import ClaimedJob, JobRecord, record_of
from extractor.jobs.tables import RUNNABLE, Job, JobResult, JobStatus, JobUpload, utcnow

log = logging.getLogger(__name__)


def new_job_id(kind: str) -> str:
    """``<Kind>Queue:<uuid4>``, the id form clients know from ``AutoLabelQueue:...``;
    unguessable (122 random bits)."""
    return f"{kind}Queue:{uuid.uuid4()}"


def error_entry(message: str, details: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """One error of a job: an id, a readable ``stack`` (never a traceback) and its arguments."""
    return {"id": str(uuid.uuid4()), "stack": message, "args": dict(details or {})}


def _leased(job: Any, now: datetime) -> Any:
    """Jobs a worker holds right now (``job`` is :class:`Job` or an alias of it)."""
    return (
        (job.status == JobStatus.RUNNING) & job.locked_by.is_not(None) & (job.locked_until >= now)
    )


def _free(now: datetime) -> Any:
    """Jobs no live lease holds."""
    return or_(Job.locked_until.is_(None), Job.locked_until < now)


def _rows(session: Session, statement: Any) -> CursorResult[Any]:
    """Execute a DML statement; its result has the ``rowcount`` lease checks rely on."""
    return cast(CursorResult[Any], session.execute(statement))


class JobQueue(JobCleanup, JobReads):
    """Enqueue, claim, renew, settle, cancel and reap jobs (reading them: :class:`JobReads`,
    deleting ended ones: :class:`JobCleanup`); every settle is lease-checked."""

    def __init__(
        self,
        db: Sessions,
        policy: QueuePolicy,
        *,
        on_claim: Callable[[str, float], None] | None = None,
    ) -> None:
        super().__init__(db)
        self.policy = policy
        # Told each claim's kind and how long the job waited (the service's metric).
        self._on_claim = on_claim
        self._listeners: list[Callable[[], None]] = []

    # -- enqueue ------------------------------------------------------------------------------

    def on_enqueue(self, listener: Callable[[], None]) -> None:
        """Call ``listener`` after each enqueue in this process commits (wakes local workers)."""
        self._listeners.append(listener)

    def notify(self) -> None:
        """Tell local workers a job is waiting; remote ones find it at their next poll."""
        for listener in self._listeners:
            listener()

    def enqueue(
        self,
        session: Session,
        kind: str,
        owner_id: str,
        payload: Mapping[str, Any],
        *,
        tenant: str | None = None,
        uploads: Iterable[tuple[str, bytes]] = (),
        max_unfinished: int | None = None,
        shown_running: bool = False,
    ) -> JobRecord:
        """Add a job in the caller's transaction (so it exists only if the rest commits).

        ``tenant`` is whom the job counts against for fair claims (default: its owner);
        ``uploads`` are ``(filename, content)`` files kept with the job until it ends;
        ``max_unfinished`` refuses the job with :class:`OwnerCapReached` when the owner already
        has that many queued or running; ``shown_running`` stores it as RUNNING from the start
        (the labeling API answers IN_PROGRESS at once) -- it is still claimable.
        """
        if max_unfinished is not None:
            self._reserve_slot(session, owner_id, max_unfinished)
        now = utcnow()
        job = Job(
            id=new_job_id(kind),
            kind=kind,
            owner_id=owner_id,
            tenant=tenant or owner_id,
            status=JobStatus.RUNNING if shown_running else JobStatus.QUEUED,
            progress=0,
            errors=[],
            payload=dict(payload),
            attempts=0,
            run_seconds=0.0,
            created_at=now,
            updated_at=now,
        )
        session.add(job)
        session.flush()
        for position, (filename, content) in enumerate(uploads):
            # Inserted one by one and dropped from the session: one row's parameters at a time,
            # not 500 rows of 100 KB batched into one statement (+50 MB, issue 18).
            row = JobUpload(job_id=job.id, position=position, filename=filename, content=content)
            session.add(row)
            session.flush()
            session.expunge(row)
        # Local workers are woken once the job is visible to them, never before.
        event.listen(session, "after_commit", lambda _session: self.notify(), once=True)
        return record_of(job)

    def _reserve_slot(self, session: Session, owner_id: str, cap: int) -> None:
        """Refuse a new job when the owner already has ``cap`` unfinished ones.

        On PostgreSQL a transaction-scoped advisory lock on the owner makes two concurrent
        enqueues count one after the other (SQLite's BEGIN IMMEDIATE already serializes them).
        """
        bind = session.get_bind()
        if bind.dialect.name == "postgresql":
            session.execute(
                text("SELECT pg_advisory_xact_lock(hashtext(:key))"), {"key": f"jobs:{owner_id}"}
            )
        unfinished = int(
            session.scalar(
                select(func.count())
                .select_from(Job)
                .where(Job.owner_id == owner_id, Job.status.in_(RUNNABLE))
            )
            or 0
        )
        if unfinished >= cap:
            raise OwnerCapReached(unfinished, cap)

    # -- claiming and leases ------------------------------------------------------------------

    def claim(self, worker_id: str, kinds: Collection[str] | None = None) -> ClaimedJob | None:
        """Lease a runnable job whose lease is free or expired, fairly between tenants, or None;
        only of ``kinds`` when given (a worker takes only jobs it has a handler for).

        Order: the tenant with the fewest running jobs, then the tenant served longest ago (a
        job that yielded goes behind the others), then the oldest job.
        """
        of_kinds = Job.kind.in_(list(kinds)) if kinds is not None else true()
        while True:
            now = utcnow()
            with self.db.session() as session:
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
                    select(Job.id, Job.attempts, Job.created_at, Job.updated_at)
                    .where(Job.status.in_(RUNNABLE), _free(now), of_kinds)
                    .order_by(running, last_served.asc().nulls_first(), Job.created_at, Job.id)
                    .limit(1)
                    .with_for_update(skip_locked=True, of=Job)
                ).first()
                if candidate is None:
                    return None
                if candidate.attempts >= self.policy.max_attempts:
                    self._give_up(session, candidate.id, candidate.attempts, now)
                    continue
                # ``now`` was read before the query, which may have waited (a busy machine, a
                # locked row) while this job was enqueued: the claim's own times are read now,
                # never before the job was made (another server's clock may run behind), so it
                # never shows as started before it was created nor gets a lease already spent.
                started = max(utcnow(), candidate.created_at)
                taken = _rows(
                    session,
                    update(Job)
                    .where(Job.id == candidate.id, Job.status.in_(RUNNABLE), _free(now))
                    .values(
                        status=JobStatus.RUNNING,
                        locked_by=worker_id,
                        locked_until=started + self.policy.lease,
                        heartbeat_at=started,
                        claimed_at=started,
                        attempts=Job.attempts + 1,
                        updated_at=started,
                    )
                    .execution_options(synchronize_session=False),
                )
                if taken.rowcount != 1:
                    return None
                job = session.get(Job, candidate.id, populate_existing=True)
                assert job is not None
                if self._on_claim is not None:
                    # Waiting since it was queued, or since a worker handed it back.
                    self._on_claim(job.kind, (started - candidate.updated_at).total_seconds())
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
        and ``tenant`` holds more than ``tenant_share`` of the running jobs."""
        if self.policy.tenant_share >= 1:
            return False  # a tenant can never hold more than all of them: no query needed
        now = utcnow()
        with self.db.session() as session:
            waiting = session.scalar(
                select(Job.id)
                .where(Job.status.in_(RUNNABLE), _free(now), Job.tenant != tenant)
                .limit(1)
            )
            if waiting is None:
                return False
            total, mine = session.execute(
                select(func.count(), func.count().filter(Job.tenant == tenant)).where(
                    _leased(Job, now)
                )
            ).one()
            return bool(mine > self.policy.tenant_share * total)

    def reap(self) -> int:
        """Free the leases that expired (their workers died): the jobs show as waiting again
        and the next claim takes them; those out of attempts fail now. How many were freed.

        Claims take expired jobs anyway; reaping makes a dead worker's job visible as such
        (``locked_by`` empty) without waiting for an idle worker.
        """
        now = utcnow()
        with self.db.session() as session:
            expired = session.execute(
                select(Job.id, Job.attempts)
                .where(
                    Job.status == JobStatus.RUNNING,
                    Job.locked_by.is_not(None),
                    Job.locked_until < now,
                )
                .with_for_update(skip_locked=True)
            ).all()
            for job_id, attempts in expired:
                if attempts >= self.policy.max_attempts:
                    self._give_up(session, job_id, attempts, now)
                else:
                    session.execute(
                        update(Job)
                        .where(Job.id == job_id, Job.locked_until < now)
                        .values(locked_by=None, locked_until=None)
                    )
            return len(expired)

    def _give_up(self, session: Session, job_id: str, attempts: int, now: datetime) -> None:
        """Fail a job that has killed or outlived its worker too many times."""
        log.warning("job %s failed for good after %d attempts", job_id, attempts)
        job = session.get(Job, job_id)
        assert job is not None
        message = f"the job was interrupted {attempts} times (workers stopped or died)"
        self._end(session, job, JobStatus.FAILED, now, error=error_entry(message))

    def _end(
        self,
        session: Session,
        job: Job,
        status: JobStatus,
        now: datetime,
        *,
        error: dict[str, Any] | None = None,
    ) -> None:
        """Settle ``job`` as ``status``: no lease, no credential, no checkpoint or files left."""
        job.status = status
        if error is not None:
            job.errors = [*(job.errors or []), error]
        secret = self.policy.secret_payload_keys
        job.payload = {key: value for key, value in job.payload.items() if key not in secret}
        job.checkpoint = None
        job.locked_by = job.locked_until = None
        job.updated_at = now
        session.execute(delete(JobUpload).where(JobUpload.job_id == job.id))
        session.execute(delete(JobResult).where(JobResult.job_id == job.id))

    @staticmethod
    def _owned(job_id: str, worker_id: str) -> Any:
        """The WHERE clause of every write a leaseholder makes."""
        return (Job.id == job_id) & (Job.locked_by == worker_id) & (Job.status == JobStatus.RUNNING)

    def heartbeat(self, job_id: str, worker_id: str) -> bool:
        """Extend the lease; False when it is no longer ours (expired and taken, or cancelled)."""
        now = utcnow()
        with self.db.session() as session:
            result = _rows(
                session,
                update(Job)
                .where(self._owned(job_id, worker_id))
                .values(locked_until=now + self.policy.lease, heartbeat_at=now),
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
        """Record progress (never lower than before), the checkpoint and one step's
        ``(step, data)`` result in one transaction, if the lease is still ours: the bytes
        written are those of this step only."""
        now = utcnow()
        with self.db.session() as session:
            values: dict[str, Any] = {
                "progress": case((Job.progress > progress, Job.progress), else_=progress),
                "updated_at": now,
            }
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

    # -- the end of a job ---------------------------------------------------------------------

    def succeed(self, job_id: str, worker_id: str, write: Callable[[Session], str | None]) -> bool:
        """Write the job's result (``write`` returns its id) and mark it SUCCEEDED in one
        transaction, if still ours.

        The job row is locked first: on PostgreSQL a worker that lost the lease and finishes
        late blocks, then finds the row no longer its own and writes nothing.
        """
        now = utcnow()
        with self.db.session() as session:
            job = session.scalar(
                select(Job).where(self._owned(job_id, worker_id)).with_for_update()
            )
            if job is None:
                return False
            job.result_id = write(session)
            job.progress = 100
            self._end(session, job, JobStatus.SUCCEEDED, now)
            return True

    def fail(
        self, job_id: str, worker_id: str, failure: JobFailure, run_seconds: float | None = None
    ) -> bool:
        """Mark the job FAILED with an error built from ``failure``, if still ours, with the
        worker time it used in all (``run_seconds``, when known)."""
        now = utcnow()
        with self.db.session() as session:
            job = session.scalar(
                select(Job).where(self._owned(job_id, worker_id)).with_for_update()
            )
            if job is None:
                return False
            if run_seconds is not None:
                job.run_seconds = run_seconds
            error = error_entry(failure.message, failure.details)
            self._end(session, job, JobStatus.FAILED, now, error=error)
            return True

    def cancel(self, owner_id: str, job_id: str) -> JobRecord | None:
        """Cancel the owner's queued or running job; its worker stops at its next heartbeat or
        step (every write it makes is refused from now on). The job as it now stands, or None
        when the owner has no such job; an ended job is returned unchanged."""
        now = utcnow()
        with self.db.session() as session:
            job = session.scalar(
                select(Job).where(Job.id == job_id, Job.owner_id == owner_id).with_for_update()
            )
            if job is None:
                return None
            if job.status in RUNNABLE:
                self._end(session, job, JobStatus.CANCELLED, now)
            return record_of(job)

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

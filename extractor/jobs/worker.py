"""Workers: threads that claim jobs, keep their leases alive and run them through handlers.

A job kind plugs in as a :class:`JobHandler` (a ``kind`` and a ``run(run)`` method); the handler
checkpoints through its :class:`JobRun`, may hand its worker to another tenant at a
``share_point``, and ends with ``run.succeed`` or by raising :class:`JobFailure`. A job also
has a deadline in worker time. A stopping worker lets the call in flight end (bounded by
``longest_call_seconds``), keeps its result and then releases the job, so no request is ever
sent twice by a deploy.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
import uuid
from collections.abc import Callable, Mapping
from functools import partial
from typing import Any, Protocol

from sqlalchemy.orm import Session

from extractor.heap import limit_heap_retention, trim_heap
from extractor.jobs.errors import JobFailure, JobInterrupted, JobYielded, StorageError
from extractor.jobs.queue import JobQueue
from extractor.jobs.records import ClaimedJob

log = logging.getLogger(__name__)


class JobHandler(Protocol):
    """Runs one kind of job; must end by calling ``run.succeed`` or raising JobFailure."""

    kind: str

    def run(self, run: JobRun) -> None:
        """Do the work, checkpointing through ``run`` and succeeding atomically at the end."""
        ...


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
        self.succeeded = False

    def __enter__(self) -> JobRun:
        self._heart.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._done.set()
        self._heart.join()

    def _beat(self) -> None:
        interval = self.queue.policy.heartbeat_seconds
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
        limit = self.queue.policy.deadline_seconds
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
        """Save progress (capped at 99 until it succeeds, never lower than before), a
        checkpoint and the ``(step, data)`` result of the step just finished, in one
        transaction; then check the lease."""
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

    def succeed(self, write: Callable[[Session], str | None]) -> None:
        """Write the result and mark the job DELIVERED atomically (all work is done by now, so
        the deadline no longer applies)."""
        self.check(deadline=False)
        if not self.queue.succeed(self.job.id, self.worker_id, write):
            self._lost.set()
            raise JobInterrupted(f"lease of {self.job.id} lost before it succeeded")
        self.succeeded = True


class WorkerPool:
    """Threads that claim and run jobs until stopped; used embedded and by `worker`."""

    def __init__(
        self,
        queue: JobQueue,
        handlers: Mapping[str, JobHandler],
        threads: int,
        name: str | None = None,
        thread_prefix: str = "jobs-worker",
    ) -> None:
        self.queue = queue
        self.thread_prefix = thread_prefix
        self.handlers = dict(handlers)
        self.size = threads
        self.name = name or f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
        self._stopping = threading.Event()
        self._wake = threading.Event()
        self._threads: list[threading.Thread] = []
        queue.on_enqueue(self._wake.set)

    def start(self) -> None:
        """Start the worker threads (idempotent), first freeing the leases dead workers left."""
        if self._threads:
            return
        # A job's memory (a reply of up to OUTBOUND_MAX_REPLY_BYTES, its text, what parsing it
        # made) goes back to the system when the job ends: fixed mmap and trim thresholds and
        # one arena, so that what one job thread freed is not held for it alone (issue 18).
        limit_heap_retention()
        self._stopping.clear()
        try:
            if freed := self.queue.reap():
                log.info("freed %d job(s) whose workers died", freed)
        except StorageError:
            log.exception("cannot reap expired leases; claims will take those jobs anyway")
        for index in range(self.size):
            thread = threading.Thread(
                target=self._loop,
                args=(f"{self.name}:{index}",),
                name=f"{self.thread_prefix}-{index}",
            )
            thread.daemon = True
            thread.start()
            self._threads.append(thread)
        log.info("started %d %s thread(s) as %s", self.size, self.thread_prefix, self.name)

    def stop(self, timeout: float = 30.0) -> None:
        """Ask every thread to stop after its current step and wait for them; jobs are released.

        A thread inside an outbound call is waited for even past ``timeout``: cutting the call
        would lose a reply the API already computed and make the next worker send the request
        again. Calls end within their own total timeouts, so the wait stays bounded; only a
        thread stuck past those (a bug) is left behind, its lease then expiring.
        """
        self._stopping.set()
        self._wake.set()
        policy = self.queue.policy
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
            limit = time.monotonic() + policy.longest_call_seconds + policy.lease_seconds
            for thread in busy:
                thread.join(max(limit - time.monotonic(), 0))
            if any(thread.is_alive() for thread in busy):
                log.error("a job worker thread outlived every call timeout; leaving it")
        self._threads = []

    def _loop(self, worker_id: str) -> None:
        poll = self.queue.policy.poll_seconds
        while not self._stopping.is_set():
            try:
                job = self.queue.claim(worker_id, self.handlers.keys())
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
        """Run one claimed job to SUCCEEDED or FAILED, or hand it back when interrupted."""
        handler = self.handlers.get(job.kind)
        log.info("worker %s runs job %s (attempt %d)", worker_id, job.id, job.attempts)
        with JobRun(self.queue, job, worker_id, self._stopping) as run:
            try:
                if handler is None:
                    raise JobFailure(f"no worker knows jobs of kind {job.kind!r}")
                handler.run(run)
                if not run.succeeded:
                    raise JobFailure("the job ended without a result")
                log.info("job %s succeeded", job.id)
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

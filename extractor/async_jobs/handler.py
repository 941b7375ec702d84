"""Running one extraction job: its upload out of the database into a private folder, the same
checks and engine as ``POST /extract``, progress saved as pages or audio windows are done, and
the Document stored with the job's success in one transaction.

A job runs on a worker thread of the job queue's ``WorkerPool``, at a lower CPU priority
(EXTRACTOR_JOB_NICENESS) than the server's request threads and outside the engine gate that
bounds synchronous extractions, so jobs never take a synchronous request's engine slot. Each
progress report is also where a job stops: cancelled, its lease lost, or the server stopping
(then another server resumes it from the start after the lease, so a SIGKILLed job is never lost,
and the lease-checked success means it is never finished twice).
"""

from __future__ import annotations

import logging
import os
import threading
import time

from sqlalchemy import update
from sqlalchemy.orm import Session

from extractor.async_jobs.errors import JobsUnavailable
from extractor.async_jobs.extraction_jobs import KIND, ExtractionJobs, mark_webhook_due
from extractor.async_jobs.options import job_request
from extractor.async_jobs.store import ExtractionJob
from extractor.async_jobs.work import ExtractionWork
from extractor.config import Settings
from extractor.errors import ExtractorError
from extractor.jobs import JobFailure, JobInterrupted, JobRun, JobStatus, StorageError
from extractor.server_paths import path_roots, without_paths

log = logging.getLogger(__name__)

PROGRESS_EVERY_SECONDS = 1.0  # saved at least this often while pages or windows are done
WATCH_SECONDS = 1.0  # how often a running job's status is read (a cancel stops it within this)
MOST_NICE = 19  # the lowest CPU priority Linux has

_lowered = threading.local()


def lower_priority(niceness: int) -> None:
    """Make the calling thread (and every thread and process it starts from now on: OCR page
    threads, the PDF renderer, ffmpeg) ``niceness`` nicer than the process, once per thread.

    Linux keeps a nice value per thread; ``setpriority`` on the thread's own id sets it."""
    if niceness <= 0 or getattr(_lowered, "done", False) or not hasattr(os, "setpriority"):
        return
    base = os.getpriority(os.PRIO_PROCESS, 0)
    try:
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), min(base + niceness, MOST_NICE))
    except OSError:
        log.warning("cannot lower the CPU priority of job threads", exc_info=True)
    _lowered.done = True


class Progress:
    """Saves a job's progress as its pages or audio windows are done, and stops the job there
    when it was cancelled, lost its lease or its server is stopping (``run.progress`` raises).

    Called from the extraction's threads (OCR pages run several at once): serialized, never
    lower than before, written when the percentage grows or once a second."""

    def __init__(self, run: JobRun) -> None:
        self.run = run
        self._lock = threading.Lock()
        self._percent = -1
        self._saved_at = 0.0

    def __call__(self, done: float, total: float) -> None:
        percent = int(100 * done / total) if total > 0 else 0
        with self._lock:
            now = time.monotonic()
            if percent > self._percent or now - self._saved_at >= PROGRESS_EVERY_SECONDS:
                self._percent = max(percent, self._percent)
                self._saved_at = now
                self.run.progress(self._percent)
            else:
                self.run.check()


class ExtractionHandler:
    """The job queue's handler of extraction jobs."""

    kind = KIND

    def __init__(self, jobs: ExtractionJobs, work: ExtractionWork, settings: Settings) -> None:
        self.jobs = jobs
        self.work = work
        self.settings = settings

    def run(self, run: JobRun) -> None:
        lower_priority(self.settings.job_niceness)
        job_id = run.job.id
        try:
            view = self.jobs.get(job_id)
        except JobsUnavailable as exc:
            # The database away for a moment: the worker leaves the job to its lease and it is
            # retried, as for every other database error (as a 503 it was failed for good).
            raise StorageError(f"the details of job {job_id} could not be read") from exc
        if view is None:
            raise JobFailure("the job's details are gone (deleted meanwhile)", code="job_not_found")
        ended = False
        cancelled = threading.Event()
        watching = threading.Event()
        watcher = threading.Thread(
            target=self._watch, args=(run, cancelled, watching), name=f"watch-{job_id}",
            daemon=True,
        )  # fmt: skip
        watcher.start()
        try:
            options = job_request(view.options)
            left = self.settings.job_timeout - run.run_seconds()
            stored = self.work.extract(
                run.queue, job_id, view.filename, options, Progress(run), left, run.check,
                cancelled, view.format,
            )  # fmt: skip

            def write(session: Session) -> str:
                session.execute(
                    update(ExtractionJob)
                    .where(ExtractionJob.job_id == job_id)
                    .values(document=stored)
                )
                mark_webhook_due(session, job_id)
                return job_id

            run.succeed(write)
            ended = True
        except JobInterrupted:
            raise
        except ExtractorError as error:
            if cancelled.is_set():  # stopped because it was cancelled, not failed
                raise JobInterrupted(f"job {job_id} cancelled") from error
            ended = True
            # Stored as the synchronous reply would show it: without the server's paths.
            message = without_paths(error.message, path_roots(self.settings))
            raise JobFailure(message, code=error.code, status=error.status) from error
        except JobFailure:
            ended = True
            raise
        finally:
            watching.set()
            watcher.join()
            if ended:
                self._webhook_due(job_id)

    def _webhook_due(self, job_id: str) -> None:
        """Mark the ended job's webhook due now. With the database away, the deliveries' sweep
        marks it later: the error must not take the place of the job's own outcome (a failed
        job's error became 'internal error', a succeeded one was logged as crashed)."""
        try:
            self.jobs.webhook_due(job_id)
        except JobsUnavailable:
            log.warning("cannot mark the webhook of job %s due now; the next sweep will", job_id)

    def _watch(self, run: JobRun, cancelled: threading.Event, done: threading.Event) -> None:
        """Set ``cancelled`` once the job is no longer this worker's (cancelled, or its lease
        lost): the speech engine then stops at its next segment instead of finishing a long
        stretch of speech nobody will read. A read of the job per ``WATCH_SECONDS``."""
        while not done.wait(WATCH_SECONDS):
            try:
                (record,) = run.queue.get(run.job.owner_id, [run.job.id])
            except StorageError:
                continue  # the database away: the heartbeat decides about the lease
            if record is None or record.status != JobStatus.RUNNING or run.lease_lost:
                cancelled.set()
                return

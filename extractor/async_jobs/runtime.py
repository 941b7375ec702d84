"""What runs asynchronous jobs inside one ``extractor serve`` worker process: EXTRACTOR_JOB_WORKERS
job threads (the queue's ``WorkerPool``) and the thread that sends webhooks and deletes expired
jobs. gunicorn starts it once the worker's engines are loaded and stops it when the worker
exits, so a stopping server hands its running jobs back (another server resumes them at once).
"""

from __future__ import annotations

import logging
import threading
from typing import TYPE_CHECKING

from extractor.async_jobs.errors import JobsUnavailable
from extractor.async_jobs.light import JobSystem
from extractor.config import Settings

if TYPE_CHECKING:  # the job system, imported on first use (light.py)
    from extractor.async_jobs.deliveries import Deliveries
    from extractor.jobs import WorkerPool

log = logging.getLogger(__name__)

RETRY_SECONDS = 5.0  # how often a process without its job database tries again
WATCH_SECONDS = 1.0  # how often a worker without the job system looks for a job (light.py)


class JobRuntime:
    """The job threads and the delivery thread of one process."""

    def __init__(self, settings: Settings, system: JobSystem) -> None:
        self.settings = settings
        self.system = system
        self.pool: WorkerPool | None = None
        self.deliveries: Deliveries | None = None
        self._stopping = threading.Event()
        self._lock = threading.Lock()  # starting and stopping, one at a time

    def start(self) -> None:
        """On a SQLite job database with no job in it, wait for one without the job
        system (``light.py``): a thread looks every ``WATCH_SECONDS``, and the first job
        route used in this worker starts it too. Otherwise start it now."""
        if self.system.idle():
            self.system.on_first_use = self._start
            threading.Thread(target=self._watch, name="job-watch", daemon=True).start()
            return
        self._start()

    def _watch(self) -> None:
        while not self._stopping.wait(WATCH_SECONDS):
            if not self.system.idle():
                self.system.jobs()  # imports and starts the job system (on_first_use)
                return

    def _start(self) -> None:
        """Start the threads once the job database opens: now, or (a database container still
        starting, a network not up yet) from a thread that tries again every
        ``RETRY_SECONDS``. Meanwhile the server answers synchronous requests and the job
        routes answer 503."""
        if self._start_now():
            return
        log.error("no job database yet; asynchronous jobs start once it answers")
        threading.Thread(target=self._start_later, name="job-runtime", daemon=True).start()

    def _start_later(self) -> None:
        while not self._stopping.wait(RETRY_SECONDS):
            if self._start_now():
                log.info("job database reached: asynchronous jobs started")
                return

    def _start_now(self) -> bool:
        """Open the database and start the threads; False when it cannot be opened yet."""
        from extractor.async_jobs.deliveries import Deliveries
        from extractor.async_jobs.extraction_jobs import KIND
        from extractor.async_jobs.handler import ExtractionHandler
        from extractor.async_jobs.webhook import WebhookSender, policy_of
        from extractor.jobs import WorkerPool

        jobs, work = self.system.jobs(), self.system.work()
        try:
            queue = jobs.queue
        except JobsUnavailable:
            return False
        settings = self.settings
        with self._lock:
            if self._stopping.is_set():
                return True  # stopped meanwhile: nothing to start
            if settings.job_workers > 0:
                handler = ExtractionHandler(jobs, work, settings)
                self.pool = WorkerPool(
                    queue, {KIND: handler}, settings.job_workers, thread_prefix="extraction-job"
                )
                self.pool.start()
            sender = None
            if settings.webhook_secret:
                sender = WebhookSender(
                    settings.webhook_secret,
                    policy_of(settings.outbound_allow),
                    settings.webhook_timeout,
                    # A connection per sender thread: an attempt never waits for the pool.
                    connections=settings.webhook_senders,
                    max_reply_bytes=settings.webhook_max_reply_bytes,
                )
            self.deliveries = Deliveries(jobs, sender, settings.webhook_attempts)
            self.deliveries.start()
        return True

    def stop(self) -> None:
        """Hand running jobs back (each stops at its next page or window) and stop sending."""
        with self._lock:
            self._stopping.set()
            pool, deliveries = self.pool, self.deliveries
            self.pool = self.deliveries = None
        if pool is not None:
            pool.stop(timeout=self.settings.job_lease_seconds)
        if deliveries is not None:
            deliveries.stop()

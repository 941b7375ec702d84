"""What runs asynchronous jobs inside one ``extractor serve`` worker process: EXTRACTOR_JOB_WORKERS
job threads (the queue's ``WorkerPool``) and the thread that sends webhooks and deletes expired
jobs. gunicorn starts it once the worker's engines are loaded and stops it when the worker
exits, so a stopping server hands its running jobs back (another server resumes them at once).
"""

from __future__ import annotations

import logging

from extractor.async_jobs.deliveries import Deliveries
from extractor.async_jobs.errors import JobsUnavailable
from extractor.async_jobs.extraction_jobs import KIND, ExtractionJobs
from extractor.async_jobs.handler import ExtractionHandler
from extractor.async_jobs.webhook import WebhookSender, policy_of
from extractor.async_jobs.work import ExtractionWork
from extractor.config import Settings
from extractor.jobs import WorkerPool

log = logging.getLogger(__name__)


class JobRuntime:
    """The job threads and the delivery thread of one process."""

    def __init__(self, settings: Settings, jobs: ExtractionJobs, work: ExtractionWork) -> None:
        self.settings = settings
        self.jobs = jobs
        self.work = work
        self.pool: WorkerPool | None = None
        self.deliveries: Deliveries | None = None

    def start(self) -> bool:
        """Start the threads; False (logged, the server still answers synchronous requests and
        the job routes 503) when the job database cannot be opened."""
        settings = self.settings
        try:
            queue = self.jobs.queue
        except JobsUnavailable:
            log.error("asynchronous jobs are off in this process: no job database")
            return False
        if settings.job_workers > 0:
            handler = ExtractionHandler(self.jobs, self.work, settings)
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
            )
        self.deliveries = Deliveries(self.jobs, sender, settings.webhook_attempts)
        self.deliveries.start()
        return True

    def stop(self) -> None:
        """Hand running jobs back (each stops at its next page or window) and stop sending."""
        if self.pool is not None:
            self.pool.stop(timeout=self.settings.job_lease_seconds)
            self.pool = None
        if self.deliveries is not None:
            self.deliveries.stop()
            self.deliveries = None

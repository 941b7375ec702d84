"""What one labeling app owns (database, job queue, service, worker threads) and how it is
built from the settings; the app keeps it in ``app.extensions["labeling"]``."""

from __future__ import annotations

from dataclasses import dataclass, field

from flask import current_app

from extractor.config import LabelingSettings
from extractor.jobs import JobHandler, JobQueue, QueuePolicy, WorkerPool
from extractor.labeling.auth import token_lifetime
from extractor.labeling.autolabel import AutoLabelJob
from extractor.labeling.clients import ExtractorClient
from extractor.labeling.credentials import load_secret_box, seal_stored_secrets
from extractor.labeling.db import Database
from extractor.labeling.introspection import IntrospectionAnswers
from extractor.labeling.metrics import observe_claim
from extractor.labeling.project_jobs import CreateProjectJob
from extractor.labeling.service import SECRET_PAYLOAD_KEYS, LabelingService

EXTENSION = "labeling"


@dataclass
class LabelingState:
    """What one app owns: its database, queue, service and (embedded) worker threads."""

    settings: LabelingSettings
    db: Database
    queue: JobQueue
    service: LabelingService
    workers: WorkerPool
    client: ExtractorClient
    # Replies to introspection-only requests, kept per query text (the schema never changes).
    introspection: IntrospectionAnswers = field(default_factory=IntrospectionAnswers)

    def start_workers(self) -> None:
        """Start the embedded worker threads, if the settings ask for any."""
        if self.workers.size > 0:
            self.workers.start()

    def close(self) -> None:
        """Stop the worker threads (their jobs are handed back) and close the database."""
        self.workers.stop()
        self.client.close()
        self.db.dispose()


def job_handlers(queue: JobQueue, db: Database, client: ExtractorClient) -> dict[str, JobHandler]:
    """The registry of job kinds this deployment runs."""
    handlers: list[JobHandler] = [CreateProjectJob(queue, db, client), AutoLabelJob(db, client)]
    return {handler.kind: handler for handler in handlers}


def queue_policy(settings: LabelingSettings) -> QueuePolicy:
    """The job queue's timings and limits, from the labeling settings."""
    return QueuePolicy(
        lease_seconds=settings.job_lease_seconds,
        heartbeat_seconds=settings.job_heartbeat_seconds,
        poll_seconds=settings.job_poll_seconds,
        max_attempts=settings.job_max_attempts,
        tenant_share=settings.job_tenant_share,
        deadline_seconds=settings.job_deadline_seconds,
        longest_call_seconds=max(
            settings.outbound_total_timeout, settings.prediction_total_timeout
        ),
        secret_payload_keys=SECRET_PAYLOAD_KEYS,
    )


def build_state(settings: LabelingSettings, worker_threads: int | None = None) -> LabelingState:
    """Database, queue, service and a worker pool (not started) for ``settings``."""
    token_lifetime(settings.token_lifetime_days)  # a bad lifetime fails here, not per request
    db = Database(settings.resolved_database_url)
    try:
        secrets = load_secret_box(settings)
        seal_stored_secrets(db, secrets)
    except BaseException:
        db.dispose()
        raise
    queue = JobQueue(db, queue_policy(settings), on_claim=observe_claim)
    threads = settings.embedded_workers if worker_threads is None else worker_threads
    client = ExtractorClient(settings, secrets=secrets)
    workers = WorkerPool(
        queue, job_handlers(queue, db, client), threads, thread_prefix="labeling-worker"
    )
    service = LabelingService(db, queue, settings, secrets=secrets)
    return LabelingState(settings, db, queue, service, workers, client)


def current_state() -> LabelingState:
    """The state of the app handling the current request."""
    state: LabelingState = current_app.extensions[EXTENSION]
    return state

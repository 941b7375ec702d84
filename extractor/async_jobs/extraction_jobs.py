"""Asynchronous extraction jobs on the project's job queue: submit, read, list, cancel, delete,
fetch the result, and keep the database to EXTRACTOR_JOB_TTL_SECONDS.

Every job belongs to the owner of the credential that submitted it (``owners.py``: a named
API key's name, or the shared secret's one owner), and only that owner reads, lists, cancels
or fetches it: another's job id is a 404, as an unknown one, and ids are unguessable anyway
(122 random bits). The client's address is the job's *tenant*: claims are fair between
clients and the per-client cap of queued jobs counts by it.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from sqlalchemy import delete, func, select, update
from sqlalchemy.orm import Session

from extractor.async_jobs.errors import JobNotFinished, JobNotFound, JobsUnavailable, TooManyJobs
from extractor.async_jobs.light import STATUS_NAMES
from extractor.async_jobs.store import (
    ExtractionJob,
    WebhookState,
    open_database,
    upload_chunks,
)
from extractor.config import Settings
from extractor.jobs import (
    ENDED,
    JobQueue,
    JobRecord,
    JobStatus,
    QueuePolicy,
    StorageError,
    queued_of_tenant,
    utcnow,
)
from extractor.jobs.db import Database

log = logging.getLogger(__name__)

KIND = "Extraction"  # the queue's job kind: ids read ExtractionQueue:<uuid4>
STATUS_OF_NAME = {name: JobStatus(status) for status, name in STATUS_NAMES.items()}
RETRY_AFTER_SECONDS = 30  # what a 429 tells a client over its cap to wait


def queue_policy(settings: Settings) -> QueuePolicy:
    """The queue's timings from our settings: leases of EXTRACTOR_JOB_LEASE_SECONDS renewed
    three times per lease, the job deadline of EXTRACTOR_JOB_TIMEOUT."""
    lease = settings.job_lease_seconds
    return QueuePolicy(
        lease_seconds=lease,
        heartbeat_seconds=lease / 3,
        poll_seconds=min(1.0, lease / 3),
        deadline_seconds=settings.job_timeout,
        # Clients are tenants: one client's long backlog never holds back another's job.
        tenant_share=0.5,
        longest_call_seconds=lease,
    )


def _iso(moment: datetime | None) -> str | None:
    """A stored naive-UTC time as RFC 3339 with its Z."""
    return None if moment is None else moment.isoformat(timespec="milliseconds") + "Z"


@dataclass(frozen=True)
class JobView:
    """A job as the API shows it: its queue record and what the extraction row adds."""

    record: JobRecord
    filename: str
    media_kind: str
    size: int
    options: dict[str, Any]
    format: str | None
    callback_url: str | None
    webhook_state: str | None
    webhook_attempts: int
    webhook_last: str | None
    webhook_delivered_at: datetime | None

    @property
    def status(self) -> str:
        return STATUS_NAMES.get(JobStatus(self.record.status), self.record.status.lower())

    @property
    def ended(self) -> bool:
        return self.record.status in ENDED

    def to_json(self) -> dict[str, Any]:
        """The job JSON of every route and of the webhook's body."""
        record = self.record
        ended = self.ended
        body: dict[str, Any] = {
            "id": record.id,
            "object": "extraction.job",
            "status": self.status,
            "progress": record.progress / 100,
            "created_at": _iso(record.created_at),
            "started_at": _iso(record.claimed_at),
            "updated_at": _iso(record.updated_at),
            "finished_at": _iso(record.updated_at) if ended else None,
            "attempts": record.attempts,
            "upload": {"filename": self.filename, "kind": self.media_kind, "bytes": self.size},
            "options": self.options,
            "format": self.format,
            "error": job_error(record) if record.status == JobStatus.FAILED else None,
            "result_url": (
                f"/v1/jobs/{record.id}/result" if record.status == JobStatus.SUCCEEDED else None
            ),
            "webhook": None,
        }
        if self.callback_url is not None:
            body["webhook"] = {
                "url": self.callback_url,
                "status": "pending"
                if self.webhook_state in (None, "waiting", "due")
                else (self.webhook_state),
                "attempts": self.webhook_attempts,
                "last_outcome": self.webhook_last,
                "delivered_at": _iso(self.webhook_delivered_at),
            }
        return body


def _view(record: JobRecord, row: ExtractionJob) -> JobView:
    return JobView(
        record, row.filename, row.media_kind, row.size, dict(row.options), row.format,
        row.callback_url, row.webhook_state, row.webhook_attempts, row.webhook_last,
        row.webhook_delivered_at,
    )  # fmt: skip


def job_error(record: JobRecord) -> dict[str, str]:
    """The error of a failed job as ``{"code", "message"}``: the code and message the
    synchronous call gives for the same upload, or the queue's own (interrupted too often)."""
    if not record.errors:
        return {"code": "internal_error", "message": "the job failed"}
    last = record.errors[-1]
    details = last.get("args", {})
    # The extraction's own code; else the queue's: out of worker time, or out of attempts.
    code = details.get("code") or ("job_timeout" if "deadlineSeconds" in details else None)
    code = str(code or "job_interrupted")
    return {"code": code, "message": str(last.get("stack", ""))}


@dataclass(frozen=True)
class StoredResult:
    """A succeeded job's Document (as stored: ``documents.read_document`` reads it) and what
    negotiating its reply needs."""

    packed: bytes
    media_kind: str
    format: str | None


class ExtractionJobs:
    """The extraction jobs of one deployment; its database opens on first use."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self._db: Database | None = None
        self._queue: JobQueue | None = None
        self._opening = threading.Lock()
        self._ended_listeners: list[Callable[[], None]] = []

    # -- the database ----------------------------------------------------------------------

    @property
    def queue(self) -> JobQueue:
        """The job queue, opened (tables created) the first time it is needed."""
        with self._opening:
            if self._queue is None:
                try:
                    self._db = open_database(self.settings.job_database_url)
                except StorageError as exc:
                    raise JobsUnavailable("the job database cannot be opened") from exc
                except Exception as exc:  # a bad URL, an unwritable directory, a missing driver
                    log.exception("cannot open the job database")
                    raise JobsUnavailable("the job database cannot be opened") from exc
                self._queue = JobQueue(self._db, queue_policy(self.settings))
            return self._queue

    @property
    def db(self) -> Database:
        """The job database (opened with the queue)."""
        if self._db is None:
            self.queue  # noqa: B018 (opens it)
        assert self._db is not None
        return self._db

    def on_ended(self, listener: Callable[[], None]) -> None:
        """Call ``listener`` when a job of this process ends with a webhook due."""
        self._ended_listeners.append(listener)

    def close(self) -> None:
        """Close the database's connections (the end of an app or a test)."""
        if self._db is not None:
            self._db.dispose()

    # -- submit ----------------------------------------------------------------------------

    def submit(
        self,
        upload: Path,
        *,
        filename: str,
        media_kind: str,
        media_format: str,
        options: dict[str, Any],
        format: str | None,
        callback_url: str | None,
        client: str,
        owner: str,
    ) -> JobView:
        """Queue a job for the checked upload at ``upload``: the job row, the upload's chunks
        and our row in one transaction. ``TooManyJobs`` past the client's cap."""
        queue = self.queue
        cap = self.settings.max_queued_jobs_per_client
        size = upload.stat().st_size
        with self._storage(), self.db.session() as session:
            waiting = queued_of_tenant(session, client, KIND)
            if waiting >= cap:
                raise TooManyJobs(
                    f"{waiting} jobs of this client are queued already; the most allowed is"
                    f" {cap} (EXTRACTOR_MAX_QUEUED_JOBS_PER_CLIENT)",
                    headers={"Retry-After": str(RETRY_AFTER_SECONDS)},
                )
            if callback_url is not None:
                self._check_pending_webhooks(session, client)
            record = queue.enqueue(
                session, KIND, owner, {}, tenant=client, uploads=upload_chunks(upload, filename)
            )
            session.add(
                ExtractionJob(
                    job_id=record.id,
                    filename=filename,
                    media_kind=media_kind,
                    media_format=media_format,
                    size=size,
                    options=options,
                    format=format,
                    client=client,
                    callback_url=callback_url,
                    webhook_state=WebhookState.WAITING if callback_url else None,
                    webhook_attempts=0,
                    created_at=record.created_at,
                )
            )
        found = self.get(record.id, owner)
        assert found is not None
        return found

    def _check_pending_webhooks(self, session: Session, client: str) -> None:
        """``TooManyJobs`` when the client's undelivered webhooks are at their cap: a client
        whose receivers never answer keeps its deliveries retrying, not its jobs queued."""
        cap = self.settings.max_pending_webhooks_per_client
        pending = session.scalar(
            select(func.count())
            .select_from(ExtractionJob)
            .where(
                ExtractionJob.client == client,
                ExtractionJob.webhook_state.in_([WebhookState.WAITING, WebhookState.DUE]),
            )
        )
        if (pending or 0) >= cap:
            raise TooManyJobs(
                f"{pending} webhooks of this client are not delivered yet; the most allowed is"
                f" {cap} (EXTRACTOR_MAX_PENDING_WEBHOOKS_PER_CLIENT)",
                headers={"Retry-After": str(RETRY_AFTER_SECONDS)},
            )

    # -- reading ---------------------------------------------------------------------------

    def get(self, job_id: str, owner: str | None = None) -> JobView | None:
        """The job, or None when unknown, past its time to live or not ``owner``'s (None:
        whoever's, for the service's own bookkeeping)."""
        views = self.views([job_id], owner=owner)
        return views[0] if views else None

    def require(self, job_id: str, owner: str) -> JobView:
        """The owner's job, or ``JobNotFound`` (another owner's job too: ids are not
        confirmed)."""
        view = self.get(job_id, owner)
        if view is None:
            raise JobNotFound(f"no job {job_id[:100]!r} (unknown, deleted or expired)")
        return view

    def page(
        self, owner: str, *, statuses: Sequence[str] = (), limit: int = 20, after: str | None = None
    ) -> tuple[list[JobView], str | None]:
        """The owner's jobs newest first, ``limit`` at a time after the cursor ``after``; the
        next cursor."""
        wanted = [STATUS_OF_NAME[name] for name in statuses]
        with self._storage():
            page = self.queue.list_jobs(owner, statuses=wanted or None, limit=limit, after=after)
        return self.views([record.id for record in page.jobs], page.jobs), page.next

    def views(
        self,
        job_ids: Sequence[str],
        records: Sequence[JobRecord | None] | None = None,
        owner: str | None = None,
    ) -> list[JobView]:
        """The views of ``job_ids`` that exist, are within their time to live and are
        ``owner``'s (None: whoever's), in order."""
        if not job_ids:
            return []
        with self._storage():
            if records is None:
                records = self.queue.get(owner, job_ids)
            with self.db.session() as session:
                rows = {
                    row.job_id: row
                    for row in session.scalars(
                        select(ExtractionJob).where(ExtractionJob.job_id.in_(list(job_ids)))
                    )
                }
        expired_before = utcnow() - timedelta(seconds=self.settings.job_ttl_seconds)
        views = []
        for record in records:
            row = None if record is None else rows.get(record.id)
            if record is None or row is None or record.kind != KIND:
                continue
            if record.status in ENDED and record.updated_at < expired_before:
                continue
            views.append(_view(record, row))
        return views

    def result(self, job_id: str, owner: str) -> StoredResult:
        """The owner's succeeded job's stored Document; ``JobNotFinished`` (409) before that."""
        view = self.require(job_id, owner)
        if view.record.status != JobStatus.SUCCEEDED:
            raise JobNotFinished(
                f"job {job_id} is {view.status}; its result exists once it has succeeded",
            )
        with self._storage(), self.db.session() as session:
            stored = session.scalar(
                select(ExtractionJob.document).where(ExtractionJob.job_id == job_id)
            )
        if stored is None:
            raise JobNotFound(f"the result of job {job_id} was deleted")
        return StoredResult(stored, view.media_kind, view.format)

    # -- ending ----------------------------------------------------------------------------

    def cancel(self, job_id: str, owner: str) -> JobView:
        """Cancel the owner's queued or running job (its upload goes with it; a running one
        stops at its next page or audio window), or delete an ended one with its result. The
        job as it stands after (a deleted one: as it was)."""
        view = self.require(job_id, owner)
        with self._storage():
            if not view.ended:
                self.queue.cancel(owner, job_id)
                self.webhook_due(job_id)
                cancelled = self.get(job_id, owner)
                return cancelled if cancelled is not None else view
            self._forget([job_id], owner)
        return view

    def webhook_due(self, job_id: str) -> None:
        """Mark the job's webhook due (its job ended) and wake this process's sender."""
        with self._storage(), self.db.session() as session:
            mark_webhook_due(session, job_id)
        for listener in self._ended_listeners:
            listener()

    def purge(self) -> int:
        """Delete jobs that ended more than EXTRACTOR_JOB_TTL_SECONDS ago, with their results:
        how many. Run now and then by every server (any one of them doing it is enough)."""
        before = utcnow() - timedelta(seconds=self.settings.job_ttl_seconds)
        with self._storage():
            with self.db.session() as session:
                # A job cannot have ended before it was made: only older rows are candidates.
                old = list(
                    session.scalars(
                        select(ExtractionJob.job_id)
                        .where(ExtractionJob.created_at < before)
                        .limit(500)
                    )
                )
            records = self.queue.get(None, old) if old else []
            gone = [
                job_id
                for job_id, record in zip(old, records, strict=True)
                if record is None or (record.status in ENDED and record.updated_at < before)
            ]
            self.queue.purge(before, kinds=[KIND])  # never another service's jobs
            self._forget(gone, None)
        return len(gone)

    def _forget(self, job_ids: Sequence[str], owner: str | None) -> None:
        """Delete our rows (and results) of these jobs (``owner``'s; None: whoever's)."""
        if not job_ids:
            return
        with self.db.session() as session:
            session.execute(delete(ExtractionJob).where(ExtractionJob.job_id.in_(list(job_ids))))
        self.queue.forget(owner, job_ids)

    @staticmethod
    @contextmanager
    def _storage() -> Iterator[None]:
        """The queue's StorageError as a 503 for the client."""
        try:
            yield
        except StorageError as exc:
            log.error("job database error", exc_info=exc)
            raise JobsUnavailable("the job database is not answering; retry shortly") from exc


def mark_webhook_due(session: Session, job_id: str) -> None:
    """In the caller's transaction: a waiting webhook of ``job_id`` becomes due now."""
    session.execute(
        update(ExtractionJob)
        .where(ExtractionJob.job_id == job_id, ExtractionJob.webhook_state == WebhookState.WAITING)
        .values(webhook_state=WebhookState.DUE, webhook_next_at=utcnow())
    )

"""The thread of each server that sends due webhooks and keeps the job database tidy.

A job's webhook becomes due when the job ends (its worker or the cancelling request marks it so
and wakes this thread: sent within milliseconds) ; a sweep every ``SWEEP_SECONDS`` also finds
jobs that ended another way (failed for good after dead workers, a crash) with their webhook
still waiting. A due delivery is taken with a short lease, so one server sends it even when
several look at once, and a server that dies mid-send leaves it to another. Each attempt runs on
a sender thread of its own and this thread never waits for one: ``lanes`` decides which
deliveries may start (per destination, per client, a breaker per destination), so a receiver
that hangs or drips holds only its own deliveries. Every ``PURGE_SECONDS`` the thread also
deletes jobs past EXTRACTOR_JOB_TTL_SECONDS.
"""

from __future__ import annotations

import logging
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from datetime import timedelta
from typing import Any, cast

from sqlalchemy import CursorResult, or_, select, update

from extractor import metrics
from extractor.async_jobs.extraction_jobs import ExtractionJobs, mark_webhook_due
from extractor.async_jobs.lanes import Lanes, destination
from extractor.async_jobs.store import ExtractionJob, WebhookState
from extractor.async_jobs.webhook import RETRY, Outcome, WebhookSender
from extractor.jobs import StorageError, utcnow

log = logging.getLogger(__name__)

POLL_SECONDS = 0.5  # how often due deliveries are looked for without a wake-up
SWEEP_SECONDS = 5.0  # how often waiting webhooks are checked for jobs that ended elsewhere
PURGE_SECONDS = 60.0  # how often expired jobs are deleted (more often for a short time to live)
BATCH = 50  # due deliveries looked at per look (more than a server sends at once)


class Deliveries:
    """Sends the due webhooks of every server's jobs; one per server process."""

    def __init__(self, jobs: ExtractionJobs, sender: WebhookSender | None, attempts: int) -> None:
        self.jobs = jobs
        self.sender = sender
        # The webhooks' retry policy with the deployment's attempts: each is a call of its own.
        self.retry = replace(RETRY, attempts=attempts)
        self._wake = threading.Event()
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None
        settings = jobs.settings
        self.lanes = Lanes(
            settings.webhook_senders,
            settings.webhook_sends_per_host,
            settings.webhook_sends_per_client,
        )
        # As many threads as lanes allow in flight: an attempt never queues behind another.
        self._pool = ThreadPoolExecutor(self.lanes.senders, thread_name_prefix="webhook")
        jobs.on_ended(self._wake.set)

    def start(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="job-deliveries", daemon=True)
            self._thread.start()

    def stop(self, timeout: float = 10.0) -> None:
        self._stopping.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout)
            self._thread = None
        self._pool.shutdown(wait=True, cancel_futures=True)
        if self.sender is not None:
            self.sender.close()

    def _run(self) -> None:
        swept = purged = 0.0
        while not self._stopping.is_set():
            try:
                now = time.monotonic()
                if now - swept >= SWEEP_SECONDS:
                    self.sweep()
                    swept = now
                if now - purged >= min(PURGE_SECONDS, self.jobs.settings.job_ttl_seconds / 2):
                    if gone := self.jobs.purge():
                        log.info("deleted %d job(s) past their time to live", gone)
                    purged = now
                self.deliver_due()
            except Exception:  # the database away, most likely: try again at the next turn
                log.exception("job deliveries: retrying")
            self._wake.wait(POLL_SECONDS)
            self._wake.clear()

    def sweep(self) -> int:
        """Mark due the waiting webhooks whose jobs have ended: how many."""
        with self.jobs.db.session() as session:
            waiting = list(
                session.scalars(
                    select(ExtractionJob.job_id)
                    .where(ExtractionJob.webhook_state == WebhookState.WAITING)
                    .order_by(ExtractionJob.created_at)
                    .limit(200)
                )
            )
        if not waiting:
            return 0
        ended = [view.record.id for view in self.jobs.views(waiting) if view.ended]
        for job_id in ended:
            with self.jobs.db.session() as session:
                mark_webhook_due(session, job_id)
        return len(ended)

    def deliver_due(self) -> int:
        """Start the due deliveries this server can take now, each on a sender thread of its
        own (never waited for here): how many were started or, their destination's breaker
        open, counted as failed without a call."""
        if self.sender is None or self.lanes.free <= 0:
            return 0
        now = utcnow()
        busy_hosts, busy_clients = self.lanes.busy()
        query = select(
            ExtractionJob.job_id, ExtractionJob.callback_url, ExtractionJob.client
        ).where(
            ExtractionJob.webhook_state == WebhookState.DUE,
            ExtractionJob.webhook_next_at <= now,
            or_(
                ExtractionJob.webhook_locked_until.is_(None),
                ExtractionJob.webhook_locked_until < now,
            ),
        )
        # Deliveries that could not start now are left out by the database, so a backlog of
        # them never fills the batch ahead of another client's.
        if busy_clients:
            query = query.where(ExtractionJob.client.not_in(busy_clients))
        for host in busy_hosts:
            column = ExtractionJob.callback_url
            query = query.where(
                column != host,  # a URL without a path is stored without its '/'
                *(~column.startswith(host + end, autoescape=True) for end in "/?#"),
            )
        with self.jobs.db.session() as session:
            due = list(session.execute(query.order_by(ExtractionJob.webhook_next_at).limit(BATCH)))
        started = 0
        paused: dict[str, list[str]] = {}
        for job_id, url, client in due:
            if url is None:
                continue
            host = destination(url)
            if self.lanes.paused(host) > 0:
                paused.setdefault(host, []).append(job_id)
                continue
            if not self.lanes.acquire(host, client):
                continue
            if not self._take(job_id):
                self.lanes.release(host, client, None)
                continue
            self._pool.submit(self._send, job_id, host, client)
            started += 1
        for host, job_ids in paused.items():
            started += self._skip_paused(host, job_ids)
        if len(due) == BATCH and started:
            self._wake.set()  # more may be due behind this batch: look again at once
        return started

    def _skip_paused(self, host: str, job_ids: list[str]) -> int:
        """Count a failed attempt, without a call, for deliveries whose destination's breaker
        is open, due again when it may be tried (or failed, out of attempts): one statement
        for them all, however many a dead receiver has. How many were counted."""
        pause = self.lanes.paused(host)
        detail = f"not sent: {host} failed {self.lanes.failures(host)} times in a row"
        detail += f"; paused {pause:.0f} s"
        now = utcnow()
        free = update(ExtractionJob).where(
            ExtractionJob.job_id.in_(job_ids),
            ExtractionJob.webhook_state == WebhookState.DUE,
            or_(
                ExtractionJob.webhook_locked_until.is_(None),
                ExtractionJob.webhook_locked_until < now,
            ),
        )
        spent = {"webhook_attempts": ExtractionJob.webhook_attempts + 1, "webhook_last": detail}
        last = ExtractionJob.webhook_attempts + 1 >= self.retry.attempts
        with self.jobs.db.session() as session:
            failed = cast(
                CursorResult[Any],
                session.execute(
                    free.where(last).values(webhook_state=WebhookState.FAILED, **spent)
                ),
            ).rowcount
            retried = cast(
                CursorResult[Any],
                session.execute(
                    free.where(~last).values(
                        webhook_next_at=now + timedelta(seconds=pause), **spent
                    )
                ),
            ).rowcount
        metrics.JOB_WEBHOOKS.labels("failed").inc(failed)
        metrics.JOB_WEBHOOKS.labels("retry").inc(retried)
        log.warning("webhooks of %d job(s) %s", failed + retried, detail)
        return failed + retried

    def _send(self, job_id: str, host: str, client: str) -> None:
        """One attempt on a sender thread; its lanes freed and the loop woken after."""
        failed: bool | None = None
        try:
            outcome = self._deliver(job_id)
            failed = None if outcome is None else outcome.result == "retry"
        except Exception:
            log.exception("webhook of job %s: the attempt broke; its lease will expire", job_id)
        finally:
            self.lanes.release(host, client, failed)
            self._wake.set()

    def _take(self, job_id: str) -> bool:
        """Lease a due delivery for one attempt (its timeout and a margin)."""
        assert self.sender is not None
        now = utcnow()
        with self.jobs.db.session() as session:
            taken = cast(
                CursorResult[Any],
                session.execute(
                    update(ExtractionJob)
                    .where(
                        ExtractionJob.job_id == job_id,
                        ExtractionJob.webhook_state == WebhookState.DUE,
                        or_(
                            ExtractionJob.webhook_locked_until.is_(None),
                            ExtractionJob.webhook_locked_until < now,
                        ),
                    )
                    .values(webhook_locked_until=now + timedelta(seconds=self.sender.timeout + 30))
                ),
            )
            return taken.rowcount == 1

    def _deliver(self, job_id: str) -> Outcome | None:
        """Send one attempt of a leased delivery and record it: how it went (None: no call)."""
        assert self.sender is not None
        try:
            view = self.jobs.get(job_id)
            with self.jobs.db.session() as session:
                row = session.get(ExtractionJob, job_id)
                url = row.callback_url if row is not None else None
                attempts = (row.webhook_attempts if row is not None else 0) + 1
            if view is None or url is None:
                return None
            if not view.ended:
                # Marked due by a worker a moment before the queue recorded the end (a failure
                # is recorded after its handler returns): look again shortly, no attempt spent.
                self._later(job_id)
                return None
            outcome = self.sender.send(url, view.to_json())
            self._record(job_id, attempts, outcome)
            return outcome
        except StorageError:
            log.exception("cannot record the webhook of job %s; its lease will expire", job_id)
            return None

    def _later(self, job_id: str) -> None:
        """Hand a delivery back, due again after the next poll."""
        with self.jobs.db.session() as session:
            session.execute(
                update(ExtractionJob)
                .where(ExtractionJob.job_id == job_id)
                .values(
                    webhook_locked_until=None,
                    webhook_next_at=utcnow() + timedelta(seconds=POLL_SECONDS),
                )
            )

    def _record(self, job_id: str, attempts: int, outcome: Outcome) -> None:
        """Store how the attempt went; schedule the next one or end the delivery."""
        result = outcome.result
        if result == "retry" and attempts >= self.retry.attempts:
            result = "failed"
        metrics.JOB_WEBHOOKS.labels(result).inc()
        now = utcnow()
        values: dict[str, Any] = {
            "webhook_attempts": attempts,
            "webhook_last": outcome.detail[:300],
            "webhook_locked_until": None,
        }
        if result == "delivered":
            values.update(webhook_state=WebhookState.DELIVERED, webhook_delivered_at=now)
        elif result == "failed":
            values.update(webhook_state=WebhookState.FAILED)
        else:
            wait = self.retry.wait(attempts - 1)
            values.update(webhook_next_at=now + timedelta(seconds=wait))
        level = logging.INFO if result == "delivered" else logging.WARNING
        log.log(level, "webhook of job %s, attempt %d: %s", job_id, attempts, outcome.detail)
        with self.jobs.db.session() as session:
            session.execute(
                update(ExtractionJob).where(ExtractionJob.job_id == job_id).values(**values)
            )

"""Which webhook attempts may start (``async_jobs.lanes``), and what one attempt carries: the
limits per destination and per client, the breaker's pauses, the Standard Webhooks headers."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
from datetime import timedelta
from pathlib import Path

import pytest
from sqlalchemy import select

from extractor.async_jobs import deliveries as deliveries_module
from extractor.async_jobs.deliveries import Deliveries
from extractor.async_jobs.extraction_jobs import ExtractionJobs
from extractor.async_jobs.lanes import (
    BREAKER_FAILURES,
    BREAKER_MAX_SECONDS,
    BREAKER_SECONDS,
    Lanes,
    destination,
)
from extractor.async_jobs.store import ExtractionJob, WebhookState
from extractor.async_jobs.webhook import webhook_body, webhook_headers
from extractor.config import Settings
from extractor.jobs import utcnow


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.mark.parametrize(
    ("url", "origin"),
    [
        ("http://127.0.0.1:8000/hook", "http://127.0.0.1:8000"),
        ("https://hooks.example.com/a/b?c=d", "https://hooks.example.com"),
        ("https://hooks.example.com/", "https://hooks.example.com"),
        ("http://[::1]:9/x", "http://[::1]:9"),
    ],
)
def test_a_destination_is_the_url_before_its_path(url: str, origin: str) -> None:
    assert destination(url) == origin


def test_attempts_in_flight_are_bounded_per_destination_client_and_in_all() -> None:
    lanes = Lanes(senders=5, per_host=2, per_client=3)
    assert lanes.acquire("http://a", "c1") and lanes.acquire("http://a", "c1")
    assert not lanes.acquire("http://a", "c2")  # the destination is at its 2
    assert lanes.acquire("http://b", "c1")
    assert not lanes.acquire("http://c", "c1")  # the client is at its 3
    assert lanes.busy() == (["http://a"], ["c1"])
    assert lanes.acquire("http://c", "c2") and lanes.acquire("http://d", "c3")
    assert lanes.free == 0 and not lanes.acquire("http://e", "c4")  # every sender in use
    lanes.release("http://a", "c1", failed=False)
    assert lanes.free == 1 and lanes.acquire("http://a", "c2")


def test_the_breaker_pauses_a_failing_destination_and_one_trial_reopens_it() -> None:
    clock = Clock()
    lanes = Lanes(senders=10, per_host=10, per_client=10, clock=clock)
    host = "http://dead"
    for _ in range(BREAKER_FAILURES - 1):
        assert lanes.acquire(host, "c")
        lanes.release(host, "c", failed=True)
    assert lanes.paused(host) == 0  # not yet
    assert lanes.acquire(host, "c")
    lanes.release(host, "c", failed=True)
    assert lanes.paused(host) == BREAKER_SECONDS
    assert not lanes.acquire(host, "c")
    assert lanes.acquire("http://alive", "c")  # others are not paused
    clock.now += BREAKER_SECONDS
    assert lanes.acquire(host, "c")  # the one trial after the pause
    assert not lanes.acquire(host, "c") and host in lanes.busy()[0]
    lanes.release(host, "c", failed=True)
    assert lanes.paused(host) == 2 * BREAKER_SECONDS  # failed again: twice as long
    for _ in range(10):
        clock.now += BREAKER_MAX_SECONDS
        assert lanes.acquire(host, "c")
        lanes.release(host, "c", failed=True)
    assert lanes.paused(host) == BREAKER_MAX_SECONDS
    clock.now += BREAKER_MAX_SECONDS
    assert lanes.acquire(host, "c")
    lanes.release(host, "c", failed=False)  # it answers again: closed
    assert lanes.paused(host) == 0 and lanes.failures(host) == 0


def test_an_attempt_in_flight_when_the_breaker_opens_does_not_lengthen_the_pause() -> None:
    clock = Clock()
    lanes = Lanes(senders=10, per_host=10, per_client=10, clock=clock)
    for _ in range(BREAKER_FAILURES + 1):
        assert lanes.acquire("http://dead", "c")
    for _ in range(BREAKER_FAILURES + 1):
        lanes.release("http://dead", "c", failed=True)
    assert lanes.paused("http://dead") == BREAKER_SECONDS


def test_an_answer_between_failures_keeps_the_breaker_closed() -> None:
    lanes = Lanes(senders=10, per_host=10, per_client=10)
    for failed in [True, True, False, True, True, False]:
        assert lanes.acquire("http://flaky", "c")
        lanes.release("http://flaky", "c", failed=failed)
    assert lanes.paused("http://flaky") == 0


def test_a_trial_without_a_call_leaves_the_breaker_as_it_was() -> None:
    clock = Clock()
    lanes = Lanes(senders=10, per_host=10, per_client=10, clock=clock)
    for _ in range(BREAKER_FAILURES):
        assert lanes.acquire("http://dead", "c")
        lanes.release("http://dead", "c", failed=True)
    clock.now += BREAKER_SECONDS
    assert lanes.acquire("http://dead", "c")
    lanes.release("http://dead", "c", failed=None)  # the lease was lost: nothing was learnt
    assert lanes.acquire("http://dead", "c")


def test_the_standard_webhooks_headers_sign_id_timestamp_and_body() -> None:
    job = {"id": "ExtractionQueue:1234", "status": "succeeded"}
    body = webhook_body(job, 1_700_000_000)
    headers = webhook_headers("s3cret", job["id"], 1_700_000_000, body)
    assert json.loads(body)["timestamp"] == 1_700_000_000
    assert headers["webhook-id"] == job["id"]
    assert headers["webhook-timestamp"] == "1700000000"
    signed = b"ExtractionQueue:1234.1700000000." + body
    digest = hmac.new(b"s3cret", signed, hashlib.sha256).digest()
    assert headers["webhook-signature"] == "v1," + base64.b64encode(digest).decode()
    legacy = hmac.new(b"s3cret", body, hashlib.sha256).hexdigest()
    assert headers["X-Signature"] == f"sha256={legacy}"
    later = webhook_headers("s3cret", job["id"], 1_700_000_009, webhook_body(job, 1_700_000_009))
    assert later["webhook-id"] == headers["webhook-id"]  # a retry: the same id
    assert later["webhook-signature"] != headers["webhook-signature"]


class NoSender:
    """A sender that must not be called: the test looks at which deliveries were leased."""

    timeout = 1.0

    def send(self, url: str, job: object) -> None:
        raise AssertionError("no attempt expected")

    def close(self) -> None:
        pass


def test_a_busy_destination_s_deliveries_are_left_out_however_its_urls_are_spelt(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A destination at its limit has its deliveries left out by the database, whether its
    URLs have a path, a query or nothing after the host, so they never fill a batch: here a
    batch of 3 would hold only the busy destination's oldest deliveries."""
    monkeypatch.setattr(deliveries_module, "BATCH", 3)
    jobs = ExtractionJobs(Settings.load(overrides={"database_url": f"sqlite:///{tmp_path}/j.db"}))
    deliveries = Deliveries(jobs, NoSender(), attempts=8)  # type: ignore[arg-type]
    busy = "http://busy.example:8000"
    urls = [busy, f"{busy}?a=1", f"{busy}/hook", f"{busy}#x", "http://busy.example:8001/"]
    urls.append("http://other.example/hook")
    with jobs.db.session() as session:
        for n, url in enumerate(urls):
            session.add(
                ExtractionJob(
                    job_id=f"ExtractionQueue:{n}", filename="a.png", media_kind="image",
                    media_format="png", size=1, options={}, client=f"c{n}", callback_url=url,
                    webhook_state=WebhookState.DUE, webhook_attempts=0,
                    webhook_next_at=utcnow() - timedelta(seconds=10 - n),  # oldest first
                )
            )  # fmt: skip
    for _ in range(deliveries.lanes.per_host):
        assert deliveries.lanes.acquire(busy, "someone")
    try:
        assert deliveries.deliver_due() == 2
    finally:
        deliveries.stop()
        jobs.close()
    with jobs.db.session() as session:
        leased = {
            row.callback_url
            for row in session.scalars(select(ExtractionJob))
            if row.webhook_locked_until is not None or row.webhook_attempts
        }
    # The last two: another port is another destination, another host likewise.
    assert leased == {"http://busy.example:8001/", "http://other.example/hook"}


def test_a_paused_destination_s_deliveries_spend_an_attempt_each_without_a_call(
    tmp_path: Path,
) -> None:
    jobs = ExtractionJobs(Settings.load(overrides={"database_url": f"sqlite:///{tmp_path}/j.db"}))
    deliveries = Deliveries(jobs, NoSender(), attempts=8)  # type: ignore[arg-type]
    dead = "http://dead.example"
    with jobs.db.session() as session:
        for n, attempts in enumerate([0, 3, 7]):
            session.add(
                ExtractionJob(
                    job_id=f"ExtractionQueue:{n}", filename="a.png", media_kind="image",
                    media_format="png", size=1, options={}, client="c", callback_url=dead + "/h",
                    webhook_state=WebhookState.DUE, webhook_attempts=attempts,
                    webhook_next_at=utcnow() - timedelta(seconds=1),
                )
            )  # fmt: skip
    for _ in range(BREAKER_FAILURES):
        assert deliveries.lanes.acquire(dead, "c")
        deliveries.lanes.release(dead, "c", failed=True)
    try:
        assert deliveries.deliver_due() == 3  # NoSender: none was sent
    finally:
        deliveries.stop()
        jobs.close()
    with jobs.db.session() as session:
        rows = {row.job_id[-1]: row for row in session.scalars(select(ExtractionJob))}
    assert [rows[n].webhook_attempts for n in "012"] == [1, 4, 8]
    assert [rows[n].webhook_state for n in "012"] == ["due", "due", "failed"]
    assert all(rows[n].webhook_last.startswith(f"not sent: {dead} failed 3") for n in "012")
    wait = (rows["0"].webhook_next_at - utcnow()).total_seconds()
    assert BREAKER_SECONDS - 5 < wait <= BREAKER_SECONDS  # due again when the pause ends

"""Hostile webhook receivers against a real server (gunicorn, SQLite): a receiver answering 200
with a body without end costs the worker no memory, and receivers that hang or drip delay only
their own deliveries, never an honest client's."""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path

import httpx
import pytest
from hostile_receivers import Dripping, Endless, Hanging, reset_peak, status_of
from jobs_support import Received, Receiver, Server, fresh_database, serve, submit, wait_for
from support import PAGE_ONE, worker_pids

from extractor import samples

pytestmark = pytest.mark.slow  # real servers: make test, not test-fast

MB = 1024 * 1024


@pytest.fixture(scope="module")
def png() -> bytes:
    return samples.encode_image(samples.text_page(PAGE_ONE).image, "PNG")


@pytest.fixture
def endless() -> Iterator[Endless]:
    receiver = Endless()
    yield receiver
    receiver.close()


def _settled(job: dict[str, object]) -> bool:
    webhook = job["webhook"]
    assert isinstance(webhook, dict)
    return webhook["status"] != "pending"


def _announce(client: httpx.Client, png: bytes, url: str) -> str:
    """A job whose webhook goes to ``url`` at once: submitted to a server that runs no jobs,
    then cancelled (its end is the event). Its id."""
    reply = submit(client, png, "hook.png", params={"callback_url": url})
    assert reply.status_code == 202, reply.text
    job_id = str(reply.json()["id"])
    assert client.delete(f"/v1/jobs/{job_id}").status_code == 200
    return job_id


@pytest.mark.serial  # the worker's RSS, measured alone (make test's second pass)
def test_an_endless_reply_costs_the_worker_no_memory(
    tmp_path: Path, png: bytes, endless: Endless
) -> None:
    with fresh_database("sqlite", tmp_path, None) as url:
        server: Server = serve(tmp_path, url, job_workers=0, outbound_allow=endless.origin)
        try:
            with server.client() as client:
                # The first delivery loads the sender (httpx, its pool): not what is measured.
                first = _announce(client, png, endless.url)
                wait_for(client, first, _settled, timeout=60)
                (worker,) = worker_pids(server.process.pid)
                time.sleep(0.5)
                before = status_of(worker, "VmRSS")
                reset_peak(worker)
                started = time.monotonic()
                ids = [_announce(client, png, endless.url) for _ in range(3)]
                done = [wait_for(client, job_id, _settled, timeout=60) for job_id in ids]
                took = time.monotonic() - started
                peak = status_of(worker, "VmHWM")
        finally:
            server.stop()
    print(
        f"RSS {before / MB:.0f} MB before, peak {peak / MB:.0f} MB (+{(peak - before) / MB:.1f})"
        f" over 3 endless replies in {took:.1f} s; the receivers sent {endless.sent / MB:.0f} MB"
    )
    for job in done:
        assert job["webhook"]["status"] == "delivered", job["webhook"]
        assert job["webhook"]["last_outcome"] == "HTTP 200 (reply over 65536 bytes)"
    assert endless.requests == 4 and endless.hung_up == 4  # every reply cut short by us
    # Before: the reply was read whole for the attempt's 10 s (190 -> 4,284 MB in the issue).
    assert peak - before < 20 * MB
    assert took < 10


def _client_from(server: Server, address: str) -> httpx.Client:
    """A client of ``server`` whose connections come from ``address`` (another loopback
    address: another client to the server, which counts jobs and webhooks per address)."""
    transport = httpx.HTTPTransport(local_address=address)
    return httpx.Client(base_url=server.url, timeout=60, transport=transport)


def _arrival(receiver: Receiver, job_id: str, timeout: float) -> Received:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for call in list(receiver.calls):
            if call.json()["id"] == job_id:
                return call
        time.sleep(0.02)
    raise AssertionError(f"no webhook for {job_id} within {timeout} s")


def _finished(job: dict[str, object]) -> float:
    return datetime.fromisoformat(str(job["finished_at"]).replace("Z", "+00:00")).timestamp()


@pytest.mark.serial  # an honest client's latency and the worker's RSS, measured alone
@pytest.mark.parametrize("database", ["sqlite", "postgresql"])
def test_hanging_and_dripping_receivers_delay_only_their_own_webhooks(
    request: pytest.FixtureRequest, tmp_path: Path, png: bytes, database: str
) -> None:
    """The issue's shape doubled and more: 50 jobs of two hostile clients whose receivers
    never answer or drip a byte a second, then an honest client's jobs one after another."""
    hanging = [Hanging() for _ in range(3)]
    dripping = [Dripping() for _ in range(2)]
    hostile = [*hanging, *dripping]
    honest = Receiver()
    latencies: list[float] = []
    admin = request.getfixturevalue("postgres_admin_url") if database != "sqlite" else None
    try:
        with fresh_database(database, tmp_path, admin) as url:
            # Attempts of 3 s rather than 10: the breakers open within the 16 s measured.
            server = serve(
                tmp_path, url, job_workers=0, webhook_timeout=3, outbound_allow="127.0.0.0/8:*"
            )
            try:
                with server.client() as client:
                    warm = _announce(client, png, honest.url)
                    wait_for(client, warm, _settled, timeout=30)
                    (worker,) = worker_pids(server.process.pid)
                    before = status_of(worker, "VmRSS")
                    reset_peak(worker)
                    for n, address in enumerate(["127.0.0.2", "127.0.0.3"]):
                        with _client_from(server, address) as attacker:
                            for i in range(25):
                                target = hostile[(n * 25 + i) % len(hostile)]
                                _announce(attacker, png, target.url)
                    deadline = time.monotonic() + 20
                    while sum(h.requests for h in hostile) < 8:
                        assert time.monotonic() < deadline, "the hostile receivers were not called"
                        time.sleep(0.05)
                    attack_started = time.monotonic()
                    for _ in range(8):  # 16 s: past the first hanging attempts and the breakers
                        job_id = _announce(client, png, honest.url)
                        call = _arrival(honest, job_id, timeout=15)
                        ended = wait_for(client, job_id, timeout=10)
                        latencies.append(call.at - _finished(ended))
                        time.sleep(2)
                    attacked = time.monotonic() - attack_started
                    peak = status_of(worker, "VmHWM")
                    sample = client.get("/v1/jobs", params={"limit": 100}).json()["data"]
            finally:
                server.stop()
    finally:
        for receiver in hostile:
            receiver.close()
        honest.close()
    outcomes = Counter(
        str(job["webhook"]["last_outcome"]).split(":")[0]
        for job in sample
        if job["webhook"]["url"] != honest.url
    )
    print(
        f"{database}: honest webhooks after the job's end:"
        f" {', '.join(f'{s:.2f}' for s in latencies)} s"
        f" over {attacked:.0f} s of attack; hostile calls {sum(h.requests for h in hostile)};"
        f" hostile outcomes {dict(outcomes)}; RSS {before / MB:.0f} MB, peak"
        f" +{(peak - before) / MB:.1f} MB"
    )
    # Before: a pass of 20 deliveries on 4 threads waited for its slowest (10 s a try): 23 s.
    assert max(latencies) < 2.0
    assert peak - before < 20 * MB
    # The breakers opened: later deliveries to the dead receivers are not even tried.
    assert outcomes["not sent"] > 0


def test_a_client_s_pending_webhooks_are_capped(tmp_path: Path, png: bytes) -> None:
    with fresh_database("sqlite", tmp_path, None) as url:
        server = serve(
            tmp_path,
            url,
            job_workers=0,
            max_pending_webhooks_per_client=2,
            outbound_allow="127.0.0.0/8:*",
        )
        try:
            with _client_from(server, "127.0.0.2") as attacker, server.client() as other:
                hook = {"callback_url": "http://127.0.0.1:9/hook"}
                for _ in range(2):
                    assert submit(attacker, png, "a.png", params=hook).status_code == 202
                refused = submit(attacker, png, "a.png", params=hook)
                assert refused.status_code == 429
                assert "EXTRACTOR_MAX_PENDING_WEBHOOKS_PER_CLIENT" in refused.text
                assert refused.headers["Retry-After"]
                assert submit(attacker, png, "b.png").status_code == 202  # no callback: fine
                assert submit(other, png, "c.png", params=hook).status_code == 202
        finally:
            server.stop()

"""Hostile webhook receivers against a real server (gunicorn, SQLite): a receiver answering 200
with a body without end costs the worker no memory, and receivers that hang or drip delay only
their own deliveries, never an honest client's."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from hostile_receivers import Endless, reset_peak, status_of
from jobs_support import Server, fresh_database, serve, submit, wait_for
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

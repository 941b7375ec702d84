"""Webhooks over real sockets: a loopback receiver allowed by EXTRACTOR_OUTBOUND_ALLOW gets the
signed job JSON within 2 s of the job's end, retried with backoff on 5xx, given up on other
4xx, each attempt visible on the job; the docs' verification example accepts what arrives."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import re
import time
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path

import httpx
import pytest
from jobs_support import WEBHOOK_SECRET, Receiver, Server, fresh_database, serve, submit, wait_for
from support import PAGE_ONE

from extractor import samples

pytestmark = pytest.mark.slow  # real servers and engines: make test, not test-fast

JOBS_PAGE = Path(__file__).resolve().parents[2] / "docs" / "api" / "jobs.md"


@pytest.fixture(scope="module")
def receiver() -> Iterator[Receiver]:
    running = Receiver()
    yield running
    running.close()


@pytest.fixture(scope="module", params=["sqlite", "postgresql"])
def server(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory, receiver: Receiver
) -> Iterator[Server]:
    """A server on each job database; every test here runs on both."""
    tmp = tmp_path_factory.mktemp("webhooks")
    admin = request.getfixturevalue("postgres_admin_url") if request.param != "sqlite" else None
    with fresh_database(request.param, tmp, admin) as url:
        running = serve(tmp, url, outbound_allow=f"http://127.0.0.1:{receiver.port}")
        yield running
        running.stop()


@pytest.fixture
def client(server: Server) -> Iterator[httpx.Client]:
    with server.client() as http:
        yield http


@pytest.fixture(scope="module")
def png() -> bytes:
    return samples.encode_image(samples.text_page(PAGE_ONE).image, "PNG")


def _calls_for(receiver: Receiver, job_id: str, count: int, timeout: float = 30) -> list[bytes]:
    deadline = time.monotonic() + timeout
    while True:
        bodies = [c.body for c in receiver.calls if json.loads(c.body)["id"] == job_id]
        if len(bodies) >= count or time.monotonic() > deadline:
            return bodies
        time.sleep(0.05)


def _finished(job: dict[str, object]) -> float:
    return datetime.fromisoformat(str(job["finished_at"]).replace("Z", "+00:00")).timestamp()


def test_the_signed_job_arrives_within_2_s_of_its_end(
    client: httpx.Client, receiver: Receiver, png: bytes
) -> None:
    job = submit(client, png, "hook.png", params={"callback_url": receiver.url}).json()
    assert job["webhook"] == {
        "url": receiver.url, "status": "pending", "attempts": 0, "last_outcome": None,
        "delivered_at": None,
    }  # fmt: skip
    done = wait_for(client, job["id"])
    assert _calls_for(receiver, job["id"], 1)
    call = next(c for c in receiver.calls if json.loads(c.body)["id"] == job["id"])
    assert call.at - _finished(done) < 2.0
    expected = hmac.new(WEBHOOK_SECRET.encode(), call.body, hashlib.sha256).hexdigest()
    assert call.headers["x-signature"] == f"sha256={expected}"
    assert call.headers["content-type"] == "application/json"
    body = call.json()
    assert body["status"] == "succeeded" and body["result_url"]
    assert abs(body["timestamp"] - call.at) < 5
    delivered = wait_for(client, job["id"], lambda j: j["webhook"]["status"] == "delivered")
    assert delivered["webhook"]["attempts"] == 1
    assert delivered["webhook"]["last_outcome"] == "HTTP 204"


def test_5xx_is_retried_with_backoff_and_4xx_is_not(
    client: httpx.Client, receiver: Receiver, png: bytes
) -> None:
    receiver.statuses[:] = [500, 503]
    job = submit(client, png, "retry.png", params={"callback_url": receiver.url}).json()
    wait_for(client, job["id"])
    bodies = _calls_for(receiver, job["id"], 3)
    assert len(bodies) == 3
    retried = wait_for(client, job["id"], lambda j: j["webhook"]["status"] == "delivered")
    assert retried["webhook"]["attempts"] == 3
    times = [c.at for c in receiver.calls if c.json()["id"] == job["id"]]
    assert times[1] - times[0] >= 0.7 and times[2] - times[1] >= 1.4  # 1 s, then 2 s, -25%
    receiver.statuses[:] = [410]
    gone = submit(client, png, "gone.png", params={"callback_url": receiver.url}).json()
    failed = wait_for(client, gone["id"], lambda j: j["webhook"]["status"] == "failed")
    assert failed["webhook"]["attempts"] == 1 and failed["webhook"]["last_outcome"] == "HTTP 410"
    time.sleep(1.5)
    assert len(_calls_for(receiver, gone["id"], 2, timeout=0)) == 1


def test_a_failed_job_is_announced_with_its_error(client: httpx.Client, receiver: Receiver) -> None:
    broken = b"%PDF-1.4\n" + b"not a PDF at all " * 200  # sniffed as a PDF, fails to render
    sync = client.post("/extract", files={"upload": ("broken.pdf", broken)})
    assert sync.status_code >= 400
    job = submit(client, broken, "broken.pdf", params={"callback_url": receiver.url}).json()
    done = wait_for(client, job["id"])
    assert done["status"] == "failed" and done["error"] == sync.json()["error"]
    bodies = _calls_for(receiver, job["id"], 1)
    assert bodies and json.loads(bodies[0])["status"] == "failed"
    assert json.loads(bodies[0])["error"] == sync.json()["error"]
    call = next(c for c in receiver.calls if c.body == bodies[0])
    assert call.at - _finished(done) < 2.0


def test_a_cancelled_job_is_announced_too(client: httpx.Client, receiver: Receiver) -> None:
    pages = [samples.text_page(PAGE_ONE, page=i) for i in range(8)]
    job = submit(client, samples.pdf(pages), "c.pdf", params={"callback_url": receiver.url}).json()
    client.delete(f"/v1/jobs/{job['id']}")
    bodies = _calls_for(receiver, job["id"], 1)
    assert bodies and json.loads(bodies[0])["status"] == "cancelled"


def test_the_readme_verification_example_accepts_a_real_call(
    client: httpx.Client, receiver: Receiver, png: bytes
) -> None:
    job = submit(client, png, "readme.png", params={"callback_url": receiver.url}).json()
    wait_for(client, job["id"])
    body = _calls_for(receiver, job["id"], 1)[0]
    call = next(c for c in receiver.calls if c.body == body)
    example = re.search(
        r"<!-- webhook-verify -->\s*```python\n(.*?)```", JOBS_PAGE.read_text(), re.DOTALL
    )
    assert example, "docs/api/jobs.md: the webhook verification example is missing"
    namespace: dict[str, object] = {}
    exec(example.group(1), namespace)
    verify = namespace["verify"]
    assert callable(verify)
    headers = {name.title(): value for name, value in call.headers.items()}
    assert verify(body, headers, WEBHOOK_SECRET)["id"] == job["id"]
    with pytest.raises(ValueError):
        verify(body + b" ", headers, WEBHOOK_SECRET)
    with pytest.raises(ValueError):
        verify(body, headers, "another secret")
    # It checks both signatures: either one wrong is refused.
    for name in ("Webhook-Signature", "X-Signature"):
        with pytest.raises(ValueError):
            verify(body, {**headers, name: "v1,AAAA"}, WEBHOOK_SECRET)
    with pytest.raises(ValueError):  # another delivery's id: its signature does not fit
        verify(body, {**headers, "Webhook-Id": "another"}, WEBHOOK_SECRET)


def test_every_attempt_carries_the_delivery_s_id_and_standard_signature(
    client: httpx.Client, receiver: Receiver, png: bytes
) -> None:
    receiver.statuses[:] = [503]
    job = submit(client, png, "ids.png", params={"callback_url": receiver.url}).json()
    wait_for(client, job["id"], lambda j: j["webhook"]["status"] == "delivered")
    calls = [c for c in receiver.calls if c.json()["id"] == job["id"]]
    assert len(calls) == 2
    assert [c.headers["webhook-id"] for c in calls] == [job["id"], job["id"]]  # a retry: same id
    for call in calls:
        stamp = call.headers["webhook-timestamp"]
        assert int(stamp) == call.json()["timestamp"]
        signed = f"{job['id']}.{stamp}.".encode() + call.body
        digest = hmac.new(WEBHOOK_SECRET.encode(), signed, hashlib.sha256).digest()
        assert call.headers["webhook-signature"] == "v1," + base64.b64encode(digest).decode()


def test_a_receiver_slower_than_the_timeout_is_tried_again(tmp_path: Path, png: bytes) -> None:
    slow = Receiver(delays=[3.0])  # the first call outlasts EXTRACTOR_WEBHOOK_TIMEOUT=1
    with fresh_database("sqlite", tmp_path, None) as url:
        server = serve(
            tmp_path, url, webhook_timeout=1, outbound_allow=f"http://127.0.0.1:{slow.port}"
        )
        try:
            with server.client() as client:
                job = submit(client, png, "slow.png", params={"callback_url": slow.url}).json()
                done = wait_for(client, job["id"], lambda j: j["webhook"]["status"] != "pending")
        finally:
            server.stop()
            slow.close()
    assert done["webhook"]["status"] == "delivered" and done["webhook"]["attempts"] == 2
    assert len(slow.calls) == 2


def test_without_a_webhook_secret_callbacks_are_refused(tmp_path: Path, png: bytes) -> None:
    with fresh_database("sqlite", tmp_path, None) as url:
        server = serve(tmp_path, url, webhook_secret="", job_workers=0)
        try:
            with server.client() as client:
                reply = submit(client, png, "x.png", params={"callback_url": "https://a.example/"})
                assert reply.status_code == 400
                assert "EXTRACTOR_WEBHOOK_SECRET" in reply.json()["error"]["message"]
        finally:
            server.stop()


def test_metrics_count_jobs_by_status_the_queue_and_deliveries(
    client: httpx.Client, receiver: Receiver, png: bytes
) -> None:
    job = submit(client, png, "metrics.png", params={"callback_url": receiver.url}).json()
    wait_for(client, job["id"], lambda j: j["webhook"]["status"] == "delivered")
    text = client.get("/metrics").text
    succeeded = re.search(r'^extractor_jobs\{status="succeeded"\} (\d+)', text, re.MULTILINE)
    assert succeeded and int(succeeded.group(1)) >= 1
    assert re.search(r"^extractor_jobs_queue_depth \d+", text, re.MULTILINE)
    delivered = re.search(
        r'^extractor_job_webhooks_total\{outcome="delivered"\} ([\d.]+)', text, re.MULTILINE
    )
    assert delivered and float(delivered.group(1)) >= 1

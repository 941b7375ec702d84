"""One webhook attempt (``WebhookSender.send``) in isolation: a callback host whose name
lookups hang delays no other host's calls, and a reply is read only to its limit."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import pytest
from hostile_receivers import Endless, EndlessHeaders
from jobs_support import Receiver

from extractor.async_jobs.webhook import WebhookSender
from extractor.net.ssrf import OutboundPolicy

JOB = {"id": "ExtractionQueue:0", "status": "succeeded"}


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    running = Receiver()
    yield running
    running.close()


def test_a_host_whose_lookups_hang_delays_no_other(receiver: Receiver) -> None:
    release = threading.Event()

    def resolver(host: str, port: int) -> list[str]:
        if host.startswith("slow"):
            release.wait(10)  # a client's name server that does not answer
        return ["127.0.0.1"]

    slow_names = [f"slow{i}.example" for i in range(6)]
    policy = OutboundPolicy([f"fast.example:{receiver.port}", *(f"{n}:*" for n in slow_names)])
    sender = WebhookSender("s", policy, 1.0, resolver=resolver, connections=16)
    try:
        slow = [
            threading.Thread(target=sender.send, args=(f"http://{name}/hook", JOB))
            for name in slow_names
        ]
        for thread in slow:
            thread.start()
        time.sleep(0.2)
        started = time.monotonic()
        outcome = sender.send(f"http://fast.example:{receiver.port}/hook", JOB)
        took = time.monotonic() - started
        assert outcome.result == "delivered", outcome
        assert took < 0.5  # not behind the 6 hanging lookups (it was, with 4 lookup threads)
        release.set()
        for thread in slow:
            thread.join(10)
    finally:
        release.set()
        sender.close()


def test_an_endless_reply_is_read_to_its_limit_only() -> None:
    endless = Endless()
    policy = OutboundPolicy(endless.origin)
    sender = WebhookSender("s", policy, 5.0, max_reply_bytes=1000)
    try:
        started = time.monotonic()
        outcome = sender.send(endless.url, JOB)
        assert time.monotonic() - started < 2
    finally:
        sender.close()
        endless.close()
    assert outcome.result == "delivered"
    assert outcome.detail == "HTTP 200 (reply over 1000 bytes)"


def test_headers_without_end_are_cut_at_100_kib() -> None:
    endless = EndlessHeaders()
    sender = WebhookSender("s", OutboundPolicy(endless.origin), 5.0)
    try:
        started = time.monotonic()
        outcome = sender.send(endless.url, JOB)
        took = time.monotonic() - started
    finally:
        sender.close()
        endless.close()
    assert outcome.result == "retry" and "RemoteProtocolError" in outcome.detail, outcome
    assert took < 2
    assert endless.sent < 16 * 1024 * 1024  # httpcore's 100 KiB head limit, plus socket buffers


@pytest.mark.parametrize(
    ("status", "result", "detail"),
    [
        (204, "delivered", "HTTP 204"),
        (302, "failed", "HTTP 302 (redirects are not followed)"),
        (404, "failed", "HTTP 404"),
        (408, "retry", "HTTP 408"),
        (425, "retry", "HTTP 425"),
        (429, "retry", "HTTP 429"),
        (503, "retry", "HTTP 503"),
    ],
)
def test_one_send_is_one_attempt_judged_by_its_status(
    receiver: Receiver, status: int, result: str, detail: str
) -> None:
    receiver.statuses.append(status)
    sender = WebhookSender("s", OutboundPolicy(f"127.0.0.1:{receiver.port}"), 5.0)
    try:
        outcome = sender.send(receiver.url, JOB)
    finally:
        sender.close()
    assert (outcome.result, outcome.detail) == (result, detail)
    assert len(receiver.calls) == 1  # the next attempt is the delivery's, never the call's

"""A callback host whose name server never answers holds a submit for a bounded time only:
the lookup runs on a few threads of its own and is given up after its deadline, even when
every one of them is already stuck on earlier such hosts."""

from __future__ import annotations

import threading
import time

import pytest

from extractor.async_jobs.webhook import check_callback_url
from extractor.net.errors import OutboundError
from extractor.net.ssrf import OutboundPolicy


def test_a_lookup_that_never_answers_is_refused_at_its_deadline() -> None:
    answer = threading.Event()

    def hanging(_host: str, _port: int) -> list[str]:
        answer.wait(30)
        return ["93.184.216.34"]

    policy = OutboundPolicy("")
    try:
        for _attempt in range(6):  # more than the lookup threads: later ones wait, then give up
            started = time.monotonic()
            with pytest.raises(OutboundError, match=r"no answer in 0\.5 s"):
                check_callback_url("https://hook.example/x", policy, hanging, 0.5)
            assert time.monotonic() - started < 2.0
    finally:
        answer.set()  # the stuck lookups end; their threads are free again


def test_a_host_that_resolves_in_time_is_checked_as_before() -> None:
    policy = OutboundPolicy("")
    public = check_callback_url("https://hook.example/x", policy, lambda _h, _p: ["93.184.216.34"])
    assert public == "https://hook.example/x"
    with pytest.raises(OutboundError):  # loopback, refused by the policy
        check_callback_url("https://hook.example/x", policy, lambda _h, _p: ["127.0.0.1"], 1.0)

"""extractor.server.intake: where a request ends, fed the way a socket gives bytes (any split)."""

from __future__ import annotations

from pathlib import Path

import pytest

from extractor.server.intake import (
    SPOOL_MEMORY_BYTES,
    IntakeLimits,
    Refusal,
    RequestIntake,
    Stage,
    refusal_bytes,
)

LIMITS = IntakeLimits(header_timeout=10, body_timeout=30, min_body_rate=1000, max_body_bytes=10**6)


def feed_in_pieces(data: bytes, size: int, limits: IntakeLimits = LIMITS) -> RequestIntake:
    intake = RequestIntake(limits, now=0.0)
    for start in range(0, len(data), size):
        stage = intake.feed(data[start : start + size], now=1.0)
        if stage in (Stage.COMPLETE, Stage.UPGRADE):
            rest = data[start + size :]
            intake.pipelined += rest
            return intake
    return intake


@pytest.mark.parametrize("size", [1, 3, 7, 64, 100_000])
def test_a_sized_and_a_chunked_body_end_where_they_end(size: int) -> None:
    sized = b"POST /a HTTP/1.1\r\nHost: h\r\nContent-Length: 5\r\n\r\nhello"
    chunked = (
        b"POST /b HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n"
        b"5;ext=1\r\nhello\r\n10\r\n" + b"x" * 16 + b"\r\n0\r\nTrailer: t\r\n\r\n"
    )
    following = b"GET /next HTTP/1.1\r\nHost: h\r\n\r\n"
    for request in (sized, chunked):
        intake = feed_in_pieces(request + following, size)
        assert intake.stage is Stage.COMPLETE
        assert intake.spool.read() == request
        assert intake.pipelined == following
        intake.close()


def test_a_request_without_a_body_is_complete_with_its_head() -> None:
    intake = feed_in_pieces(b"GET / HTTP/1.1\r\nHost: h\r\n\r\n", 5)
    assert intake.stage is Stage.COMPLETE


def test_a_protocol_switch_is_handed_over_after_its_head() -> None:
    head = b"GET /v1/realtime HTTP/1.1\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n"
    intake = RequestIntake(LIMITS, now=0.0)
    assert intake.feed(head + b"\x81\x05frame", now=0.0) is Stage.UPGRADE
    assert intake.spool.read() == head + b"\x81\x05frame"  # the frames stay for the handler


@pytest.mark.parametrize(
    "headers",
    [
        b"Content-Length: 5\r\nTransfer-Encoding: chunked\r\n",
        b"Content-Length: 5\r\nContent-Length: 6\r\n",
        b"Content-Length: -5\r\n",
        b"Content-Length: 5 5\r\n",
        b"Transfer-Encoding: gzip, chunked\r\n",
        b" Content-Length: 5\r\n",
        b"No colon here\r\n",
    ],
)
def test_ambiguous_framing_is_refused_with_400(headers: bytes) -> None:
    intake = RequestIntake(LIMITS, now=0.0)
    with pytest.raises(Refusal) as refused:
        intake.feed(b"POST / HTTP/1.1\r\n" + headers + b"\r\nhello", now=0.0)
    assert refused.value.status == 400


def test_limits_on_head_and_body_sizes() -> None:
    with pytest.raises(Refusal) as head:
        RequestIntake(LIMITS, now=0).feed(b"GET / HTTP/1.1\r\nX: " + b"a" * 70_000, now=0)
    assert head.value.status == 431
    with pytest.raises(Refusal) as announced:
        RequestIntake(LIMITS, now=0).feed(b"POST / HTTP/1.1\r\nContent-Length: 1000001\r\n\r\n", 0)
    assert announced.value.status == 413
    intake = RequestIntake(LIMITS, now=0)
    intake.feed(b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n", now=0)
    with pytest.raises(Refusal) as sent:
        for _ in range(20):
            intake.feed(b"10000\r\n" + b"x" * 0x10000 + b"\r\n", now=0)
    assert sent.value.status == 413
    intake.close()


def test_the_body_deadline_grows_with_what_arrived() -> None:
    intake = RequestIntake(LIMITS, now=0.0)
    assert intake.deadline == 10  # the head's
    intake.feed(b"POST / HTTP/1.1\r\nContent-Length: 100000\r\n\r\n", now=2.0)
    assert intake.deadline == 32  # the body's: from the end of the head
    intake.feed(b"x" * 5000, now=3.0)
    assert intake.deadline == 37  # plus 1 s per 1000 bytes
    refusal = intake.timeout()
    assert refusal is not None and refusal.status == 408
    assert RequestIntake(LIMITS, now=0).timeout() is None  # nothing sent: closed without a word


def test_a_large_body_is_spooled_to_disk_and_a_small_one_is_not() -> None:
    intake = feed_in_pieces(
        b"POST / HTTP/1.1\r\nContent-Length: 200000\r\n\r\n" + b"x" * 200_000, 65536
    )
    assert intake.stage is Stage.COMPLETE
    assert intake.spool._rolled  # type: ignore[attr-defined]
    intake.close()
    small = feed_in_pieces(b"POST / HTTP/1.1\r\nContent-Length: 10\r\n\r\n" + b"x" * 10, 4)
    assert not small.spool._rolled  # type: ignore[attr-defined]
    assert SPOOL_MEMORY_BYTES == 64 * 1024


def test_a_refusal_is_a_whole_response_that_closes() -> None:
    reply = refusal_bytes(LIMITS, Refusal(503, "busy", "later"), retry_after=1)
    head, body = reply.split(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 503 Service Unavailable\r\n")
    assert b"Connection: close" in head and b"Retry-After: 1" in head
    assert f"Content-Length: {len(body)}".encode() in head
    assert body == b'{"error": {"code": "busy", "message": "later"}}'


def test_a_spool_that_cannot_be_written_refuses_the_request_not_the_worker(tmp_path: Path) -> None:
    """A body past the memory part goes to a file; when that file cannot be made (here its
    folder is gone; a full disk is tests/test_no_room.py's), the request gets a 503 with the
    reason instead of an OSError out of the worker's main loop."""
    limits = IntakeLimits(max_body_bytes=10**6, spool_dir=str(tmp_path / "gone"))
    body = b"x" * (SPOOL_MEMORY_BYTES + 1)
    head = b"POST /a HTTP/1.1\r\nHost: h\r\nContent-Length: %d\r\n\r\n" % len(body)
    with pytest.raises(Refusal) as refused:
        feed_in_pieces(head + body, 4096, limits)
    assert refused.value.status == 503
    assert "No such file or directory" in refused.value.message
    assert ("Retry-After", "30") in refused.value.headers

"""Live places that idle clients cannot take: a socket that sends no audio gives its place back
soon, one client address holds only so many, and a place is free again as soon as its
connection closes. On loopback, several client addresses are 127.0.0.x."""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Iterator
from typing import Any

import pytest
from realtime_support import FIRST, appends, pcm, silence
from support import start_server, stop_server
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import ClientConnection, connect

SECRET = "capacity-secret"
FIRST_AUDIO_SECONDS = 8  # long enough for the 60 handshakes on a loaded machine


@pytest.fixture(scope="module")
def server() -> Iterator[str]:
    url, process = start_server(
        "--workers", "1", "--secret", SECRET, "--realtime-sessions", "2",
        "--realtime-sessions-per-client", "1",
        "--realtime-first-audio-seconds", str(FIRST_AUDIO_SECONDS),
    )  # fmt: skip
    try:
        yield url
    finally:
        stop_server(process)


def live(url: str, address: str) -> ClientConnection:
    """An authenticated live socket from ``address`` (a loopback address of 127.0.0.0/8)."""
    return connect(
        url.replace("http://", "ws://") + "/v1/realtime?intent=transcription",
        additional_headers={"Authorization": f"Bearer {SECRET}"},
        open_timeout=30,
        source_address=(address, 0),
    )


def first_event(ws: ClientConnection) -> dict[str, Any]:
    return json.loads(ws.recv(timeout=30))


def events_until(ws: ClientConnection, kind: str, timeout: float = 120) -> list[dict[str, Any]]:
    got: list[dict[str, Any]] = []
    deadline = time.monotonic() + timeout
    while not got or got[-1]["type"] != kind:
        got.append(json.loads(ws.recv(timeout=max(0.1, deadline - time.monotonic()))))
    return got


def closed_with(ws: ClientConnection) -> int | None:
    with contextlib.suppress(ConnectionClosed, TimeoutError):
        while True:
            ws.recv(timeout=10)
    return ws.close_code


def served(url: str, address: str) -> list[dict[str, Any]]:
    """A stream of one spoken sentence from ``address``, to its completed transcript."""
    with live(url, address) as ws:
        assert first_event(ws)["type"] == "session.created"
        for message in appends(silence(0.3) + pcm(FIRST) + silence(1.0)):
            ws.send(message)
        return events_until(ws, "conversation.item.input_audio_transcription.completed")


@pytest.mark.slow
def test_sixty_idle_sockets_leave_an_honest_stream_its_place(server: str) -> None:
    """60 authenticated sockets from one address that never send a byte of audio: one holds
    a place (the address's cap), the others are told at once and closed; a stream from
    another address is served meanwhile, and the idle one is closed after the first-audio
    time."""
    with contextlib.ExitStack() as sockets:
        idle = [sockets.enter_context(live(server, "127.0.0.1")) for _ in range(60)]
        answers = [first_event(ws) for ws in idle]
        admitted = [
            ws for ws, a in zip(idle, answers, strict=True) if a["type"] == "session.created"
        ]
        refused = [a["error"] for a in answers if a["type"] == "error"]
        assert len(admitted) == 1 and len(refused) == 59, answers[:3]
        assert {e["code"] for e in refused} == {"client_session_limit_reached"}
        assert "EXTRACTOR_REALTIME_SESSIONS_PER_CLIENT" in refused[0]["message"]
        assert {closed_with(ws) for ws in idle if ws not in admitted} == {1013}
        events = served(server, "127.0.0.2")
        assert not [e for e in events if e["type"] == "error"], events
        (held,) = admitted
        (error,) = [e["error"] for e in events_until(held, "error", timeout=30)]
        assert error["code"] == "idle_timeout"
        assert "EXTRACTOR_REALTIME_FIRST_AUDIO_SECONDS" in error["message"]
        assert closed_with(held) == 1001


@pytest.mark.slow
def test_messages_without_audio_do_not_keep_a_place(server: str) -> None:
    """A session sending a session.update each second but no audio is closed after the
    first-audio time all the same, and its place is taken by the next stream at once."""
    with live(server, "127.0.0.3") as chatty, live(server, "127.0.0.4") as quiet:
        assert first_event(chatty)["type"] == first_event(quiet)["type"] == "session.created"
        with live(server, "127.0.0.5") as third:  # both places are held
            (error,) = [e["error"] for e in events_until(third, "error")]
            assert error["code"] == "session_limit_reached"
        opened = time.monotonic()
        got: list[dict[str, Any]] = []
        with contextlib.suppress(ConnectionClosed):  # closed by the server, as it should be
            while time.monotonic() - opened < 30:
                chatty.send(json.dumps({"type": "session.update", "session": {}}))
                with contextlib.suppress(TimeoutError):
                    while True:
                        got.append(json.loads(chatty.recv(timeout=1)))
        assert chatty.close_code == 1001, got
        assert [e["type"] for e in got].count("session.updated") >= 2, got
        assert got[-1]["error"]["code"] == "idle_timeout"
        assert time.monotonic() - opened < FIRST_AUDIO_SECONDS + 5
        with live(server, "127.0.0.5") as next_stream:  # the place is free again
            assert first_event(next_stream)["type"] == "session.created"

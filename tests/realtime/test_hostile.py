"""Hostile live clients against a real server: audio far faster than real time, a client that
never reads. Memory stays bounded, the worker stays free for the others."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from realtime_support import ALIKE, FIRST, append, likeness, noise, pcm, silence, transcript_words
from support import start_server, stop_server, worker_pids
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import connect
from wsproto import ConnectionType, WSConnection
from wsproto.events import AcceptConnection, CloseConnection, Message, Request


@pytest.fixture(scope="module")
def server() -> Iterator[tuple[str, int]]:
    url, process = start_server(
        "--workers", "1", "--realtime-buffer-bytes", "65536",
        "--realtime-send-buffer-bytes", "65536",
    )  # fmt: skip
    try:
        yield url, process.pid
    finally:
        stop_server(process)


def worker_rss_kb(master: int) -> int:
    """The summed VmRSS of ``master``'s workers (one gone meanwhile counts 0)."""
    total = 0
    for pid in worker_pids(master):
        with contextlib.suppress(OSError):
            status = Path(f"/proc/{pid}/status").read_text()
            total += int(status.split("VmRSS:")[1].split()[0])
    return total


def ws_url(url: str) -> str:
    return url.replace("http://", "ws://") + "/v1/realtime?intent=transcription"


@pytest.mark.serial  # the workers' RSS, measured alone (make test's second pass)
def test_ten_minutes_sent_in_seconds_stay_bounded(server: tuple[str, int]) -> None:
    url, master = server
    with connect(ws_url(url), open_timeout=60) as warm:  # the decoder loads on a first session
        json.loads(warm.recv(timeout=60))
        warm.send(append(silence(0.3) + pcm(FIRST) + silence(0.8)))
        while (first := json.loads(warm.recv(timeout=60)))["type"] != "conversation.item.done":
            pass
    before = worker_rss_kb(master)
    minute = append(noise(60))  # one 60 s append: ten of them, as fast as TCP takes them
    started = time.monotonic()
    with connect(ws_url(url), open_timeout=60, max_size=None) as ws:
        json.loads(ws.recv(timeout=60))
        for _ in range(10):
            ws.send(minute)
        ws.send(append(silence(0.3) + pcm(FIRST) + silence(0.8)))
        peak = worker_rss_kb(master)
        events = []
        while not events or events[-1]["type"] != "conversation.item.done":
            events.append(json.loads(ws.recv(timeout=120)))
            peak = max(peak, worker_rss_kb(master))
    (done,) = [e for e in events if e["type"].endswith("transcription.completed")]
    # The turn after them is heard as the same turn was on a fresh session.
    fresh = first["item"]["content"][0]["transcript"]
    assert likeness(done["transcript"], transcript_words(fresh)) >= ALIKE, (done, fresh)
    assert not [e for e in events if e["type"] == "error"]
    # 10 minutes are 29 MB of PCM (38 MB as base64): held at once they would show here.
    assert (peak - before) / 1024 < 25, f"worker grew {(peak - before) / 1024:.0f} MB"
    assert time.monotonic() - started < 120  # noise is VAD'd, never decoded: far from 600 s


def test_a_client_that_never_reads_is_dropped_and_others_go_on(server: tuple[str, int]) -> None:
    url, _master = server
    host, port = url.removeprefix("http://").split(":")
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)  # fill up sooner
    sock.connect((host, int(port)))
    ws = WSConnection(ConnectionType.CLIENT)
    sock.sendall(
        ws.send(Request(host=f"{host}:{port}", target="/v1/realtime?intent=transcription"))
    )
    while not any(isinstance(e, AcceptConnection) for e in ws.events()):
        ws.receive_data(sock.recv(4096))
    # Each bad message earns an error event the client never reads.
    frame = ws.send(Message(data="{x"))
    dropped = False
    sock.settimeout(5)
    started = time.monotonic()
    try:
        while time.monotonic() - started < 60:
            sock.sendall(frame * 200)
    except OSError:  # reset, broken pipe, or a send that could not go on: the server let go
        dropped = True
    sock.close()
    assert dropped, "the server kept a connection whose client never reads"
    with connect(ws_url(url), open_timeout=30) as other:
        assert json.loads(other.recv(timeout=30))["type"] == "session.created"


@pytest.mark.slow  # a server or CLI process: make test runs it, make test-fast does not
def test_a_session_past_its_length_is_ended() -> None:
    url, process = start_server("--workers", "1", "--realtime-session-seconds", "3")
    try:
        with connect(ws_url(url), open_timeout=60) as ws:
            assert json.loads(ws.recv(timeout=30))["type"] == "session.created"
            started = time.monotonic()
            got = None
            while got is None or got["type"] != "error":
                ws.send(append(silence(0.2)))  # busy, never idle: the length is what ends it
                try:
                    got = json.loads(ws.recv(timeout=0.2))
                except TimeoutError:
                    continue
            assert got["error"]["code"] == "session_expired"
            assert "EXTRACTOR_REALTIME_SESSION_SECONDS" in got["error"]["message"]
            with pytest.raises(ConnectionClosed):
                while True:
                    ws.recv(timeout=10)
            assert ws.close_code == 1001
            assert 2.5 < time.monotonic() - started < 15
    finally:
        stop_server(process)


def test_a_frame_breaking_the_websocket_protocol_gets_close_1002(
    server: tuple[str, int],
) -> None:
    """A text frame with RSV1 set, which no negotiated extension allows (RFC 6455 5.2)."""
    url, _master = server
    host, port = url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=30) as sock:
        ws = WSConnection(ConnectionType.CLIENT)
        sock.sendall(
            ws.send(Request(host=f"{host}:{port}", target="/v1/realtime?intent=transcription"))
        )
        events: list[object] = []
        while not any(isinstance(e, AcceptConnection) for e in events):
            ws.receive_data(sock.recv(4096))
            events += list(ws.events())
        mask, payload = b"\x01\x02\x03\x04", b"{}"
        masked = bytes(b ^ mask[i % 4] for i, b in enumerate(payload))
        sock.sendall(bytes([0x80 | 0x40 | 0x1, 0x80 | len(payload)]) + mask + masked)
        closed: CloseConnection | None = None
        while closed is None:
            data = sock.recv(65536)
            assert data, "the server dropped the connection without a close frame"
            ws.receive_data(data)
            closed = next((e for e in ws.events() if isinstance(e, CloseConnection)), None)
    assert closed.code == 1002, closed
    with connect(ws_url(url), open_timeout=30) as other:  # the worker serves on
        assert json.loads(other.recv(timeout=30))["type"] == "session.created"


def test_a_stopping_server_closes_open_sessions_with_1012() -> None:
    """1012 (service restart) tells a client to reconnect, to another replica or this one later."""
    url, process = start_server("--workers", "1")
    try:
        with connect(ws_url(url), open_timeout=60) as ws:
            assert json.loads(ws.recv(timeout=30))["type"] == "session.created"
            ws.send(append(silence(0.5)))
            os.kill(process.pid, signal.SIGTERM)  # the master, as an orchestrator stops a pod
            with pytest.raises(ConnectionClosed):
                while True:
                    ws.recv(timeout=30)
            assert ws.close_code == 1012, (ws.close_code, ws.close_reason)
    finally:
        stop_server(process)

"""A refusal the socket cannot take at once is sent whole before the connection closes.

The case arises when a client pipelines requests without reading the answers: the socket's
send buffer is full of them when the worker's main loop refuses the next request. How full it
is when that happens depends on timing, so a real socket pair has its buffer filled here, and
the worker's main loop is driven by hand.
"""

from __future__ import annotations

import selectors
import socket
import time

from extractor.server.buffering_worker import BufferedConn, BufferingThreadWorker
from extractor.server.intake import IntakeLimits, Refusal, refusal_bytes


def idle_worker() -> BufferingThreadWorker:
    """The state of a worker's main loop the refusal path uses, without a gunicorn arbiter."""
    worker = object.__new__(BufferingThreadWorker)
    worker.poller = selectors.DefaultSelector()
    worker.limits = IntakeLimits()
    worker.intakes = {}
    worker.lingering = {}
    worker.nr_conns = 1
    return worker


def test_a_refusal_behind_a_full_send_buffer_arrives_whole_then_the_close() -> None:
    worker = idle_worker()
    server, client = socket.socketpair()
    server.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)
    conn = BufferedConn(None, server, ("client", 0), ("server", 0))
    earlier = b""  # the earlier answers the client has not read
    while True:
        try:
            earlier += b"r" * server.send(b"r" * 1024)
        except BlockingIOError:
            break
    refusal = Refusal(400, "bad_request", "malformed request line")
    worker.refuse(conn, refusal)
    assert conn.unsent, "the buffer was full: part of the refusal must wait"

    client.settimeout(5)
    received = b""
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        for key, _ in worker.poller.select(0.05):
            key.data(key.fileobj)
        try:
            client.setblocking(False)
            chunk = client.recv(65536)
        except BlockingIOError:
            continue
        if not chunk:
            break
        received += chunk
    assert received == earlier + refusal_bytes(worker.limits, refusal)
    client.close()  # the server, lingering, sees the end of stream and closes its side
    for _ in range(20):
        for key, _ in worker.poller.select(0.05):
            key.data(key.fileobj)
        if worker.nr_conns == 0:
            break
    assert worker.nr_conns == 0 and not worker.lingering and server.fileno() == -1

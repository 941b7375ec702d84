"""A deadline on writing a reply, so a client that reads slowly cannot keep a thread forever.

Requests arrive whole before a thread sees them (``extractor.server.buffering_worker``), but the reply
is still written by the thread, with blocking sends: a client that stops reading a reply larger
than the sockets' buffers (a few MB on loopback) would hold that thread for good.
:class:`DeadlineSocket` stands in for the socket while a thread serves a request and gives the
whole reply a deadline that grows with what was sent, as a body's does: ``send_timeout``
seconds plus 1 s per ``min_rate`` bytes. Past it the send fails with ``TimeoutError``, the
worker closes the connection and the thread is free again.

Only the time spent waiting in sends counts, not the app's own time between them: a streamed
reply (Server-Sent Events of a transcription, each sent as its segment is decoded) may take
minutes to produce while its client reads every piece at once, and must not be cut for it.
"""

from __future__ import annotations

import time
from typing import Any

PIECE_BYTES = 256 * 1024  # one blocking send, each with what is left of the deadline


class DeadlineSocket:
    """``sock`` for the gunicorn response writer, its sends bounded by one growing deadline;
    everything else is the socket's own."""

    def __init__(self, sock: Any, send_timeout: float, min_rate: int) -> None:
        self._sock = sock
        self._spent = 0.0  # seconds spent waiting in sends so far; the app's time not counted
        self._send_timeout = send_timeout
        self._min_rate = max(min_rate, 1)
        self._sent = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self._sock, name)

    def _allow(self, size: int) -> float:
        """Set the socket's timeout to what the deadline leaves for ``size`` more bytes;
        the time the send starts."""
        budget = self._send_timeout + (self._sent + size) / self._min_rate
        left = budget - self._spent
        if left <= 0:
            raise TimeoutError("the client did not read its reply in time")
        self._sock.settimeout(left)
        return time.monotonic()

    def _done(self, started: float, sent: int) -> None:
        self._spent += time.monotonic() - started
        self._sent += sent

    def sendall(self, data: bytes | bytearray | memoryview) -> None:
        view = memoryview(data).cast("B")
        for start in range(0, len(view), PIECE_BYTES):
            piece = view[start : start + PIECE_BYTES]
            began = self._allow(len(piece))
            try:
                self._sock.sendall(piece)
            finally:
                self._done(began, 0)
            self._sent += len(piece)

    def send(self, data: bytes | bytearray | memoryview) -> int:
        began = self._allow(min(len(data), PIECE_BYTES))
        sent = 0
        try:
            sent = int(self._sock.send(data))
        finally:
            self._done(began, sent)
        return sent

    def sendfile(self, file: Any, offset: int = 0, count: int | None = None) -> int:
        began = self._allow(count or 0)
        sent = 0
        try:
            sent = int(self._sock.sendfile(file, offset, count))
        finally:
            self._done(began, sent)
        return sent

"""Webhook receivers that misbehave, on loopback, for the attack tests: one that answers 200
and streams a body without end, one whose headers never end, one that never answers, one that
drips its reply a byte at a time. Each is a threaded TCP server in the test process, bounded in
time (``HOLD_SECONDS``) and bytes so no test can hang on it, and counts what it saw."""

from __future__ import annotations

import socket
import socketserver
import threading
import time

HOLD_SECONDS = 60.0  # the longest any hostile connection is kept open
ENDLESS_LIMIT = 8 * 1024**3  # bytes an endless body stops at if nobody hangs up first
CHUNK = b"x" * 65536


def read_request(connection: socket.socket) -> bytes:
    """The request's head and as much of its body as Content-Length says (bounded)."""
    data = b""
    connection.settimeout(10)
    while b"\r\n\r\n" not in data and len(data) < 65536:
        part = connection.recv(65536)
        if not part:
            return data
        data += part
    head, _, body = data.partition(b"\r\n\r\n")
    length = 0
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            length = min(int(value.strip() or 0), 16 * 1024 * 1024)
    while len(body) < length:
        part = connection.recv(65536)
        if not part:
            break
        body += part
    return head + b"\r\n\r\n" + body


class Hostile:
    """A loopback server whose ``behave`` method plays one kind of bad receiver."""

    path = "/hook"

    def __init__(self, host: str = "127.0.0.1") -> None:
        hostile = self
        self.requests = 0
        self.sent = 0  # body bytes written, all connections together
        self.hung_up = 0  # connections the client closed while we were still sending
        self._closing = threading.Event()
        self._lock = threading.Lock()

        class Handler(socketserver.BaseRequestHandler):
            def handle(self) -> None:
                connection: socket.socket = self.request
                try:
                    read_request(connection)
                    with hostile._lock:
                        hostile.requests += 1
                    hostile.behave(connection)
                except OSError:
                    pass

        class Server(socketserver.ThreadingTCPServer):
            daemon_threads = True
            allow_reuse_address = True
            request_queue_size = 128

        self.server = Server((host, 0), Handler)
        self.host = host
        self.port: int = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}{self.path}"

    @property
    def origin(self) -> str:
        return f"http://{self.host}:{self.port}"

    def behave(self, connection: socket.socket) -> None:
        raise NotImplementedError

    def _count(self, sent: int) -> None:
        with self._lock:
            self.sent += sent

    def close(self) -> None:
        self._closing.set()
        self.server.shutdown()
        self.server.server_close()


class Endless(Hostile):
    """200, chunked, then 64 KiB chunks as fast as the client takes them, without end."""

    def behave(self, connection: socket.socket) -> None:
        connection.sendall(
            b"HTTP/1.1 200 OK\r\nContent-Type: application/octet-stream\r\n"
            b"Transfer-Encoding: chunked\r\n\r\n"
        )
        frame = b"%x\r\n" % len(CHUNK) + CHUNK + b"\r\n"
        sent = 0
        ends = time.monotonic() + HOLD_SECONDS
        connection.settimeout(5)
        try:
            while sent < ENDLESS_LIMIT and time.monotonic() < ends and not self._closing.is_set():
                connection.sendall(frame)
                sent += len(CHUNK)
        except OSError:  # the client hung up: what a bounded reader does
            with self._lock:
                self.hung_up += 1
        finally:
            self._count(sent)


class EndlessHeaders(Hostile):
    """200, then header lines without end: the reply's head never finishes."""

    def behave(self, connection: socket.socket) -> None:
        connection.sendall(b"HTTP/1.1 200 OK\r\n")
        line = b"X-Padding: " + b"a" * 1000 + b"\r\n"
        sent = 0
        ends = time.monotonic() + HOLD_SECONDS
        connection.settimeout(5)
        try:
            while sent < ENDLESS_LIMIT and time.monotonic() < ends and not self._closing.is_set():
                connection.sendall(line)
                sent += len(line)
        except OSError:
            with self._lock:
                self.hung_up += 1
        finally:
            self._count(sent)


class Hanging(Hostile):
    """Reads the request and never answers (until the client leaves or ``HOLD_SECONDS``)."""

    def behave(self, connection: socket.socket) -> None:
        connection.settimeout(0.5)
        ends = time.monotonic() + HOLD_SECONDS
        while time.monotonic() < ends and not self._closing.is_set():
            try:
                if not connection.recv(1024):
                    return  # the client hung up
            except TimeoutError:
                continue


class Dripping(Hostile):
    """Sends its reply's status line one byte a second (``every`` seconds per byte)."""

    every = 1.0

    def behave(self, connection: socket.socket) -> None:
        reply = b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n"
        ends = time.monotonic() + HOLD_SECONDS
        for byte in reply:
            if time.monotonic() > ends or self._closing.wait(self.every):
                return
            connection.sendall(bytes([byte]))
            self._count(1)


def status_of(process: int, field: str) -> int:
    """A ``/proc/<pid>/status`` figure in bytes (``VmRSS``, ``VmHWM``)."""
    with open(f"/proc/{process}/status") as status:
        for line in status:
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    raise LookupError(field)


def reset_peak(process: int) -> None:
    """Make the process's ``VmHWM`` its RSS now."""
    with open(f"/proc/{process}/clear_refs", "w") as refs:
        refs.write("5")

"""The labeling service's calls of extractors and prediction APIs (``LabelingClient``) against
replies without end: a 200 body, a gzip body that inflates without end, and error replies. Each
call stops at its limit (``max_reply_bytes``, or the 2 KiB excerpt of an error) and hangs up;
the process's peak memory stays within a few MB however much the server offers."""

from __future__ import annotations

import contextlib
import socket
import socketserver
import threading
import time
import zlib
from collections.abc import Iterator
from pathlib import Path

import pytest

from extractor.labeling.outbound import (
    LabelingClient,
    OutboundHTTPStatus,
    OutboundPolicy,
    OutboundReplyTooLarge,
    OutboundSettings,
)

MB = 1024 * 1024
HOLD_SECONDS = 30.0  # the longest the server streams one reply
LIMIT = 1 * MB  # max_reply_bytes of these calls


def _gzip_frames() -> tuple[bytes, bytes]:
    """A gzip stream's start and a frame that can follow itself forever: 1 MiB of zeros each,
    flushed, so after the first the compressor's window is the same every time."""
    zeros = bytes(MB)
    compressor = zlib.compressobj(9, zlib.DEFLATED, 31)
    first = compressor.compress(zeros) + compressor.flush(zlib.Z_SYNC_FLUSH)
    again = compressor.compress(zeros) + compressor.flush(zlib.Z_SYNC_FLUSH)
    assert compressor.compress(zeros) + compressor.flush(zlib.Z_SYNC_FLUSH) == again
    return first, again


class EndlessServer(socketserver.ThreadingTCPServer):
    """Answers every request with ``status`` and a chunked body that never ends; counts the
    bytes it managed to send and the connections the client closed on it."""

    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, status: int, gzip: bool = False) -> None:
        self.status, self.gzip = status, gzip
        self.sent = 0
        self.hung_up = 0
        self.lock = threading.Lock()
        super().__init__(("127.0.0.1", 0), EndlessHandler)
        threading.Thread(target=self.serve_forever, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}/predict"


class EndlessHandler(socketserver.BaseRequestHandler):
    server: EndlessServer

    def handle(self) -> None:
        connection: socket.socket = self.request
        connection.settimeout(5)
        head = b""
        while b"\r\n\r\n" not in head and len(head) < 65536:
            part = connection.recv(65536)
            if not part:
                return
            head += part
        server = self.server
        encoding = b"Content-Encoding: gzip\r\n" if server.gzip else b""
        connection.sendall(
            b"HTTP/1.1 %d Whatever\r\nContent-Type: application/json\r\n" % server.status
            + encoding
            + b"Transfer-Encoding: chunked\r\n\r\n"
        )
        first, again = _gzip_frames() if server.gzip else (b"{" + b" " * 65535, b" " * 65536)
        sent = 0
        ends = time.monotonic() + HOLD_SECONDS
        try:
            piece = first
            while time.monotonic() < ends:
                connection.sendall(b"%x\r\n" % len(piece) + piece + b"\r\n")
                sent += len(piece)
                piece = again
        except OSError:
            with server.lock:
                server.hung_up += 1
        finally:
            with server.lock:
                server.sent += sent


def _rss(field: str) -> int:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    raise LookupError(field)


@pytest.fixture
def client() -> Iterator[LabelingClient]:
    settings = OutboundSettings(
        connect_timeout=2, read_timeout=5, total_timeout=20, retries=1, backoff_base=0.01,
        max_reply_bytes=LIMIT,
    )  # fmt: skip
    with LabelingClient(OutboundPolicy("http://127.0.0.1:*"), settings) as outbound:
        yield outbound


@pytest.mark.serial  # the test process's peak RSS, measured alone
@pytest.mark.parametrize(
    ("status", "gzip", "error"),
    [
        (200, False, OutboundReplyTooLarge),
        (200, True, OutboundReplyTooLarge),  # inflates without end: bounded after inflating
        (500, False, OutboundHTTPStatus),  # retried once, an excerpt read each time
        (404, False, OutboundHTTPStatus),
    ],
)
def test_a_reply_without_end_is_cut_at_its_limit(
    client: LabelingClient, status: int, gzip: bool, error: type[Exception]
) -> None:
    if not Path("/proc/self/clear_refs").exists():
        pytest.skip("needs Linux's /proc")
    server = EndlessServer(status, gzip)
    with contextlib.suppress(error):  # warm: the first call loads what calls need
        client.post_json(server.url, {"w": 1}, secret="s")
    try:
        time.sleep(0.2)
        before = _rss("VmRSS")
        with open("/proc/self/clear_refs", "w") as refs:
            refs.write("5")
        started = time.monotonic()
        for _ in range(3):
            with pytest.raises(error) as raised:
                client.post_json(server.url, {"w": 1}, secret="s")
        took = time.monotonic() - started
        peak = _rss("VmHWM")
    finally:
        server.shutdown()
        server.server_close()
    if isinstance(raised.value, OutboundHTTPStatus):
        assert len(raised.value.body) <= 2048
    print(
        f"{status}{' gzip' if gzip else ''}: 3 calls in {took:.2f} s, the server sent"
        f" {server.sent / MB:.0f} MB, peak +{(peak - before) / MB:.1f} MB"
    )
    assert took < 10
    assert peak - before < 20 * MB

"""A client that stops reading its reply frees the thread serving it (extractor.server.reply_deadline).

No endpoint of either service replies with tens of MB on demand, so a minimal WSGI app serves
one here, under the real gunicorn worker both services run (one thread, a 2 s send timeout).
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from support import free_port

# serial: another client's wait is held to 8 s, measured alone (make test's second pass).
pytestmark = [pytest.mark.slow, pytest.mark.serial]

SERVER = """
import sys
import time
from extractor.server.intake import IntakeLimits
from extractor.server.application import serve

BIG = b"x" * (64 * 1024 * 1024)

def slowly():
    for piece in (b"one ", b"two ", b"three"):
        yield piece
        time.sleep(1.5)  # the app's own time: together longer than the 2 s send timeout

def app(environ, start_response):
    if environ["PATH_INFO"] == "/stream":
        start_response("200 OK", [("Content-Type", "text/plain")])
        return slowly()
    body = BIG if environ["PATH_INFO"] == "/big" else b"ok"
    start_response("200 OK", [("Content-Length", str(len(body)))])
    return [body]

serve(lambda: app, {"bind": sys.argv[1], "workers": 1, "threads": 1,
                    "worker_class": "extractor.server.buffering_worker.BufferingThreadWorker"},
      IntakeLimits(send_timeout=2.0, min_body_rate=10**9))
"""


@pytest.fixture()
def server(tmp_path: Path) -> Iterator[str]:
    """The app above under the real worker, with a 2 s send timeout."""
    script = tmp_path / "server.py"
    script.write_text(SERVER)
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    process = subprocess.Popen([sys.executable, str(script), f"127.0.0.1:{port}"],
                               start_new_session=True, stderr=subprocess.DEVNULL)  # fmt: skip
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                assert httpx.get(url + "/small", timeout=2).text == "ok"
                break
            except httpx.HTTPError:
                assert time.monotonic() < deadline and process.poll() is None
                time.sleep(0.2)
        yield url
    finally:
        os.killpg(process.pid, signal.SIGTERM)
        process.wait(30)


def test_a_reply_nobody_reads_is_cut_and_its_thread_freed(server: str) -> None:
    url = server
    port = int(url.rsplit(":", 1)[1])
    slow = socket.socket()
    slow.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    slow.connect(("127.0.0.1", port))
    slow.sendall(b"GET /big HTTP/1.1\r\nHost: s\r\n\r\n")  # and then read nothing
    time.sleep(0.5)
    started = time.monotonic()
    assert httpx.get(url + "/small", timeout=30).text == "ok"  # the one thread is back
    waited = time.monotonic() - started
    assert waited < 8, f"the other client waited {waited:.1f} s"
    received = 0
    slow.settimeout(10)
    try:
        while chunk := slow.recv(1 << 20):
            received += len(chunk)
    except ConnectionResetError:
        pass
    assert received < 64 * 1024 * 1024  # cut short, and the connection is closed
    slow.close()


def test_a_streamed_reply_is_not_cut_for_the_apps_own_time(server: str) -> None:
    """A reply produced piece by piece over longer than the send timeout (Server-Sent Events
    of a transcription) reaches a client that reads it: only time spent sending counts."""
    assert httpx.get(server + "/stream", timeout=30).text == "one two three"

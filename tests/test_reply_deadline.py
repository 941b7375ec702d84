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
from pathlib import Path

import httpx
import pytest
from support import free_port

# serial: another client's wait is held to 8 s, measured alone (make test's second pass).
pytestmark = [pytest.mark.slow, pytest.mark.serial]

SERVER = """
import sys
from extractor.server.intake import IntakeLimits
from extractor.server.application import serve

BIG = b"x" * (64 * 1024 * 1024)

def app(environ, start_response):
    body = BIG if environ["PATH_INFO"] == "/big" else b"ok"
    start_response("200 OK", [("Content-Length", str(len(body)))])
    return [body]

serve(lambda: app, {"bind": sys.argv[1], "workers": 1, "threads": 1,
                    "worker_class": "extractor.server.buffering_worker.BufferingThreadWorker"},
      IntakeLimits(send_timeout=2.0, min_body_rate=10**9))
"""


def test_a_reply_nobody_reads_is_cut_and_its_thread_freed(tmp_path: Path) -> None:
    script = tmp_path / "server.py"
    script.write_text(SERVER)
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    server = subprocess.Popen([sys.executable, str(script), f"127.0.0.1:{port}"],
                              start_new_session=True, stderr=subprocess.DEVNULL)  # fmt: skip
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                assert httpx.get(url + "/small", timeout=2).text == "ok"
                break
            except httpx.HTTPError:
                assert time.monotonic() < deadline and server.poll() is None
                time.sleep(0.2)
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
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        server.wait(30)

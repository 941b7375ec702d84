"""Helpers of the asynchronous job tests: a real ``extractor serve`` on its own job database, a
webhook receiver on loopback, and the client calls the tests make."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
from sqlalchemy import create_engine, make_url, text
from support import start_server, stop_server

WEBHOOK_SECRET = "webhook-secret-for-tests"
TERMINAL = ("succeeded", "failed", "cancelled")


def admin_sql(admin_url: str, statement: str) -> None:
    """Run one statement outside a transaction (CREATE/DROP DATABASE)."""
    engine = create_engine(admin_url, isolation_level="AUTOCOMMIT")
    try:
        with engine.connect() as connection:
            connection.execute(text(statement))
    finally:
        engine.dispose()


@contextmanager
def fresh_database(kind: str, tmp_path: Path, admin_url: str | None) -> Iterator[str]:
    """The URL of an empty job database of ``kind`` (sqlite or postgresql), dropped after."""
    if kind == "sqlite":
        yield f"sqlite:///{tmp_path / 'jobs.db'}"
        return
    assert admin_url is not None
    name = f"asyncjobs_{uuid.uuid4().hex[:12]}"
    admin_sql(admin_url, f'CREATE DATABASE "{name}"')
    try:
        yield make_url(admin_url).set(database=name).render_as_string(hide_password=False)
    finally:
        admin_sql(admin_url, f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@dataclass
class Server:
    """A running ``extractor serve`` (its whole process group) and its log file."""

    url: str
    process: subprocess.Popen[bytes]
    log: Path
    env: dict[str, str]

    def client(self, timeout: float = 60) -> httpx.Client:
        return httpx.Client(base_url=self.url, timeout=timeout)

    def kill(self) -> None:
        """SIGKILL every process of the server at once: nothing gets to clean up."""
        os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait()
        stop_server(self.process)  # dead already: this removes the job folder it was given

    def stop(self) -> None:
        stop_server(self.process)

    def log_text(self) -> str:
        return self.log.read_text(errors="replace")


def serve(tmp_path: Path, database_url: str, **settings: object) -> Server:
    """Start a server on ``database_url`` with ``EXTRACTOR_<NAME>`` settings on top of test
    defaults (one gunicorn worker, short leases, a webhook secret)."""
    env = {
        "EXTRACTOR_DATABASE_URL": database_url,
        "EXTRACTOR_WORKERS": "1",
        "EXTRACTOR_JOB_LEASE_SECONDS": "3",
        "EXTRACTOR_WEBHOOK_SECRET": WEBHOOK_SECRET,
        "EXTRACTOR_TMP_DIR": str(tmp_path),
        "EXTRACTOR_LOG_LEVEL": "info",
    }
    env.update({f"EXTRACTOR_{name.upper()}": str(value) for name, value in settings.items()})
    log = tmp_path / f"server-{uuid.uuid4().hex[:6]}.log"
    with log.open("wb") as sink:
        url, process = start_server(env=env, log=sink)
    return Server(url, process, log, env)


def restart(server: Server, tmp_path: Path) -> Server:
    """A new server with the same settings and database (after ``kill`` or ``stop``)."""
    log = tmp_path / f"server-{uuid.uuid4().hex[:6]}.log"
    with log.open("wb") as sink:
        url, process = start_server(env=server.env, log=sink)
    return Server(url, process, log, server.env)


def submit(
    client: httpx.Client,
    data: bytes,
    filename: str,
    *,
    params: dict[str, str] | None = None,
    form: dict[str, str] | None = None,
    headers: dict[str, str] | None = None,
    path: str = "/v1/jobs",
) -> httpx.Response:
    return client.post(
        path,
        params=params,
        data=form,
        files={"upload": (filename, data)},
        headers=headers,
    )


def wait_for(
    client: httpx.Client,
    job_id: str,
    done: Callable[[dict[str, Any]], bool] = lambda job: job["status"] in TERMINAL,
    timeout: float = 600,
    every: float = 0.2,
    seen: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """Poll the job until ``done`` says so; every job read is added to ``seen``."""
    deadline = time.monotonic() + timeout
    while True:
        reply = client.get(f"/v1/jobs/{job_id}")
        assert reply.status_code == 200, reply.text
        job: dict[str, Any] = reply.json()
        if seen is not None:
            seen.append(job)
        if done(job):
            return job
        assert time.monotonic() < deadline, f"job still {job['status']} after {timeout} s"
        time.sleep(every)


# -- a webhook receiver ---------------------------------------------------------------------


@dataclass
class Received:
    """One webhook call: its raw body, headers and when it arrived (monotonic)."""

    body: bytes
    headers: dict[str, str]
    at: float  # time.time() when it arrived

    def json(self) -> dict[str, Any]:
        loaded: dict[str, Any] = json.loads(self.body)
        return loaded


@dataclass
class Receiver:
    """A loopback HTTP server recording POSTs; answers ``statuses`` in turn (after ``delays``),
    then 204."""

    host: str = "127.0.0.1"
    statuses: list[int] = field(default_factory=list)
    delays: list[float] = field(default_factory=list)  # seconds before answering, in turn
    calls: list[Received] = field(default_factory=list)
    connections: int = 0

    def __post_init__(self) -> None:
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                receiver.calls.append(
                    Received(body, {k.lower(): v for k, v in self.headers.items()}, time.time())
                )
                if receiver.delays:
                    time.sleep(receiver.delays.pop(0))
                status = receiver.statuses.pop(0) if receiver.statuses else 204
                self.send_response(status)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args: object) -> None:
                pass

        class Counting(ThreadingHTTPServer):
            daemon_threads = True

            def get_request(self) -> Any:
                receiver.connections += 1
                return super().get_request()

        self.server = Counting((self.host, 0), Handler)
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}/hook"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()

"""What bench/async_jobs.py drives its servers with: a job client, a webhook receiver on
loopback, a process-group RSS sampler, and the Markdown it writes into bench/results.md."""

from __future__ import annotations

import hashlib
import hmac
import json
import re
import statistics
import threading
import time
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import TracebackType
from typing import Any

import httpx

from bench.server import Server, group_status_sums

SECRET = "bench-secret"
WEBHOOK_SECRET = "bench-webhook-secret"
ACTIVE = ("queued", "running")
START, END = "<!-- async-jobs -->", "<!-- /async-jobs -->"


def epoch(stamp: str) -> float:
    """An ISO 8601 time of the job JSON as seconds since the epoch (no zone: UTC)."""
    parsed = datetime.fromisoformat(stamp.replace("Z", "+00:00"))
    return (parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)).timestamp()


class JobClient:
    """``/v1/jobs`` and ``/extract`` of one server, with the bench's bearer secret."""

    def __init__(self, server: Server) -> None:
        self.server = server
        self.http = httpx.Client(
            base_url=f"http://{server.host}:{server.port}",
            headers={"Authorization": f"Bearer {SECRET}"},
            timeout=300,
        )

    def submit(self, name: str, data: bytes, **fields: str) -> dict[str, Any]:
        """POST /v1/jobs; the job JSON of its 202."""
        reply = self.http.post("/v1/jobs", files={"upload": (name, data)}, data=fields)
        assert reply.status_code == 202, (reply.status_code, reply.text[:500])
        return dict(reply.json())

    def job(self, job_id: str) -> dict[str, Any]:
        reply = self.http.get(f"/v1/jobs/{job_id}")
        assert reply.status_code == 200, (reply.status_code, reply.text[:500])
        job = dict(reply.json())
        if job.get("finished_at"):
            job["finished_at_epoch"] = epoch(job["finished_at"])
        return job

    def cancel(self, job_id: str) -> None:
        reply = self.http.delete(f"/v1/jobs/{job_id}")
        assert reply.status_code in (200, 202, 204, 404), (reply.status_code, reply.text[:500])

    def wait(self, job_id: str, timeout: float) -> dict[str, Any]:
        """Poll until the job has ended; the ended job."""
        deadline = time.monotonic() + timeout
        while (job := self.job(job_id))["status"] in ACTIVE:
            assert time.monotonic() < deadline, f"job still {job['status']} after {timeout} s"
            time.sleep(0.1)
        return job

    def wait_running(self, job_id: str, timeout: float = 300) -> None:
        """Poll until the job has started and made progress (so it is really loading the CPU)."""
        deadline = time.monotonic() + timeout
        while (job := self.job(job_id))["status"] != "running" or job["progress"] <= 0:
            assert job["status"] in ACTIVE, job
            assert time.monotonic() < deadline, f"job never ran: {job}"
            time.sleep(0.1)

    def extract(self, name: str, data: bytes) -> float:
        """Seconds of one synchronous POST /extract."""
        started = time.perf_counter()
        reply = self.http.post("/extract", files={"upload": (name, data)})
        assert reply.status_code == 200, (reply.status_code, reply.text[:500])
        return time.perf_counter() - started


class WebhookReceiver:
    """A loopback HTTP server that records when each signed job callback arrived."""

    def __init__(self, secret: str) -> None:
        self.secret = secret.encode()
        self.arrivals: dict[str, float] = {}
        self.bad: list[str] = []
        self.changed = threading.Condition()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                arrived = time.time()
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                expected = "sha256=" + hmac.new(receiver.secret, body, hashlib.sha256).hexdigest()
                signed = hmac.compare_digest(self.headers.get("X-Signature", ""), expected)
                self.send_response(200 if signed else 401)
                self.end_headers()
                job = json.loads(body)
                job_id = str(job.get("id") or job.get("job", {}).get("id"))
                with receiver.changed:
                    if signed:
                        receiver.arrivals.setdefault(job_id, arrived)
                    else:
                        receiver.bad.append(job_id)
                    receiver.changed.notify_all()

            def log_message(self, *_args: Any) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/hook"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def wait_for(self, job_id: str, timeout: float) -> float:
        """The arrival time (epoch seconds) of the job's first well-signed callback."""
        with self.changed:
            arrived = self.changed.wait_for(lambda: job_id in self.arrivals, timeout)
        assert not self.bad, f"callbacks with a bad signature: {self.bad}"
        assert arrived, f"no callback for {job_id} within {timeout} s"
        return self.arrivals[job_id]

    def __enter__(self) -> WebhookReceiver:
        self.thread.start()
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


class RssSampler:
    """Samples each server's process-group RSS every 50 ms on a thread; keeps the peaks."""

    def __init__(self, servers: dict[str, Server]) -> None:
        self.servers = dict(servers)
        self.peaks: dict[str, int] = dict.fromkeys(servers, 0)
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def add(self, name: str, server: Server) -> None:
        self.servers[name] = server
        self.peaks.setdefault(name, 0)

    def _run(self) -> None:
        while not self.stop.wait(0.05):
            for name, server in list(self.servers.items()):
                if server.process is None or server.process.poll() is not None:
                    continue
                rss = group_status_sums(server.process.pid, "VmRSS")["VmRSS"]
                self.peaks[name] = max(self.peaks[name], rss)

    def peaks_mb(self) -> dict[str, float]:
        return {name: kb / 1024 for name, kb in self.peaks.items()}

    def __enter__(self) -> RssSampler:
        self.thread.start()
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop.set()
        self.thread.join()


def spread(values: list[float], unit: str = "s") -> str:
    """``median (min-max)`` of seconds (as ms under 10 s) or of plain figures (``unit=''``)."""
    low, mid, high = min(values), statistics.median(values), max(values)
    if unit == "s" and high < 10:
        return f"median {mid * 1000:.0f} ms (min {low * 1000:.0f}, max {high * 1000:.0f})"
    suffix = f" {unit}" if unit else ""
    return f"median {mid:.2f}{suffix} (min {low:.2f}, max {high:.2f})"


def write_section(out: Path, rows: list[str], *, minutes: float, machine_cores_busy: float) -> None:
    """Put the rows between the async-jobs markers of ``out`` (appended when absent)."""
    section = "\n".join(
        [
            START,
            "## Asynchronous jobs (issue 21)",
            "",
            f"`python -m bench.async_jobs` (part of `make bench`): real servers on loopback, "
            f"a throwaway PostgreSQL for the replicas, a loopback webhook receiver; took "
            f"{minutes:.1f} min; the machine's cores were {machine_cores_busy:.2f} busy on "
            f"average meanwhile (this bench included). Shared, loaded machine: figures are "
            f"medians with min and max, and absolute times move from run to run.",
            "",
            "| what | measured | target | met? |",
            "|---|---|---|---|",
            *rows,
            END,
        ]
    )
    text = out.read_text() if out.exists() else ""
    pattern = re.compile(re.escape(START) + ".*?" + re.escape(END), re.S)
    if pattern.search(text):
        text = pattern.sub(lambda _match: section, text)
    else:
        text = text.rstrip("\n") + "\n\n" + section
    out.write_text(text + ("" if text.endswith("\n") else "\n"))

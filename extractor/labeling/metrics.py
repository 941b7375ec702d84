"""Prometheus metrics of the labeling service.

Job counts come from the database at scrape time, so every server and worker process, on any
machine, reports the same truth without adding anything up. What only a process sees (how long
a job waited to be claimed, how outbound calls ended) is counted where it happens: under
``extractor labeling serve`` in prometheus-client's multiprocess mode, summed over the gunicorn
workers like the extractor's; a separate ``extractor labeling worker`` serves its own numbers
on ``--metrics-bind``.

Labels come from closed sets (job kinds, statuses, call targets, outcomes), never from user data.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest, multiprocess
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from extractor.metrics_dir import MULTIPROC_ENV, TEXT_FORMAT

if TYPE_CHECKING:
    from extractor.jobs import JobQueue

# Seconds: an idle worker claims within a poll interval; a busy service can queue for hours.
CLAIM_BUCKETS = (0.1, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 900, 3600, 4 * 3600)

# This process's own numbers, apart from the extractor's (both can live in one process in tests).
PROCESS = CollectorRegistry(auto_describe=True)
CLAIM_LATENCY = Histogram(
    "labeling_job_claim_latency_seconds",
    "Seconds from a job's creation (or its release by a stopping worker) to its claim.",
    ("kind",),
    buckets=CLAIM_BUCKETS,
    registry=PROCESS,
)
OUTBOUND_CALLS = Counter(
    "labeling_outbound_calls",
    "Calls to extractors and prediction APIs, by target and how they ended.",
    ("target", "outcome"),
    registry=PROCESS,
)
# The outcomes an outbound call is counted under.
OUTCOMES = ("ok", "http_error", "refused", "timeout", "bad_reply", "error")


class JobsCollector(Collector):
    """``labeling_jobs{kind,status}`` and ``labeling_queue_depth``, counted by the job queue."""

    def __init__(self, queue: JobQueue) -> None:
        self.queue = queue

    def collect(self) -> Iterator[GaugeMetricFamily]:
        jobs = GaugeMetricFamily(
            "labeling_jobs", "Jobs in the database, by kind and status.", labels=("kind", "status")
        )
        queued = 0
        for (kind, status), count in sorted(self.queue.counts().items()):
            jobs.add_metric((kind, status), count)
            if status == "QUEUED":
                queued += count
        yield jobs
        yield GaugeMetricFamily(
            "labeling_queue_depth", "Jobs waiting for a worker (status QUEUED).", value=queued
        )


def exposition(queue: JobQueue) -> bytes:
    """One scrape: the processes' own numbers, then the job counts from the database."""
    if os.environ.get(MULTIPROC_ENV):
        process = CollectorRegistry()
        multiprocess.MultiProcessCollector(process)
    else:
        process = PROCESS
    jobs = CollectorRegistry()
    jobs.register(JobsCollector(queue))
    return generate_latest(process) + generate_latest(jobs)


def count_call(target: str, outcome: str) -> None:
    OUTBOUND_CALLS.labels(target, outcome if outcome in OUTCOMES else "error").inc()


def observe_claim(kind: str, waited_seconds: float) -> None:
    CLAIM_LATENCY.labels(kind).observe(max(waited_seconds, 0.0))


def serve_worker_metrics(bind: str, queue: JobQueue) -> Any:
    """Serve a stand-alone worker's metrics on ``bind`` (HOST:PORT) from a daemon thread."""
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
    from threading import Thread

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            if self.path.split("?")[0] != "/metrics":
                self.send_error(404)
                return
            body = exposition(queue)
            self.send_response(200)
            self.send_header("Content-Type", TEXT_FORMAT)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *_args: Any) -> None:  # scrapes are not worth a log line each
            pass

    host, _, port = bind.rpartition(":")
    server = ThreadingHTTPServer((host.strip("[]") or "127.0.0.1", int(port)), Handler)
    Thread(target=server.serve_forever, name="metrics", daemon=True).start()
    return server

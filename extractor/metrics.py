"""Prometheus metrics of the extractor, added up across gunicorn workers.

gunicorn runs several worker processes and a scrape reaches only one of them, so the numbers are
kept in prometheus-client's multiprocess mode: ``extractor serve`` gives every worker one shared
directory (``PROMETHEUS_MULTIPROC_DIR``, set before any worker imports prometheus-client) and
``/metrics`` sums the files of all workers, the dead ones' counters included. Without that
variable (tests with a Flask test client, ``extractor extract``) the process registry is used.

Every label takes its value from a small closed set (the route rule, never the raw path; a
media kind; a format name; a status code; the name of an API key the operator configured,
never the key), so no client can grow the number of series.
"""

from __future__ import annotations

import os
from collections.abc import Iterable

from prometheus_client import (
    REGISTRY,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    multiprocess,
)
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector

from .metrics_dir import MULTIPROC_ENV

# Seconds: health checks take milliseconds, a long recording or a big PDF many minutes.
LATENCY_BUCKETS = (0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 900)

REQUESTS = Counter(
    "extractor_requests",
    "Requests answered, by route, media kind, reply format, HTTP status and API key name"
    " (`shared`: the shared secret; `none`: no credential, or none needed).",
    ("route", "kind", "format", "status", "key"),
)
LATENCY = Histogram(
    "extractor_request_duration_seconds",
    "Wall time from the request's first byte to its reply, by route.",
    ("route",),
    buckets=LATENCY_BUCKETS,
)
ENGINE_SECONDS = Histogram(
    "extractor_engine_seconds",
    "Time spent in the OCR or speech engine for one request, by media kind.",
    ("kind",),
    buckets=LATENCY_BUCKETS,
)
QUEUE_DEPTH = Gauge(
    "extractor_queue_depth",
    "Extractions running or waiting for an engine slot, summed over live workers.",
    multiprocess_mode="livesum",
)
BUSY_REFUSALS = Counter(
    "extractor_busy_refusals",
    "Requests refused with 503 because every engine slot and queue place was taken.",
)
AUDIO_SECONDS = Counter("extractor_audio_seconds", "Seconds of audio transcribed.")
PAGES = Counter("extractor_pages", "Pages (image frames, PDF pages) OCR'd.")
ENGINE_LOAD_SECONDS = Gauge(
    "extractor_engine_load_seconds",
    "Seconds the newest worker took to load and warm its engines.",
    multiprocess_mode="mostrecent",
)
JOB_WEBHOOKS = Counter(
    "extractor_job_webhooks",
    "Webhook attempts of asynchronous jobs, by outcome: delivered, retry (to be tried again),"
    " failed (given up).",
    ("outcome",),
)
# Collectors whose numbers are read at scrape time rather than counted by each worker (the job
# queue's depth and jobs by status, which live in the job database): added by the app.
SCRAPED: dict[str, Collector] = {}


def registry() -> CollectorRegistry:
    """What a scrape shows: every worker's numbers under gunicorn, this process's otherwise,
    plus the ``SCRAPED`` collectors."""
    collected = CollectorRegistry()
    if os.environ.get(MULTIPROC_ENV):
        multiprocess.MultiProcessCollector(collected)
    else:
        collected.register(_Everything())
    for collector in SCRAPED.values():
        collected.register(collector)
    return collected


class _Everything(Collector):
    """This process's default registry, as one collector of another registry."""

    def collect(self) -> Iterable[Metric]:
        return REGISTRY.collect()


# -- the gunicorn side --------------------------------------------------------------------------


def worker_exited(pid: int) -> None:
    """Drop a dead worker's live gauges (its counters stay in the sums)."""
    if os.environ.get(MULTIPROC_ENV):
        multiprocess.mark_process_dead(pid)

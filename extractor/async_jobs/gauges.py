"""The job database's numbers for ``/metrics``: jobs by status and the queue's depth.

Read from the database at scrape time, so every server shows the same totals for the whole
queue (use ``max`` across replicas, not ``sum``); counted per worker they would miss the jobs of
other servers and drift when a server dies.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

from prometheus_client.core import GaugeMetricFamily
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector

from extractor.async_jobs.errors import JobsUnavailable
from extractor.async_jobs.light import STATUS_NAMES, JobSystem

log = logging.getLogger(__name__)


class JobGauges(Collector):
    """``extractor_jobs{status}`` and ``extractor_jobs_queue_depth``, read at each scrape."""

    def __init__(self, system: JobSystem) -> None:
        self.system = system

    def describe(self) -> Iterable[Metric]:
        """The metrics' names without asking the database (a registry asks when it is made)."""
        return self._families({})

    def collect(self) -> Iterable[Metric]:
        if self.system.idle():
            return self._families({})  # no job at all: every count is 0
        from extractor.async_jobs.extraction_jobs import KIND
        from extractor.jobs import StorageError

        try:
            counts = self.system.jobs().queue.counts()
        except (StorageError, JobsUnavailable):
            log.warning("no job numbers for this scrape: the job database is not answering")
            return []
        by_status = {status: n for (kind, status), n in counts.items() if kind == KIND}
        return self._families(by_status)

    @staticmethod
    def _families(by_status: dict[str, int]) -> list[Metric]:
        jobs = GaugeMetricFamily(
            "extractor_jobs",
            "Asynchronous extraction jobs in the job database, by status (every server shows"
            " the whole queue's).",
            labels=["status"],
        )
        for status, name in STATUS_NAMES.items():
            jobs.add_metric([name], by_status.get(status, 0))
        depth = GaugeMetricFamily(
            "extractor_jobs_queue_depth",
            "Asynchronous extraction jobs waiting for a worker (queued).",
            value=by_status.get("QUEUED", 0),
        )
        return [jobs, depth]

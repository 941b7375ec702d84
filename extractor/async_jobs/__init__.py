"""Asynchronous extraction jobs (issue 21): ``POST /v1/jobs`` answers 202 at once, the job runs
on a worker thread of some ``extractor serve`` process sharing the job database, and the result
is read later (``GET /v1/jobs/{id}/result``) or announced by a signed webhook.

Modules: ``routes`` (the HTTP side), ``extraction_jobs`` (submit, read, cancel, purge),
``store`` (the tables and why uploads and results live in the database), ``handler`` and
``work`` (running one job), ``documents`` (a Document stored and read back equal),
``webhook`` and ``deliveries`` (signed calls through the SSRF guard, retried),
``runtime`` (the threads of one process), ``gauges`` (metrics read from the database).
"""

from __future__ import annotations

from flask import Flask

from .. import metrics
from ..config import Settings
from ..service import Extractor
from .extraction_jobs import ExtractionJobs
from .gauges import JobGauges
from .routes import blueprint
from .runtime import JobRuntime
from .work import ExtractionWork


def install_jobs(app: Flask, settings: Settings, extractor: Extractor) -> None:
    """Add the job routes and what runs jobs to ``app``; the threads start with
    ``app.extensions["job_runtime"].start()`` (gunicorn does it once the engines are loaded)."""
    jobs = ExtractionJobs(settings)
    work = ExtractionWork(extractor)
    app.extensions["async_jobs"] = jobs
    app.extensions["job_work"] = work
    app.extensions["job_runtime"] = JobRuntime(settings, jobs, work)
    metrics.SCRAPED["jobs"] = JobGauges(jobs)
    app.register_blueprint(blueprint)

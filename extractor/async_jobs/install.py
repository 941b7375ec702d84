"""Adding asynchronous jobs to the extractor's Flask app (kept out of the package's
``__init__`` so ``extractor submit`` imports no engine)."""

from __future__ import annotations

from flask import Flask

from extractor import metrics
from extractor.async_jobs.extraction_jobs import ExtractionJobs
from extractor.async_jobs.gauges import JobGauges
from extractor.async_jobs.routes import blueprint
from extractor.async_jobs.runtime import JobRuntime
from extractor.async_jobs.work import ExtractionWork
from extractor.config import Settings
from extractor.pipeline.extraction import Extractor


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

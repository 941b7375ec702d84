"""Adding what runs asynchronous jobs to the extractor's Flask app (kept out of the package's
``__init__`` so ``extractor submit`` imports no engine); their routes are ``web/jobs.py``."""

from __future__ import annotations

from flask import Flask

from extractor import metrics
from extractor.async_jobs.gauges import JobGauges
from extractor.async_jobs.light import JobSystem
from extractor.async_jobs.runtime import JobRuntime
from extractor.config import Settings
from extractor.pipeline.extraction import Extractor


def install_jobs(app: Flask, settings: Settings, extractor: Extractor) -> None:
    """Add what runs jobs to ``app`` (the job system its routes read); the threads start with
    ``app.extensions["job_runtime"].start()`` (gunicorn does it once the engines are loaded)."""
    system = JobSystem(settings, extractor)  # SQLAlchemy imported on first use (light.py)
    app.extensions["async_jobs"] = system
    app.extensions["job_runtime"] = JobRuntime(settings, system)
    metrics.SCRAPED["jobs"] = JobGauges(system)

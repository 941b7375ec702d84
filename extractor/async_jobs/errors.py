"""What the asynchronous job routes answer besides the extraction's own errors."""

from __future__ import annotations

from extractor.errors import ExtractorError


class JobNotFound(ExtractorError):
    """No such job: never made, deleted, or past EXTRACTOR_JOB_TTL_SECONDS."""

    status, code = 404, "job_not_found"


class JobNotFinished(ExtractorError):
    """The result of a job that has not succeeded (yet)."""

    status, code = 409, "job_not_finished"


class TooManyJobs(ExtractorError):
    """The client has EXTRACTOR_MAX_QUEUED_JOBS_PER_CLIENT jobs waiting already."""

    status, code = 429, "too_many_jobs"


class JobsUnavailable(ExtractorError):
    """The job database cannot be reached (a 503: retry later)."""

    status, code = 503, "jobs_unavailable"
    headers = {"Retry-After": "5"}


class InvalidCallback(ExtractorError):
    """A callback_url that is not http(s), that the SSRF guard refuses, or given without a
    webhook secret to sign its calls with."""

    status, code = 400, "invalid_callback_url"

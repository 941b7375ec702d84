"""What the job queue raises, and what a job handler raises to end or leave its job."""

from __future__ import annotations

from typing import Any


class StorageError(Exception):
    """The database failed; a session source translates its driver's errors into this (or a
    subclass), so workers can tell "retry later" from a broken job."""


class JobFailure(Exception):
    """A job cannot finish; its message and ``details`` become the job's error entry.

    Messages are written for the user who polls the job: they name the document, batch or URL
    involved, never a secret and never a Python traceback.
    """

    def __init__(self, message: str, **details: Any) -> None:
        super().__init__(message)
        self.message = message
        self.details = details


class JobInterrupted(Exception):
    """The worker lost its lease, the job was cancelled, or the worker is stopping: leave the
    job (another worker resumes it, unless it was cancelled)."""


class JobYielded(JobInterrupted):
    """The job hands its worker to another tenant's waiting job; it is released, not failed."""


class OwnerCapReached(Exception):
    """An owner already has ``cap`` unfinished jobs: the new one is refused (callers answer 429
    or their own limit error)."""

    def __init__(self, unfinished: int, cap: int) -> None:
        super().__init__(f"{unfinished} unfinished jobs; the most allowed is {cap}")
        self.unfinished = unfinished
        self.cap = cap

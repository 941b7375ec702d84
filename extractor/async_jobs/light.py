"""The job system without SQLAlchemy until a job needs it.

Importing SQLAlchemy and its ORM costs a worker ~20 MB that it holds for life, and it is a
ready worker's largest cost after the models (bench/memory.md, "SQLAlchemy in a ready worker":
every peak 21-25 MB lower without it). A worker needs the queue only once there is a job:
one submitted to it, or one in the database for its job threads (queued, running, a webhook
to send, an ended job to delete when it expires). So, on a SQLite job database
(EXTRACTOR_DATABASE_URL unset, or a ``sqlite:///`` file), a ready worker looks with the
standard library's ``sqlite3`` whether the ``jobs`` table holds any row, every poll; the first
time it does, or a job route is used, the job system is imported and started as before, and
stays so for the worker's life. Any other database (PostgreSQL) is opened at start, as before.
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Callable
from contextlib import closing
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import unquote

from extractor.config import Settings
from extractor.library_pages import release_mapped_library_pages

if TYPE_CHECKING:
    from extractor.async_jobs.extraction_jobs import ExtractionJobs
    from extractor.async_jobs.work import ExtractionWork
    from extractor.pipeline.extraction import Extractor


# What the API calls the queue's statuses, by the status as stored (``jobs.JobStatus``'s values;
# tests/async_jobs/test_light.py holds them equal).
STATUS_NAMES = {
    "QUEUED": "queued",
    "IN_PROGRESS": "running",
    "DELIVERED": "succeeded",
    "FAILED": "failed",
    "CANCELLED": "cancelled",
}


def sqlite_database(settings: Settings) -> Path | None:
    """The SQLite job database's file (EXTRACTOR_DATABASE_URL unset, or ``sqlite:///FILE``),
    the file SQLAlchemy's ``make_url`` names (its path percent-decoded); None, so that the job
    system loads at start, for any other database (PostgreSQL), an in-memory one, or a URL
    whose name the driver reads as a URI (``?uri=true``): a watcher looking at another file
    than the queue's would never see a job."""
    url = settings.job_database_url
    if not url.startswith("sqlite:///"):
        return None
    name, _, query = url[len("sqlite:///") :].partition("?")
    if "uri=" in query:
        return None
    name = unquote(name)
    return None if name in ("", ":memory:") else Path(name)


def any_job(path: Path) -> bool:
    """Whether the job database at ``path`` holds any job, read without SQLAlchemy (no file or
    no table yet: none). An unreadable database raises ``sqlite3.Error``."""
    if not path.exists():
        return False
    with closing(sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=30)) as db:
        try:
            return db.execute("SELECT 1 FROM jobs LIMIT 1").fetchone() is not None
        except sqlite3.OperationalError as exc:
            if "no such table" in str(exc):
                return False
            raise


class JobSystem:
    """A worker's ``ExtractionJobs`` and ``ExtractionWork``, made (and SQLAlchemy imported) on
    first use; ``on_first_use`` is called once then (the runtime starts its threads)."""

    def __init__(self, settings: Settings, extractor: Extractor) -> None:
        self.settings = settings
        self.extractor = extractor
        self.sqlite_path = sqlite_database(settings)  # None: not SQLite, loaded at start
        self._jobs: ExtractionJobs | None = None
        self._work: ExtractionWork | None = None
        self._lock = threading.Lock()
        self.on_first_use: Callable[[], None] = lambda: None

    @property
    def loaded(self) -> bool:
        return self._jobs is not None

    def idle(self) -> bool:
        """Not loaded, on SQLite, and no job in its database: nothing needs the job system yet
        (a database ``sqlite3`` cannot read is not idle: the job system says what is wrong)."""
        if self.loaded or self.sqlite_path is None:
            return False
        try:
            return not any_job(self.sqlite_path)
        except sqlite3.Error:
            return False

    def jobs(self) -> ExtractionJobs:
        self._load()
        assert self._jobs is not None
        return self._jobs

    def work(self) -> ExtractionWork:
        self._load()
        assert self._work is not None
        return self._work

    def _load(self) -> None:
        if self._jobs is not None:
            return
        with self._lock:
            if self._jobs is not None:
                return
            from extractor.async_jobs.extraction_jobs import ExtractionJobs
            from extractor.async_jobs.work import ExtractionWork

            self._work = ExtractionWork(self.extractor)
            self._jobs = ExtractionJobs(self.settings)
            if self.settings.release_library_pages:  # SQLAlchemy's imports ran once
                release_mapped_library_pages()
        self.on_first_use()

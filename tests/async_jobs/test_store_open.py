"""Opening the job database from many processes at once: the workers of a server, and the
replicas of a deployment, start together on one fresh PostgreSQL and all create the tables.
PostgreSQL's catalog lets only one CREATE TABLE of a name through; the others used to fail
(duplicate pg_type row) and leave their process with asynchronous jobs off for good."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest
from jobs_support import fresh_database
from sqlalchemy import inspect

from extractor.async_jobs.store import open_database
from extractor.jobs.db import Database

OPENERS = 8  # as many as the workers of a few replicas starting at once


@pytest.mark.postgres
def test_servers_starting_together_all_open_the_database(
    tmp_path: Path, postgres_admin_url: str
) -> None:
    with fresh_database("postgresql", tmp_path, postgres_admin_url) as url:
        start = threading.Barrier(OPENERS)
        opened: list[Database] = []
        failures: list[BaseException] = []

        def open_at_once() -> None:
            start.wait()
            try:
                opened.append(open_database(url))
            except BaseException as exc:  # collected and reported below
                failures.append(exc)

        threads = [threading.Thread(target=open_at_once) for _ in range(OPENERS)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=120)
        try:
            assert not failures, failures[0]
            assert len(opened) == OPENERS
            tables = set(inspect(opened[0].engine).get_table_names())
            assert {"jobs", "job_uploads", "job_results", "extraction_jobs"} <= tables
        finally:
            for db in opened:
                db.dispose()

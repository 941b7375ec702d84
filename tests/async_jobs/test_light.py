"""A worker imports the job system (SQLAlchemy, ~20 MB) only once there is a job: real servers
on one SQLite job database (extractor/async_jobs/light.py)."""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path

import pytest
from jobs_support import serve, submit, wait_for

from extractor import samples
from extractor.async_jobs.light import STATUS_NAMES, any_job, sqlite_database
from extractor.jobs import JobStatus


def test_the_light_status_names_are_the_queue_statuses() -> None:
    assert set(STATUS_NAMES) == {status.value for status in JobStatus}


def test_the_watched_file_is_the_one_sqlalchemy_opens(tmp_path: Path) -> None:
    from sqlalchemy import make_url

    from extractor.config import Settings

    def watched(url: str) -> Path | None:
        return sqlite_database(Settings.load(environ={"EXTRACTOR_DATABASE_URL": url}))

    for url in (
        f"sqlite:///{tmp_path}/jobs.db",
        f"sqlite:///{tmp_path}/a%20b/jobs.db",  # percent-encoded, as make_url decodes it
        f"sqlite:///{tmp_path}/jobs.db?timeout=20",
        "sqlite:///relative/jobs.db",
    ):
        assert watched(url) == Path(str(make_url(url).database)), url
    # None: the job system loads at start, as for PostgreSQL.
    assert watched(f"sqlite:///file:{tmp_path}/jobs.db?uri=true") is None
    assert watched("sqlite:///:memory:") is None
    assert watched("sqlite://") is None
    assert watched("postgresql+psycopg://u:p@127.0.0.1:5432/jobs") is None


def test_any_job_reads_the_queue_without_sqlalchemy(tmp_path: Path) -> None:
    from extractor.async_jobs.store import open_database

    path = tmp_path / "jobs.db"
    assert not any_job(path)  # no file yet
    db = open_database(f"sqlite:///{path}")  # the tables, in WAL mode
    try:
        assert not any_job(path)  # read while another connection holds the WAL files
    finally:
        db.dispose()
    assert not any_job(path)  # and once nobody has it open
    with sqlite3.connect(path) as raw:
        raw.execute(
            "INSERT INTO jobs (id, kind, owner_id, tenant, status, progress, errors, payload,"
            " attempts, run_seconds, created_at, updated_at) VALUES ('j', 'Extraction', 'o',"
            " 't', 'QUEUED', 0, '[]', '{}', 0, 0, '2026-01-01', '2026-01-01')"
        )
    assert any_job(path)


def worker_maps_sqlalchemy(master: int) -> bool:
    """Whether the server's one gunicorn worker has SQLAlchemy's compiled modules mapped."""
    from test_speed import worker_pids

    (worker,) = worker_pids(master)
    return "sqlalchemy" in Path(f"/proc/{worker}/maps").read_text()


@pytest.mark.slow  # a server or CLI process: make test runs it, make test-fast does not
def test_a_worker_loads_the_job_system_for_a_job_queued_by_another_server(
    tmp_path: Path,
) -> None:
    database = f"sqlite:///{tmp_path / 'jobs.db'}"
    runner = serve(tmp_path, database)  # runs jobs; has seen none yet
    queuer = serve(tmp_path, database, job_workers=0)  # only queues them
    try:
        with runner.client() as http:
            assert not worker_maps_sqlalchemy(runner.process.pid)
            page = samples.encode_image(samples.text_page(["Seven quiet wizards"]).image, "PNG")
            assert http.post("/extract", files={"upload": ("a.png", page)}).status_code == 200
            metrics = http.get("/metrics").text
            assert 'extractor_jobs{status="queued"} 0.0' in metrics
            assert not worker_maps_sqlalchemy(runner.process.pid)
        with queuer.client() as http:
            reply = submit(http, page, "a.png")
            assert reply.status_code == 202, reply.text
            job = wait_for(http, reply.json()["id"], timeout=120)
        assert job["status"] == "succeeded", job
        assert worker_maps_sqlalchemy(runner.process.pid)  # its watcher found the job
        assert "extraction-job" in runner.log_text()
    finally:
        queuer.stop()
        runner.stop()


def test_a_job_route_loads_the_job_system_at_once(tmp_path: Path) -> None:
    server = serve(tmp_path, f"sqlite:///{tmp_path / 'jobs.db'}")
    try:
        with server.client() as http:
            assert not worker_maps_sqlalchemy(server.process.pid)
            reply = http.get("/v1/jobs")
            assert reply.status_code in (200, 401), reply.text
            assert worker_maps_sqlalchemy(server.process.pid)
            started = time.monotonic()
            while "extraction-job" not in server.log_text():
                assert time.monotonic() - started < 30, server.log_text()[-2000:]
                time.sleep(0.1)
    finally:
        server.stop()

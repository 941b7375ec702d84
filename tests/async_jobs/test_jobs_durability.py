"""A job whose server is killed with SIGKILL mid-run finishes after a restart on the same data,
or on another server sharing the PostgreSQL database: never lost, never finished twice, its
upload deleted once it ends. Real gunicorn servers, a real SIGKILL of the whole process group.
"""

from __future__ import annotations

import time
import uuid
from pathlib import Path

import pytest
from jobs_support import Server, admin_sql, fresh_database, restart, serve, submit, wait_for
from sqlalchemy import create_engine, make_url, text
from support import PAGE_ONE, PAGE_TWO

from extractor import samples

pytestmark = pytest.mark.slow  # real servers and engines: make test, not test-fast

PAGES = 8


@pytest.mark.parametrize(
    ("database", "taken_over_by"),
    [("sqlite", "restart"), ("postgresql", "restart"), ("postgresql", "another server")],
)
def test_a_job_killed_mid_run_finishes_once(
    request: pytest.FixtureRequest, tmp_path: Path, database: str, taken_over_by: str
) -> None:
    admin = request.getfixturevalue("postgres_admin_url") if database == "postgresql" else None
    pages = [samples.text_page(PAGE_ONE if i % 2 else PAGE_TWO, page=i) for i in range(PAGES)]
    pdf = samples.pdf(pages)
    with fresh_database(database, tmp_path, admin) as url:
        first = serve(tmp_path, url, job_workers=1)
        servers: list[Server] = [first]
        try:
            with first.client() as client:
                job = submit(client, pdf, "eight.pdf", params={"ocr_rotate": "off"}).json()
                running = wait_for(
                    client, job["id"], lambda j: j["status"] == "running" and j["progress"] > 0
                )
            assert running["progress"] < 1
            first.kill()
            if taken_over_by == "restart":
                second = restart(first, tmp_path)
            else:
                second = serve(tmp_path, url, job_workers=1)  # a replica of its own
            servers.append(second)
            with second.client() as client:
                done = wait_for(client, job["id"])
                assert done["status"] == "succeeded", done
                assert done["attempts"] == 2  # the killed run, then the one that finished
                stored = client.get(f"/v1/jobs/{job['id']}/result?format=alto")
                sync = client.post(
                    "/extract?ocr_rotate=off&format=alto", files={"upload": ("eight.pdf", pdf)}
                )
            assert stored.status_code == 200 and stored.content == sync.content  # every page
            logs = first.log_text() + second.log_text()
            assert logs.count(f"job {job['id']} succeeded") == 1
            engine = create_engine(url)
            try:
                with engine.connect() as connection:
                    left = connection.execute(
                        text("SELECT count(*) FROM job_uploads WHERE job_id = :id"),
                        {"id": job["id"]},
                    ).scalar_one()
            finally:
                engine.dispose()
            assert left == 0  # the upload went when the job ended
        finally:
            for server in servers:
                if server.process.poll() is None:
                    server.stop()


@pytest.mark.postgres
def test_a_server_started_before_its_database_runs_jobs_once_it_exists(
    request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    admin = request.getfixturevalue("postgres_admin_url")
    name = f"asyncjobs_late_{uuid.uuid4().hex[:8]}"
    url = make_url(admin).set(database=name).render_as_string(hide_password=False)
    png = samples.encode_image(samples.text_page(PAGE_ONE).image, "PNG")
    server = serve(tmp_path, url, job_workers=1)  # its database does not exist yet
    try:
        with server.client() as client:
            assert client.get("/readyz").status_code == 200  # /extract works meanwhile
            early = submit(client, png, "early.png")
            assert early.status_code == 503, early.text
            assert early.json()["error"]["code"] == "jobs_unavailable"
            admin_sql(admin, f'CREATE DATABASE "{name}"')
            deadline = time.monotonic() + 60
            while (reply := submit(client, png, "late.png")).status_code == 503:
                assert time.monotonic() < deadline, reply.text
                time.sleep(1)
            assert reply.status_code == 202, reply.text
            assert wait_for(client, reply.json()["id"], timeout=120)["status"] == "succeeded"
    finally:
        server.stop()
        admin_sql(admin, f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')

"""Labeling jobs through the service: a restart in the middle of a job, and workers in separate
processes that never take the same job (``SELECT ... FOR UPDATE SKIP LOCKED`` on PostgreSQL).

The queue's own tests (claims, leases, reaping, cancel, caps, a SIGKILLed worker) are in
``tests/jobs/``."""

from __future__ import annotations

import json
import threading
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
from labeling_support import (
    LabelingServer,
    Received,
    Reply,
    ServiceProcess,
    StartAPI,
    auto_label_input,
    capitalized_words_model,
    cli_env,
    fast_settings,
    free_port,
    run_cli,
)
from sqlalchemy import text

AUTO_LABEL = (
    "mutation Go($input: AutoLabelTokenBasedProjectInput!) "
    "{ result: autoLabelTokenBasedProject(input: $input) { id status progress } }"
)


def auto_label(http: httpx.Client, token: str, email: str, project_id: str, url: str) -> str:
    body = {
        "query": AUTO_LABEL,
        "variables": auto_label_input(email, project_id, url, secret="k"),
    }
    response = http.post("/graphql", json=body, headers={"Authorization": f"Bearer {token}"})
    result = response.json()
    assert "errors" not in result, result
    return str(result["data"]["result"]["id"])


# -- a restart in the middle of a job ---------------------------------------------------------


@pytest.mark.slow  # a server or CLI process: make test runs it, make test-fast does not
def test_a_server_killed_mid_job_resumes_it_after_restart(
    database_url: str, tmp_path: Path, fake_api: StartAPI, processes: list[ServiceProcess]
) -> None:
    env = cli_env(database_url, tmp_path / "data", EMBEDDED_WORKERS=1)
    made = run_cli(env, "add-user", "restart@example.com", "--team", "Restarters")
    assert made.returncode == 0, made.stderr
    user = json.loads(made.stdout)

    arrived = threading.Event()
    hold = threading.Event()
    calls = Counter[str]()

    def model(request: Received) -> Reply:
        text = request.json()["documents"][0]["sentences"][0]["text"]
        calls[text] += 1
        if text == "Second line" and calls[text] == 1:
            arrived.set()
            hold.wait(30)  # the server dies while we hold its request
        return capitalized_words_model(request)

    api = fake_api(model)
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    first = ServiceProcess(env, "serve", "--bind", f"127.0.0.1:{port}", log=tmp_path / "1.log")
    processes.append(first)
    first.wait_healthy(url)
    with httpx.Client(base_url=url, timeout=30) as http:
        auth = {"Authorization": f"Bearer {user['token']}"}
        ops = {
            "query": "mutation($i: CreateProjectInput!) { createProject(input: $i) { id } }",
            "variables": {
                "i": {
                    "name": "R",
                    "kind": "TOKEN_BASED",
                    "teamId": user["teamId"],
                    "documents": [None],
                }
            },
        }
        created = http.post(
            "/graphql",
            data={
                "operations": json.dumps(ops),
                "map": json.dumps({"0": ["variables.i.documents.0"]}),
            },
            files={"0": ("r.txt", b"First line\nSecond line\nThird line")},
            headers=auth,
        ).json()
        project_job = created["data"]["createProject"]["id"]
        project_id = wait_for(http, auth, project_job)["resultId"]
        job_id = auto_label(http, user["token"], "restart@example.com", project_id, api.url)
        assert arrived.wait(20), "the second batch never reached the model"
        midway = get_job(http, auth, job_id)
        assert (midway["status"], midway["progress"]) == ("IN_PROGRESS", 33)

    first.kill()
    hold.set()
    second = ServiceProcess(env, "serve", "--bind", f"127.0.0.1:{port}", log=tmp_path / "2.log")
    processes.append(second)
    second.wait_healthy(url)
    with httpx.Client(base_url=url, timeout=30) as http:
        done = wait_for(http, {"Authorization": f"Bearer {user['token']}"}, job_id, timeout=60)
        assert (done["status"], done["progress"]) == ("DELIVERED", 100), done
        project = http.post(
            "/graphql",
            json={
                "query": "query($p: ID!) { getProject(projectId: $p) { documents { importable } } }",
                "variables": {"p": project_id},
            },
            headers={"Authorization": f"Bearer {user['token']}"},
        ).json()["data"]["getProject"]
    labels = project["documents"][0]["importable"]["labels"]
    # The answered batch was skipped, the interrupted one redone: one label per line, no twins.
    assert sorted(label["startCellLine"] for label in labels) == [0, 1, 2]
    assert calls == {"First line": 1, "Second line": 2, "Third line": 1}


def get_job(http: httpx.Client, auth: dict[str, str], job_id: str) -> dict[str, Any]:
    result = http.post(
        "/graphql",
        json={
            "query": "query($j: String!) { getJob(jobId: $j) { status progress resultId errors { stack } } }",
            "variables": {"j": job_id},
        },
        headers=auth,
    ).json()
    return dict(result["data"]["getJob"])


def wait_for(
    http: httpx.Client, auth: dict[str, str], job_id: str, timeout: float = 30
) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while (job := get_job(http, auth, job_id))["status"] not in ("DELIVERED", "FAILED"):
        assert time.monotonic() < deadline, job
        time.sleep(0.1)
    return job


# -- workers as separate processes ------------------------------------------------------------


def test_worker_processes_share_the_queue_and_never_take_the_same_job(
    make_server: Callable[..., LabelingServer],
    database_url: str,
    backend: str,
    tmp_path: Path,
    fake_api: StartAPI,
    processes: list[ServiceProcess],
) -> None:
    if backend != "postgresql":
        pytest.skip("scale-out workers run against PostgreSQL")
    server = make_server(embedded_workers=0)  # the API only: the workers below do the jobs
    user = server.user("Scale")
    projects = [server.create_project(user.token, f"P{i}", "TOKEN_BASED", [("a.txt", b"Hello")],
                                      teamId=user.team_id) for i in range(12)]  # fmt: skip
    env = cli_env(database_url, tmp_path / "data")
    for index in range(2):
        worker = ServiceProcess(env, "worker", "--concurrency", "3", log=tmp_path / f"w{index}.log")
        processes.append(worker)
    project_ids = [
        server.wait_job(user.token, p["data"]["createProject"]["id"], timeout=60)["resultId"]
        for p in projects
    ]

    def slow_model(request: Received) -> Reply:
        time.sleep(0.2)
        return capitalized_words_model(request)

    api = fake_api(slow_model)
    job_ids = [auto_label(server.http, user.token, user.email, pid, api.url) for pid in project_ids]
    for job_id in job_ids:
        assert server.wait_job(user.token, job_id, timeout=60)["status"] == "DELIVERED"
    # Each project's only batch reached the model exactly once.
    assert sorted(r.json()["id"] for r in api.received) == sorted(project_ids)
    with server.db.engine.connect() as connection:
        attempts = connection.exec_driver_sql("SELECT attempts FROM jobs").scalars().all()
    assert set(attempts) == {1}
    # Both processes did part of the work (the model is slow enough for them to overlap).
    for index in range(2):
        assert "runs job AutoLabelQueue:" in (tmp_path / f"w{index}.log").read_text()
    for worker in processes:
        assert worker.terminate() == 0


def test_closing_an_app_leaves_no_thread_behind(database_url: str, tmp_path: Path) -> None:
    from extractor.labeling.app import create_labeling_app

    def ours() -> list[str]:
        return [t.name for t in threading.enumerate() if t.name.startswith("labeling-worker")]

    before = ours()
    for _ in range(3):
        app = create_labeling_app(fast_settings(database_url, tmp_path), start_workers=True)
        assert len(ours()) == len(before) + 2
        app.extensions["labeling"].close()
    assert ours() == before


def test_heartbeats_keep_a_slow_job_with_its_worker(
    make_server: Callable[..., LabelingServer], fake_api: StartAPI
) -> None:
    # A 2 s lease renewed every 0.2 s: a heartbeat may wait its turn for 1.8 s on a loaded
    # machine (a 1 s lease lapsed once in CI's parallel pass, three test workers on 2 cores).
    server = make_server(
        job_lease_seconds=2.0, job_heartbeat_seconds=0.2, prediction_read_timeout=10.0
    )
    user = server.user("Acme")
    project_id = server.token_project(user, ["John"])

    def slow(request: Received) -> Reply:
        time.sleep(4.5)  # longer than two leases: only heartbeats keep the job ours
        return capitalized_words_model(request)

    api = fake_api(slow)
    job_id = auto_label(server.http, user.token, user.email, project_id, api.url)
    assert server.wait_job(user.token, job_id)["status"] == "DELIVERED"
    assert len(api.received) == 1  # the second embedded worker never took it over
    with server.db.engine.connect() as connection:
        attempts = connection.execute(
            text("SELECT attempts FROM jobs WHERE id = :id"), {"id": job_id}
        ).scalar()
    assert attempts == 1


def test_a_stopping_worker_hands_its_job_over_at_once(
    make_server: Callable[..., LabelingServer],
    database_url: str,
    tmp_path: Path,
    fake_api: StartAPI,
    processes: list[ServiceProcess],
) -> None:
    # A long lease: the job can only move this fast if the stopping worker releases it.
    server = make_server(embedded_workers=0, job_lease_seconds=120.0)
    user = server.user("Acme")
    env = cli_env(database_url, tmp_path / "data", JOB_LEASE_SECONDS="120")
    first = ServiceProcess(env, "worker", "--concurrency", "1", log=tmp_path / "first.log")
    processes.append(first)
    project_id = server.token_project(user, ["Alpha", "Beta", "Gamma"])

    arrived = threading.Event()
    hold = threading.Event()

    def model(request: Received) -> Reply:
        if (
            request.json()["documents"][0]["sentences"][0]["text"] == "Beta"
            and not arrived.is_set()
        ):
            arrived.set()
            hold.wait(30)
        return capitalized_words_model(request)

    api = fake_api(model)
    job_id = auto_label(server.http, user.token, user.email, project_id, api.url)
    assert arrived.wait(30)
    first.process.send_signal(15)  # SIGTERM: finish the call in flight, then hand the job back
    hold.set()
    assert first.process.wait(30) == 0
    second = ServiceProcess(env, "worker", "--concurrency", "1", log=tmp_path / "second.log")
    processes.append(second)
    done = server.wait_job(user.token, job_id, timeout=30)
    assert done["status"] == "DELIVERED", done
    texts = [r.json()["documents"][0]["sentences"][0]["text"] for r in api.received]
    assert texts.count("Alpha") == 1 and texts.count("Gamma") == 1
    with server.db.engine.connect() as connection:
        attempts = connection.execute(
            text("SELECT attempts FROM jobs WHERE id = :id"), {"id": job_id}
        ).scalar()
    assert attempts == 1  # a graceful hand-over does not count as a failed attempt

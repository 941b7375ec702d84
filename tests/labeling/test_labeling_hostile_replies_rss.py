"""Issue 18, attacks 3-5 against the real server (``extractor labeling serve`` under gunicorn,
its embedded workers, SQLite): each hostile prediction reply, at the issue's size and 2x, fails
its job with its reason while the serving process grows by less than 150 MB and gives the
memory back, read from /proc before, during (sampled every 20 ms) and after each job."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from labeling_support import (
    AUTO_LABEL,
    CELL_TEXT,
    CREATE_PROJECT,
    FakeAPI,
    Received,
    Reply,
    ServiceProcess,
    auto_label_input,
    cli_env,
    free_port,
    hostile_prediction_replies,
    run_cli,
)
from test_labeling_limits_rss import Client, group_rss

MB = 1024 * 1024
GROWTH_LIMIT = 150 * MB  # the bound on the serving process


class PeakSampler:
    """The largest RSS of a process group seen while it runs, sampled every 20 ms."""

    def __init__(self, group: int) -> None:
        self.group = group
        self.peak = group_rss(group)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.wait(0.02):
            self.peak = max(self.peak, group_rss(self.group))

    def __enter__(self) -> PeakSampler:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join()


def wait_job(client: Client, job_id: str, timeout: float = 180) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    query = "query($id: String!) { getJob(jobId: $id) { status resultId errors { stack args } } }"
    while True:
        job = client.gql(query, {"id": job_id})["data"]["getJob"]
        if job["status"] in ("DELIVERED", "FAILED"):
            return dict(job)
        assert time.monotonic() < deadline, job
        time.sleep(0.1)


@pytest.mark.slow
@pytest.mark.serial  # the server's RSS, measured alone (make test's second pass)
def test_hostile_replies_cost_the_serving_process_under_150_mb_each(
    tmp_path: Path, processes: list[ServiceProcess]
) -> None:
    if not Path("/proc/self/status").exists():
        pytest.skip("needs /proc to read the server's memory")
    env = cli_env(f"sqlite:///{tmp_path / 'rss.db'}", tmp_path, prediction_read_timeout=60)
    made = json.loads(run_cli(env, "add-user", "tenant@example.com", "--team", "Acme").stdout)
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    server = ServiceProcess(env, "serve", "--bind", f"127.0.0.1:{port}", log=tmp_path / "s.log")
    processes.append(server)
    server.wait_healthy(url)
    client = Client(url, made["token"])
    started = client.upload("notes.txt", CELL_TEXT.encode(), teamId=made["teamId"])
    project_job = wait_job(client, started["data"]["createProject"]["id"])
    project_id = project_job["resultId"]
    document_id = client.gql(
        f'query {{ getProject(projectId: "{project_id}") {{ documents {{ id }} }} }}'
    )["data"]["getProject"]["documents"][0]["id"]

    current: dict[str, bytes] = {}

    def respond(_: Received) -> Reply:
        return 200, {"Content-Type": "application/json"}, current["body"]

    model = FakeAPI(respond).start()
    try:
        # Warm every path with a reply that works (and one that fails), then take the baseline.
        good = {"documents": [{"id": document_id, "labels": [{"id": 0, "entities": []}]}]}
        for body in (json.dumps(good).encode(), b"{"):
            current["body"] = body
            run = client.gql(
                AUTO_LABEL, auto_label_input("tenant@example.com", project_id, model.url)
            )
            wait_job(client, run["data"]["result"]["id"])
        baseline = group_rss(server.process.pid)
        figures = []
        for scale in (1, 2):
            for shape, (body, reason) in hostile_prediction_replies(scale, document_id).items():
                current["body"] = body
                before = group_rss(server.process.pid)
                with PeakSampler(server.process.pid) as sampler:
                    run = client.gql(
                        AUTO_LABEL, auto_label_input("tenant@example.com", project_id, model.url)
                    )
                    job = wait_job(client, run["data"]["result"]["id"])
                after = group_rss(server.process.pid)
                figures.append((shape, scale, len(body), before, sampler.peak, after))
                print(
                    f"{shape} x{scale} ({len(body) / MB:.1f} MB): RSS {before / MB:.0f} -> peak "
                    f"{sampler.peak / MB:.0f} -> {after / MB:.0f} MB; "
                    f"{job['errors'][0]['stack'][:100] if job['errors'] else job['status']}"
                )
                assert job["status"] == "FAILED", job
                stack = job["errors"][0]["stack"]
                if len(body) > 32 * MB:  # past OUTBOUND_MAX_REPLY_BYTES: never read whole
                    assert "larger than allowed" in stack, stack
                else:
                    assert reason in stack, stack
                assert "internal error" not in stack
        # The server still answers, and every attack's memory came back.
        assert client.gql("{ getPersonalTags { id } }")["data"] == {"getPersonalTags": []}
        print(
            f"baseline {baseline / MB:.0f} MB, at the end {group_rss(server.process.pid) / MB:.0f} MB"
        )
        for shape, scale, _, before, peak, after in figures:
            assert peak - before < GROWTH_LIMIT, (
                f"{shape} x{scale} grew {(peak - before) / MB:.0f} MB"
            )
            assert after - baseline < 50 * MB, (
                f"{shape} x{scale} kept {(after - baseline) / MB:.0f} MB"
            )
    finally:
        model.stop()
    assert server.terminate() == 0


def one_label_per_line(request: Received) -> Reply:
    """A prediction API labeling the first word of every sentence."""
    body = request.json()
    documents = [
        {
            "id": document["id"],
            "labels": [
                {
                    "id": sentence["id"],
                    "entities": [
                        {"label": "W", "start_char": 0, "end_char": sentence["text"].index(" ")}
                    ],
                }
                for sentence in document["sentences"]
            ],
        }
        for document in body["documents"]
    ]
    return 200, {"Content-Type": "application/json"}, json.dumps({"documents": documents}).encode()


@pytest.mark.slow
@pytest.mark.serial  # the server's RSS, measured alone (make test's second pass)
def test_a_104_kb_upload_mapped_to_500_documents_costs_under_150_mb(
    tmp_path: Path, processes: list[ServiceProcess]
) -> None:
    """Attack 5's last shape: one 104 KB file (200 lines of 10 50-character words) mapped to
    all 500 documents of a project, at the line and token limits of a project; then the
    project auto-labeled, one label per line (100,000 labels). The project job and the
    auto-labeling job each grow the server by less than 150 MB, and the memory comes back."""
    if not Path("/proc/self/status").exists():
        pytest.skip("needs /proc to read the server's memory")
    env = cli_env(f"sqlite:///{tmp_path / 'rss.db'}", tmp_path, prediction_read_timeout=60)
    made = json.loads(run_cli(env, "add-user", "tenant@example.com", "--team", "Acme").stdout)
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    server = ServiceProcess(env, "serve", "--bind", f"127.0.0.1:{port}", log=tmp_path / "s.log")
    processes.append(server)
    server.wait_healthy(url)
    client = Client(url, made["token"])
    # Warm up with a small project and one auto-labeling of it.
    warm = client.upload("notes.txt", CELL_TEXT.encode(), teamId=made["teamId"])
    warm_id = wait_job(client, warm["data"]["createProject"]["id"])["resultId"]
    model = FakeAPI(one_label_per_line).start()
    try:
        run = client.gql(
            AUTO_LABEL, auto_label_input("tenant@example.com", warm_id, model.url, per_request=0)
        )
        assert wait_job(client, run["data"]["result"]["id"])["status"] == "DELIVERED"
        baseline = group_rss(server.process.pid)

        line = " ".join(f"w{i:02d}" + "x" * 47 for i in range(10))  # 10 tokens, 519 bytes
        content = ("\n".join([line] * 200) + "\n").encode()
        paths = [f"variables.input.documents.{i}" for i in range(500)]
        variables = {
            "input": {"name": "Big", "kind": "TOKEN_BASED", "documents": [None] * 500,
                      "teamId": made["teamId"]},
        }  # fmt: skip
        with PeakSampler(server.process.pid) as created:
            response = client.http.post(
                "/graphql",
                data={
                    "operations": json.dumps({"query": CREATE_PROJECT, "variables": variables}),
                    "map": json.dumps({"0": paths}),
                },
                files={"0": ("big.txt", content, "text/plain")},
            )
            assert response.status_code == 200, response.text
            job = wait_job(client, response.json()["data"]["createProject"]["id"])
        assert job["status"] == "DELIVERED", job
        after_create = group_rss(server.process.pid)
        print(
            f"{len(content) / 1024:.0f} KB x 500 documents: RSS {baseline / MB:.0f} -> peak "
            f"{created.peak / MB:.0f} -> {after_create / MB:.0f} MB"
        )
        with PeakSampler(server.process.pid) as labeled:
            run = client.gql(
                AUTO_LABEL,
                auto_label_input("tenant@example.com", job["resultId"], model.url, per_request=0),
            )
            labeling = wait_job(client, run["data"]["result"]["id"], timeout=600)
        after_label = group_rss(server.process.pid)
        print(
            f"auto-labeled ({labeling['status']}, 100,000 labels): peak {labeled.peak / MB:.0f} "
            f"-> {after_label / MB:.0f} MB"
        )
        assert labeling["status"] == "DELIVERED", labeling
        assert created.peak - baseline < GROWTH_LIMIT
        assert labeled.peak - after_create < GROWTH_LIMIT
        assert after_label - baseline < 50 * MB
    finally:
        model.stop()
    assert server.terminate() == 0

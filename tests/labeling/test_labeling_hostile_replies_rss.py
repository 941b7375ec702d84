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

"""The labeling service's Prometheus metrics move with real jobs and real outbound calls."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import httpx
from labeling_support import (
    FakeAPI,
    LabelingServer,
    Received,
    Reply,
    auto_label,
    capitalized_words_model,
    cli_env,
    free_port,
    json_reply,
)
from prometheus_client.parser import text_string_to_metric_families

StartAPI = Callable[[Callable[[Received], Reply]], FakeAPI]


def scrape(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def value(samples: dict, name: str, **labels: str) -> float:
    return samples.get((name, tuple(sorted(labels.items()))), 0.0)


def test_jobs_claims_and_calls_are_counted(
    make_server: Callable[..., LabelingServer], fake_api: StartAPI
) -> None:
    server = make_server()
    before = scrape(server.http.get("/metrics").text)
    user = server.user("Acme")
    project_id = server.token_project(user, ["John met Mary", "in Paris"])
    good = fake_api(capitalized_words_model)
    broken = fake_api(lambda _request: json_reply({"error": "down"}, status=400))

    delivered = server.wait_job(user.token, auto_label(server, user, project_id, good.url))
    failed = server.wait_job(user.token, auto_label(server, user, project_id, broken.url))
    assert (delivered["status"], failed["status"]) == ("DELIVERED", "FAILED")

    reply = server.http.get("/metrics")
    assert reply.status_code == 200
    assert reply.headers["content-type"].startswith("text/plain; version=0.0.4")
    after = scrape(reply.text)

    def gained(name: str, **labels: str) -> float:
        return value(after, name, **labels) - value(before, name, **labels)

    jobs = "labeling_jobs"
    assert value(after, jobs, kind="AutoLabel", status="DELIVERED") >= 1
    assert value(after, jobs, kind="AutoLabel", status="FAILED") >= 1
    assert value(after, "labeling_queue_depth") == 0
    assert gained("labeling_outbound_calls_total", target="prediction", outcome="ok") == 2
    assert gained("labeling_outbound_calls_total", target="prediction", outcome="http_error") >= 1
    claims = "labeling_job_claim_latency_seconds_count"
    # The project's creation and both auto-labeling jobs were each claimed at least once.
    assert (
        sum(v for (n, _), v in after.items() if n == claims)
        - sum(v for (n, _), v in before.items() if n == claims)
        >= 3
    )
    assert "model-key" not in reply.text and "Acme" not in reply.text


def test_metrics_can_be_turned_off(make_server: Callable[..., LabelingServer]) -> None:
    assert make_server(metrics=False).http.get("/metrics").status_code == 404


def test_a_standalone_worker_serves_its_own_metrics(database_url: str, tmp_path: Path) -> None:
    port = free_port()
    env = {**cli_env(database_url, tmp_path / "data"), "EXTRACTOR_LABELING_METRICS": "true"}
    worker = subprocess.Popen(
        [sys.executable, "-m", "extractor.cli", "labeling", "worker", "--concurrency", "1",
         "--metrics-bind", f"127.0.0.1:{port}"],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 60
        text = ""
        while time.monotonic() < deadline:
            try:
                text = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=5).text
                break
            except httpx.TransportError:
                assert worker.poll() is None, "the worker exited"
                time.sleep(0.3)
        assert "labeling_queue_depth" in text
        assert "# TYPE labeling_outbound_calls_total counter" in text
        assert httpx.get(f"http://127.0.0.1:{port}/other", timeout=5).status_code == 404
    finally:
        os.killpg(worker.pid, signal.SIGTERM)
        worker.wait(30)

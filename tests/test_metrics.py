"""Prometheus metrics: numbers that move with traffic, summed across real gunicorn workers."""

from __future__ import annotations

import shutil
import subprocess
import time
import urllib.parse
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest
from flask import Flask
from prometheus_client.parser import text_string_to_metric_families
from support import free_port, post_file, start_server, stop_server

from extractor import samples


def scrape(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample of a scrape, keyed by name and sorted labels."""
    found = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            found[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return found


def value(samples_: dict, name: str, **labels: str) -> float:
    return samples_.get((name, tuple(sorted(labels.items()))), 0.0)


@pytest.fixture
def png(page_one: samples.TextPage) -> bytes:
    return samples.encode_image(page_one.image, "PNG")


def test_counters_move_with_requests(make_app: Callable[..., Flask], png: bytes) -> None:
    client = make_app().test_client()
    before = scrape(client.get("/metrics").get_data(as_text=True))

    assert post_file(client, png, "scan.png").status_code == 200
    assert client.post("/extract", data={}, content_type="multipart/form-data").status_code == 400
    reply = client.get("/metrics")

    assert reply.status_code == 200
    assert reply.content_type.startswith("text/plain; version=0.0.4")
    after = scrape(reply.get_data(as_text=True))
    ok = {"route": "/extract", "kind": "image", "format": "json", "status": "200", "key": "none"}
    refused = {
        "route": "/extract",
        "kind": "none",
        "format": "none",
        "status": "400",
        "key": "none",
    }
    for labels in (ok, refused):
        gained = value(after, "extractor_requests_total", **labels)
        assert gained - value(before, "extractor_requests_total", **labels) == 1
    assert value(after, "extractor_pages_total") - value(before, "extractor_pages_total") == 1
    engine_count = "extractor_engine_seconds_count"
    assert value(after, engine_count, kind="image") - value(before, engine_count, kind="image") == 1
    latency = "extractor_request_duration_seconds_count"
    assert value(after, latency, route="/extract") - value(before, latency, route="/extract") == 2


def test_audio_seconds_are_counted(make_app: Callable[..., Flask], speech_wav: bytes) -> None:
    client = make_app().test_client()
    before = value(
        scrape(client.get("/metrics").get_data(as_text=True)), "extractor_audio_seconds_total"
    )
    assert post_file(client, speech_wav, "speech.wav").status_code == 200
    after = value(
        scrape(client.get("/metrics").get_data(as_text=True)), "extractor_audio_seconds_total"
    )
    assert 1.0 < after - before < 10.0  # the espeak sentence lasts a few seconds


def test_unknown_paths_do_not_mint_series(make_app: Callable[..., Flask]) -> None:
    client = make_app().test_client()
    for i in range(5):
        assert client.get(f"/no-such-page-{i}").status_code == 404
    text = client.get("/metrics").get_data(as_text=True)
    assert "no-such-page" not in text
    assert value(scrape(text), "extractor_requests_total", route="unmatched", kind="none",
                 format="none", status="404", key="none") >= 5  # fmt: skip


def test_metrics_can_be_turned_off(make_app: Callable[..., Flask]) -> None:
    assert make_app(metrics=False).test_client().get("/metrics").status_code == 404


def test_metrics_are_open_unless_configured_behind_the_secret(
    make_app: Callable[..., Flask],
) -> None:
    assert make_app(secret="s3cret").test_client().get("/metrics").status_code == 200
    guarded = make_app(secret="s3cret", metrics_require_secret=True).test_client()
    assert guarded.get("/metrics").status_code == 401
    authorized = guarded.get("/metrics", headers={"Authorization": "Bearer s3cret"})
    assert authorized.status_code == 200


# -- a real server: two workers, one sum ------------------------------------------------------


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    scratch = tmp_path_factory.mktemp("metrics-server-tmp")
    url, process = start_server("--workers", "2", "--tmp-dir", str(scratch))
    try:
        yield url, scratch
    finally:
        stop_server(process)
    assert list(scratch.iterdir()) == [], "the server left its metrics directory behind"


def test_workers_add_up(server: tuple[str, Path], png: bytes) -> None:
    url, scratch = server
    metrics_dirs = list(scratch.glob("extractor-metrics-*"))
    assert len(metrics_dirs) == 1, "one shared metrics directory per server"
    before = scrape(httpx.get(url + "/metrics").text)
    sent = 6
    for _ in range(sent):
        reply = httpx.post(url + "/extract", files={"upload": ("scan.png", png)}, timeout=60)
        assert reply.status_code == 200
    labels = {
        "route": "/extract",
        "kind": "image",
        "format": "json",
        "status": "200",
        "key": "none",
    }
    # Whichever worker answers each scrape, the sum covers both workers' requests.
    for _ in range(4):
        after = scrape(httpx.get(url + "/metrics").text)
        gained = value(after, "extractor_requests_total", **labels)
        assert gained - value(before, "extractor_requests_total", **labels) == sent
    assert value(after, "extractor_engine_load_seconds") > 0
    assert value(after, "extractor_queue_depth") == 0


# -- a real Prometheus scrapes it ----------------------------------------------------------------


@pytest.mark.skipif(
    shutil.which("prometheus") is None, reason="Debian's prometheus is not installed"
)
def test_prometheus_scrapes_the_extractor(
    server: tuple[str, Path], png: bytes, tmp_path: Path
) -> None:
    url, _ = server
    target = urllib.parse.urlsplit(url).netloc
    assert httpx.post(url + "/extract", files={"upload": ("scan.png", png)}, timeout=60).is_success
    (tmp_path / "prometheus.yml").write_text(
        "global: {scrape_interval: 1s, evaluation_interval: 1s}\n"
        "scrape_configs:\n"
        f"  - job_name: extractor\n    static_configs: [{{targets: ['{target}']}}]\n"
    )
    port = free_port()
    prometheus = subprocess.Popen(
        [
            "prometheus", f"--config.file={tmp_path / 'prometheus.yml'}",
            f"--storage.tsdb.path={tmp_path / 'data'}", f"--web.listen-address=127.0.0.1:{port}",
        ],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    query = 'sum(extractor_requests_total{route="/extract",status="200"})'
    try:
        deadline = time.monotonic() + 60
        result: list = []
        while time.monotonic() < deadline and not result:
            time.sleep(1)
            try:
                reply = httpx.get(
                    f"http://127.0.0.1:{port}/api/v1/query", params={"query": query}, timeout=5
                )
            except httpx.TransportError:
                continue
            if reply.status_code == 200:
                result = reply.json()["data"]["result"]
        assert result, f"Prometheus never stored {query}"
        assert float(result[0]["value"][1]) >= 1
        up = httpx.get(f"http://127.0.0.1:{port}/api/v1/query", params={"query": "up"}).json()
        assert [r["value"][1] for r in up["data"]["result"]] == ["1"]
    finally:
        prometheus.terminate()
        prometheus.wait(timeout=30)


def test_only_the_process_that_made_the_directory_removes_it(tmp_path: Path) -> None:
    """A gunicorn worker is forked inside ``serve`` and unwinds through its ``finally``: its
    exit must not remove the directory its siblings and the master still write to."""
    import os

    from extractor.metrics_dir import DIR_PREFIX, remove_multiprocess_dir

    made = tmp_path / f"{DIR_PREFIX}{os.getpid()}"
    made.mkdir()
    child = os.fork()
    if child == 0:  # the "worker"
        remove_multiprocess_dir(made)
        os._exit(0)
    os.waitpid(child, 0)
    assert made.is_dir()
    remove_multiprocess_dir(made)
    assert not made.exists()

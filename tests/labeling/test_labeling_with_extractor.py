"""The whole flow with this package's own extractor (``extractor serve``) as the team's custom
API: OCR from a rendered PNG, speech from espeak-ng, then auto-labeling the OCR project."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from labeling_support import (
    REPO,
    FakeAPI,
    LabelingServer,
    Received,
    Reply,
    capitalized_words_model,
    free_port,
)

from extractor import samples

pytestmark = pytest.mark.slow

EXTRACTOR_SECRET = "local-extract0r-secret"
CREATE_API = """mutation($teamId: ID!, $input: CreateCustomAPIInput!) {
  createCustomAPI(teamId: $teamId, input: $input) { id }
}"""
AUTO_LABEL = (
    "mutation AutoLabel($input: AutoLabelTokenBasedProjectInput!) "
    "{ result: autoLabelTokenBasedProject(input: $input) { id status progress } }"
)


@pytest.fixture(scope="module")
def extractor_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """``extractor serve`` on a free loopback port, with a secret, ready to extract."""
    port = free_port()
    log = tmp_path_factory.mktemp("extractor") / "extractor.log"
    env = {k: v for k, v in os.environ.items() if not k.startswith("EXTRACTOR_")}
    env["PYTHONPATH"] = str(REPO)
    with log.open("wb") as output:
        process = subprocess.Popen(
            [sys.executable, "-m", "extractor.cli", "serve", "--bind", f"127.0.0.1:{port}",
             "--workers", "1", "--secret", EXTRACTOR_SECRET],
            env=env, cwd=REPO, stdout=output, stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while True:
            if process.poll() is not None:
                pytest.fail(f"extractor exited: {log.read_text()[-3000:]}")
            try:
                ready = httpx.get(f"{url}/readyz", timeout=2)
                if ready.status_code == 200 and ready.json().get("status") == "ready":
                    break
            except (httpx.HTTPError, ValueError):
                pass
            if time.monotonic() > deadline:
                pytest.fail(f"extractor not ready: {log.read_text()[-3000:]}")
            time.sleep(0.2)
        yield f"{url}/extract"
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGTERM)
            try:
                process.wait(20)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait(10)


@pytest.fixture
def server(make_server: Callable[..., LabelingServer]) -> LabelingServer:
    """A labeling server that gives the real extractor real time: the suite's 2 s read timeout
    suits fake APIs, not Whisper on a busy 2-core machine."""
    return make_server(outbound_read_timeout=60.0, outbound_total_timeout=120.0)


def register(server: LabelingServer, user: Any, url: str, purpose: str) -> str:
    fields = {"name": "Local", "endpointURL": url, "purpose": purpose, "secret": EXTRACTOR_SECRET}
    made = server.ok(CREATE_API, {"teamId": user.team_id, "input": fields}, token=user.token)
    return str(made["createCustomAPI"]["id"])


def create(
    server: LabelingServer, user: Any, kind: str, api_id: str, file: tuple[str, bytes]
) -> Any:
    started = server.create_project(
        user.token, kind.title(), kind, [file], teamId=user.team_id, customAPIId=api_id
    )
    assert "errors" not in started, started
    job = server.wait_job(user.token, started["data"]["createProject"]["id"], timeout=120)
    assert job["status"] == "DELIVERED", job
    project = server.project(user.token, job["resultId"])
    assert project is not None
    return project


def test_ocr_project_then_auto_labeling_through_the_local_extractor(
    server: LabelingServer,
    extractor_url: str,
    fake_api: Callable[[Callable[[Received], Reply]], FakeAPI],
) -> None:
    user = server.user("Readers")
    page = samples.text_page(
        ["Invoice from Acme Corp", "paid by John Smith"], size=(900, 300), margin=40
    )
    png = samples.encode_image(page.image, "png")
    project = create(
        server, user, "OCR", register(server, user, extractor_url, "OCR_API"), ("test.png", png)
    )
    (document,) = project["documents"]
    importable = document["importable"]
    assert importable["type"] == "BOUNDING_BOX" and importable["name"] == "test.png"
    assert [cell["content"] for cell in importable["cells"]] == [
        "Invoice from Acme Corp",
        "paid by John Smith",
    ]
    boxes = [label for label in importable["labels"] if label["type"] == "BOUNDING_BOX"]
    assert len(boxes) == 8 and importable["pages"][0]["pageWidth"] == 900

    model = fake_api(capitalized_words_model)
    job = server.ok(
        AUTO_LABEL,
        {
            "input": {
                "labelerEmail": user.email,
                "projectId": project["id"],
                "options": {"numberOfFilesPerRequest": 0, "serviceProvider": "CUSTOM"},
                "targetAPI": {"endpoint": model.url, "secretKey": "model-key"},
            }
        },
        token=user.token,
    )["result"]
    done = server.wait_job(user.token, job["id"])
    assert (done["status"], done["progress"]) == ("DELIVERED", 100), done
    labeled = server.project(user.token, project["id"])
    assert labeled is not None
    labels = labeled["documents"][0]["importable"]["labels"]
    spans = [(s["startCellLine"], s["startTokenIndex"]) for s in labels if s["type"] == "SPAN"]
    assert spans == [(0, 0), (0, 2), (0, 3), (1, 2), (1, 3)]  # Invoice Acme Corp John Smith
    assert len([label for label in labels if label["type"] == "BOUNDING_BOX"]) == 8


@pytest.mark.skipif(not samples.have_espeak(), reason="espeak-ng is not installed")
def test_audio_project_through_the_local_extractor(
    server: LabelingServer, extractor_url: str
) -> None:
    user = server.user("Listeners")
    wav = samples.speech("Good morning everyone. The meeting starts now.")
    project = create(
        server, user, "AUDIO", register(server, user, extractor_url, "ASR_API"), ("hello.wav", wav)
    )
    importable = project["documents"][0]["importable"]
    assert importable["type"] == "TIMESTAMP" and importable["pages"] == []
    words = " ".join(cell["content"] for cell in importable["cells"]).lower()
    assert "morning" in words and "meeting" in words
    assert all(label["type"] == "TIMESTAMP" for label in importable["labels"])
    assert len(importable["labels"]) == len(importable["cells"])


def test_a_wrong_secret_fails_the_job_cleanly(server: LabelingServer, extractor_url: str) -> None:
    user = server.user("Readers")
    fields = {"name": "Bad", "endpointURL": extractor_url, "purpose": "OCR_API", "secret": "wrong"}
    api_id = server.ok(CREATE_API, {"teamId": user.team_id, "input": fields}, token=user.token)[
        "createCustomAPI"
    ]["id"]
    png = samples.encode_image(samples.text_page(["Hi"], size=(200, 100), margin=10).image, "png")
    started = server.create_project(
        user.token, "P", "OCR", [("a.png", png)], teamId=user.team_id, customAPIId=api_id
    )
    job = server.wait_job(user.token, started["data"]["createProject"]["id"], timeout=60)
    assert job["status"] == "FAILED" and "401" in job["errors"][0]["stack"]
    assert "wrong" not in str(job)


def test_the_extractor_is_on_loopback_so_a_default_policy_refuses_it(
    make_server: Callable[..., LabelingServer], extractor_url: str, tmp_path: Path
) -> None:
    server = make_server(outbound_allow="")
    user = server.user("Readers")
    api_id = register(server, user, extractor_url, "OCR_API")
    started = server.create_project(
        user.token, "P", "OCR", [("a.png", b"x")], teamId=user.team_id, customAPIId=api_id
    )
    job = server.wait_job(user.token, started["data"]["createProject"]["id"])
    assert job["status"] == "FAILED" and "is not allowed" in job["errors"][0]["stack"]

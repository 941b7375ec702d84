"""Auto-labeling against a real prediction API (a loopback HTTP server started by the test):
the exact batches, headers and signature, the SPAN labels, progress, failures and SSRF."""

from __future__ import annotations

import hashlib
import hmac
import threading
import time
import uuid
from collections.abc import Callable
from typing import Any

import httpx
import pytest
from labeling_support import (
    LabelingServer,
    Received,
    Reply,
    StartAPI,
    auto_label_input,
    capitalized_words_model,
    hanging_api,
    json_reply,
)

SECRET = "pr3diction-s3cret"
AUTO_LABEL = (
    "mutation AutoLabelTokenBasedProjectMutation($input: AutoLabelTokenBasedProjectInput!) "
    "{ result: autoLabelTokenBasedProject(input: $input) { id status progress } }"
)
DOC_A = ["John works at Abcd Corp.", "", "he met Mary", "in Paris today", "fine", "Bye now"]
DOC_B = ["Second document", "with two lines"]


def two_document_project(server: LabelingServer, user: Any) -> str:
    started = server.create_project(
        user.token,
        "Notes",
        "TOKEN_BASED",
        [("a.txt", "\n".join(DOC_A).encode()), ("b.txt", "\n".join(DOC_B).encode())],
        teamId=user.team_id,
    )
    job = server.wait_job(user.token, started["data"]["createProject"]["id"])
    assert job["status"] == "DELIVERED", job
    return str(job["resultId"])


def start_auto_label(
    server: LabelingServer, user: Any, project_id: str, endpoint: str, per_request: int = 0
) -> dict[str, Any]:
    """Send the spec's request body verbatim (operationName any alphanumeric string)."""
    body = {
        "operationName": "AutoLabel42",
        "query": AUTO_LABEL,
        "variables": auto_label_input(
            user.email, project_id, endpoint, secret=SECRET, per_request=per_request
        ),
    }
    response = server.post(body, user.token)
    assert response.status_code == 200
    result = response.json()
    assert result["extensions"] == {} and "errors" not in result, result
    return dict(result["data"]["result"])


def sentences_of(received: Received) -> list[int]:
    (document,) = received.json()["documents"]
    return [sentence["id"] for sentence in document["sentences"]]


def test_batches_headers_signature_and_spans(server: LabelingServer, fake_api: StartAPI) -> None:
    user = server.user("Acme")
    project_id = two_document_project(server, user)
    model = fake_api(capitalized_words_model)
    job = start_auto_label(server, user, project_id, model.url, per_request=2)
    assert job["status"] == "IN_PROGRESS" and job["progress"] == 0
    prefix, _, rest = job["id"].partition(":")
    assert prefix == "AutoLabelQueue" and uuid.UUID(rest).version == 4

    done = server.wait_job(user.token, job["id"])
    assert done["status"] == "DELIVERED", done
    assert done["progress"] == 100 and done["resultId"] == project_id and done["errors"] == []

    project = server.project(user.token, project_id)
    assert project is not None
    doc_a, doc_b = project["documents"]
    # Blank lines are not cells: a.txt has five lines, sent 2 + 2 + 1; b.txt 2.
    assert [sentences_of(r) for r in model.received] == [[0, 1], [2, 3], [4], [0, 1]]
    first = model.received[0]
    assert first.json() == {
        "id": project_id,
        "name": "Notes",
        "documents": [
            {
                "id": doc_a["id"],
                "fileName": "a.txt",
                "sentences": [
                    {"id": 0, "text": "John works at Abcd Corp.", "metadata": []},
                    {"id": 1, "text": "he met Mary", "metadata": []},
                ],
            }
        ],
    }
    assert model.received[3].json()["documents"][0]["id"] == doc_b["id"]
    for received in model.received:
        assert received.path == "/predict"
        assert received.headers["authorization"] == f"Bearer {SECRET}"
        assert received.headers["content-type"] == "application/json"
        expected = hmac.new(SECRET.encode(), received.body, hashlib.sha256).hexdigest()
        assert received.headers["x-signature"] == f"sha256={expected}"

    spans = [label for label in doc_a["importable"]["labels"] if label["type"] == "SPAN"]
    assert [(s["startCellLine"], s["startTokenIndex"]) for s in spans] == [
        (0, 0),  # John
        (0, 3),  # Abcd
        (0, 4),  # Corp.
        (1, 2),  # Mary
        (2, 1),  # Paris
        (4, 0),  # Bye
    ]
    assert spans[2] == {
        "type": "SPAN",
        "labelName": "PROPER",
        "startCellLine": 0,
        "startCellIndex": 0,
        "startTokenIndex": 4,
        "startCharIndex": 0,
        "endCellLine": 0,
        "endCellIndex": 0,
        "endTokenIndex": 4,
        "endCharIndex": 4,
        "layer": 0,
        "counter": 0,
        "labeledBy": user.email,
        "confidenceScore": 0.9,
    }
    assert len(doc_b["importable"]["labels"]) == 1  # "Second"
    assert SECRET not in str(server.job(user.token, job["id"]))


def test_zero_sends_each_document_whole(server: LabelingServer, fake_api: StartAPI) -> None:
    user = server.user("Acme")
    project_id = two_document_project(server, user)
    model = fake_api(capitalized_words_model)
    job = start_auto_label(server, user, project_id, model.url, per_request=0)
    assert server.wait_job(user.token, job["id"])["status"] == "DELIVERED"
    assert [sentences_of(r) for r in model.received] == [[0, 1, 2, 3, 4], [0, 1]]


def test_progress_moves_per_batch(server: LabelingServer, fake_api: StartAPI) -> None:
    user = server.user("Acme")
    project_id = server.token_project(user, ["Alpha", "Beta", "Gamma", "Delta"])
    gate = threading.Semaphore(0)

    def gated(request: Received) -> Reply:
        assert gate.acquire(timeout=20)
        return capitalized_words_model(request)

    model = fake_api(gated)
    job = start_auto_label(server, user, project_id, model.url, per_request=1)

    def current() -> dict[str, Any]:
        job_now = server.job(user.token, job["id"])
        assert job_now is not None
        return job_now

    seen = [current()]
    for _ in range(3):
        before = seen[-1]["progress"]
        gate.release()
        deadline = time.monotonic() + 10
        while current()["progress"] == before:
            assert time.monotonic() < deadline
            time.sleep(0.02)
        seen.append(current())
    assert [(j["status"], j["progress"]) for j in seen] == [
        ("IN_PROGRESS", 0),
        ("IN_PROGRESS", 25),
        ("IN_PROGRESS", 50),
        ("IN_PROGRESS", 75),
    ]
    gate.release()
    done = server.wait_job(user.token, job["id"])
    assert (done["status"], done["progress"]) == ("DELIVERED", 100)


def labels_of(server: LabelingServer, user: Any, project_id: str) -> list[Any]:
    project = server.project(user.token, project_id)
    assert project is not None
    return [label for d in project["documents"] for label in d["importable"]["labels"]]


def failing_after_first(reply: Reply) -> Callable[[Received], Reply]:
    """A model that answers the first batch well and ``reply`` afterwards."""
    calls = {"n": 0}

    def respond(request: Received) -> Reply:
        calls["n"] += 1
        return capitalized_words_model(request) if calls["n"] == 1 else reply

    return respond


@pytest.mark.parametrize(
    ("reply", "message"),
    [
        ((500, {"Content-Type": "text/plain"}, b"boom"), "answered HTTP"),
        ((200, {"Content-Type": "application/json"}, b"<html>garbage"), "invalid JSON"),
        (json_reply({"documents": "nope"}), "malformed"),
        (json_reply({"documents": [{"id": "other", "labels": []}]}), "did not send"),
        (json_reply({"documents": [{"labels": [{"id": 0, "entities": []}]}]}), "malformed"),
        ((404, {}, b""), "answered HTTP"),
    ],
    ids=["500", "not-json", "wrong-shape", "unknown-document", "missing-id", "404"],
)
def test_a_failing_model_fails_the_job_and_writes_no_label(
    server: LabelingServer, fake_api: StartAPI, reply: Reply, message: str
) -> None:
    user = server.user("Acme")
    project_id = server.token_project(user, ["John", "Mary", "Paul"])
    model = fake_api(failing_after_first(reply))
    job = start_auto_label(server, user, project_id, model.url, per_request=1)
    done = server.wait_job(user.token, job["id"])
    assert done["status"] == "FAILED" and done["resultId"] is None
    (error,) = done["errors"]
    assert message in error["stack"] and error["id"]
    assert "Traceback" not in error["stack"] and SECRET not in str(done)
    assert labels_of(server, user, project_id) == []  # batch 1's labels were never written


def test_5xx_is_retried_then_fails(server: LabelingServer, fake_api: StartAPI) -> None:
    user = server.user("Acme")
    project_id = server.token_project(user, ["John"])
    model = fake_api(lambda _: (503, {}, b"down"))
    done = server.wait_job(user.token, start_auto_label(server, user, project_id, model.url)["id"])
    assert done["status"] == "FAILED" and "503" in done["errors"][0]["stack"]
    assert len(model.received) == 1 + server.settings.outbound_retries


def test_429_is_retried_after_the_time_asked(server: LabelingServer, fake_api: StartAPI) -> None:
    user = server.user("Acme")
    project_id = server.token_project(user, ["John"])
    times: list[float] = []

    def busy_once(request: Received) -> Reply:
        times.append(time.monotonic())
        if len(times) == 1:
            return 429, {"Retry-After": "1"}, b""
        return capitalized_words_model(request)

    model = fake_api(busy_once)
    done = server.wait_job(user.token, start_auto_label(server, user, project_id, model.url)["id"])
    assert done["status"] == "DELIVERED" and len(model.received) == 2
    assert times[1] - times[0] >= 0.9


def test_a_model_that_hangs_fails_the_job_in_bounded_time(
    server: LabelingServer, fake_api: StartAPI
) -> None:
    user = server.user("Acme")
    project_id = server.token_project(user, ["John"])
    model = hanging_api(fake_api)
    started = time.monotonic()
    job = start_auto_label(server, user, project_id, model.url)
    done = server.wait_job(user.token, job["id"], timeout=30)
    assert done["status"] == "FAILED" and "did not answer" in done["errors"][0]["stack"]
    assert time.monotonic() - started < 15


def test_a_model_reply_above_the_limit_fails_the_job(make_server: Any, fake_api: StartAPI) -> None:
    server = make_server(outbound_max_reply_bytes=1000)
    user = server.user("Acme")
    project_id = server.token_project(user, ["John"])
    model = fake_api(lambda _: (200, {"Content-Type": "application/json"}, b" " * 50_000))
    done = server.wait_job(user.token, start_auto_label(server, user, project_id, model.url)["id"])
    assert done["status"] == "FAILED" and "larger than allowed" in done["errors"][0]["stack"]


def test_spans_outside_the_sentence_are_garbage(server: LabelingServer, fake_api: StartAPI) -> None:
    user = server.user("Acme")
    project_id = server.token_project(user, ["John"])
    bad: dict[str, Any] = {"documents": []}

    def respond(request: Received) -> Reply:
        document = request.json()["documents"][0]
        bad["documents"] = [
            {
                "id": document["id"],
                "labels": [{"id": 0, "entities": [{"label": "X", "start_char": 2, "end_char": 9}]}],
            }
        ]
        return json_reply(bad)

    model = fake_api(respond)
    done = server.wait_job(user.token, start_auto_label(server, user, project_id, model.url)["id"])
    assert done["status"] == "FAILED" and "outside sentence 0" in done["errors"][0]["stack"]


# -- SSRF: the service applies the outbound policy ---------------------------------------------


def test_loopback_is_refused_unless_allowed(make_server: Any, fake_api: StartAPI) -> None:
    server = make_server(outbound_allow="")
    user = server.user("Acme")
    project_id = server.token_project(user, ["John"])
    model = fake_api(capitalized_words_model)
    done = server.wait_job(user.token, start_auto_label(server, user, project_id, model.url)["id"])
    assert done["status"] == "FAILED"
    stack = done["errors"][0]["stack"]
    # One generic sentence for the user (no address class, no refused-vs-timed-out hint).
    assert "cannot reach the prediction API" in stack and "loopback" not in stack
    assert model.received == []  # the listener was never touched


@pytest.mark.parametrize(
    "endpoint",
    [
        "http://169.254.169.254/latest/meta-data/",
        "http://metadata.google.internal/computeMetadata/v1/",
        "http://[::1]:9/predict",
        "http://10.0.0.1/predict",
    ],
    ids=["metadata-ip", "metadata-name", "ipv6-loopback", "private"],
)
def test_internal_targets_are_refused_without_a_connection(
    server: LabelingServer, endpoint: str
) -> None:
    user = server.user("Acme")
    project_id = server.token_project(user, ["John"])
    done = server.wait_job(user.token, start_auto_label(server, user, project_id, endpoint)["id"])
    assert done["status"] == "FAILED" and "is not allowed" in done["errors"][0]["stack"]


def test_a_name_is_judged_by_the_address_it_resolves_to(
    make_server: Any, fake_api: StartAPI
) -> None:
    server = make_server(outbound_allow="")
    user = server.user("Acme")
    project_id = server.token_project(user, ["John"])
    model = fake_api(capitalized_words_model)
    endpoint = model.url.replace("127.0.0.1", "localhost")
    done = server.wait_job(user.token, start_auto_label(server, user, project_id, endpoint)["id"])
    assert done["status"] == "FAILED" and "is not allowed" in done["errors"][0]["stack"]
    assert model.received == []


def test_a_redirect_to_a_refused_address_fails(make_server: Any, fake_api: StartAPI) -> None:
    # Only this one port's host is allowed by name; the redirect goes to a literal loopback IP.
    server = make_server(outbound_allow="localhost:*")
    user = server.user("Acme")
    project_id = server.token_project(user, ["John"])
    inner = fake_api(capitalized_words_model)
    outer = fake_api(lambda _: (307, {"Location": inner.url}, b""))
    endpoint = outer.url.replace("127.0.0.1", "localhost")
    done = server.wait_job(user.token, start_auto_label(server, user, project_id, endpoint)["id"])
    assert done["status"] == "FAILED" and "is not allowed" in done["errors"][0]["stack"]
    assert len(outer.received) == 1 and inner.received == []


def test_secrets_never_reach_the_log(
    server: LabelingServer, fake_api: StartAPI, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level("DEBUG")
    user = server.user("Acme")
    project_id = server.token_project(user, ["John", "Mary"])
    model = fake_api(failing_after_first((500, {}, b"no")))
    done = server.wait_job(
        user.token, start_auto_label(server, user, project_id, model.url, 1)["id"]
    )
    assert done["status"] == "FAILED"
    assert caplog.text and SECRET not in caplog.text and user.token not in caplog.text
    with server.db.engine.connect() as connection:
        payloads = connection.exec_driver_sql("SELECT payload FROM jobs").scalars().all()
    assert SECRET not in str(payloads)  # a finished job keeps no credential


def test_the_demo_model_checks_the_signature_and_labels(server: LabelingServer) -> None:
    """The README's toy prediction API works with the service, and only with the right key."""
    from http.server import ThreadingHTTPServer

    from extractor.labeling.demo_model import make_handler

    model = ThreadingHTTPServer(("127.0.0.1", 0), make_handler(SECRET))
    threading.Thread(
        target=model.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
    ).start()
    try:
        url = f"http://127.0.0.1:{model.server_port}/predict"
        user = server.user("Acme")
        project_id = server.token_project(user, ["Invoice 42 from Acme Corp."])
        done = server.wait_job(user.token, start_auto_label(server, user, project_id, url)["id"])
        assert done["status"] == "DELIVERED", done
        spans = labels_of(server, user, project_id)
        assert [(s["labelName"], s["startTokenIndex"]) for s in spans] == [
            ("ENTITY", 0),
            ("NUMBER", 1),
            ("ENTITY", 3),
            ("ENTITY", 4),
        ]
        wrong = httpx.post(url, json={"documents": []}, headers={"Authorization": "Bearer x"})
        assert wrong.status_code == 401
    finally:
        model.shutdown()
        model.server_close()

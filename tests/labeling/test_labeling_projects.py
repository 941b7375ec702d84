"""OCR and AUDIO projects through customer extraction APIs (loopback servers started here): the
outbound request, both reply formats, failures that leave nothing behind, and SSRF."""

from __future__ import annotations

import email
import email.policy
import json
from collections.abc import Callable
from typing import Any

import pytest
from labeling_support import FakeAPI, LabelingServer, Received, Reply, json_reply

CREATE_API = """mutation($teamId: ID!, $input: CreateCustomAPIInput!) {
  createCustomAPI(teamId: $teamId, input: $input) { id }
}"""
API_SECRET = "extract0r-s3cret"

StartAPI = Callable[[Callable[[Received], Reply]], FakeAPI]

OCR_REPLY = {
    "name": "scan.png",
    "type": "BOUNDING_BOX",
    "cells": [
        {
            "content": "SHIHLIN TAIWAN",
            "index": 0,
            "line": 0,
            "metadata": [],
            "tokens": ["SHIHLIN", "TAIWAN"],
        },
    ],
    "labelSets": [],
    "labels": [
        {
            "type": "BOUNDING_BOX",
            "startCellLine": 0,
            "startCellIndex": 0,
            "startTokenIndex": 0,
            "startCharIndex": 0,
            "endCellLine": 0,
            "endCellIndex": 0,
            "endTokenIndex": 0,
            "endCharIndex": 6,
            "layer": 0,
            "counter": 0,
            "pageIndex": 0,
            "nodeCount": 4,
            "x0": 10,
            "y0": 10,
            "x1": 80,
            "y1": 10,
            "x2": 80,
            "y2": 30,
            "x3": 10,
            "y3": 30,
        },
    ],
    "pages": [{"pageIndex": 0, "pageWidth": 200, "pageHeight": 100}],
}


def uploaded_files(request: Received) -> list[tuple[str | None, str | None, bytes]]:
    """(field name, file name, bytes) of each part of a multipart body."""
    message = email.message_from_bytes(
        b"Content-Type: " + request.headers["content-type"].encode() + b"\r\n\r\n" + request.body,
        policy=email.policy.HTTP,
    )
    parts: list[tuple[str | None, str | None, bytes]] = []
    for part in message.walk():
        if part.is_multipart():
            continue
        name = part.get_param("name", header="content-disposition")
        payload = part.get_payload(decode=True)
        assert isinstance(payload, bytes)
        parts.append((str(name) if name else None, part.get_filename(), payload))
    return parts


def register(server: LabelingServer, user: Any, url: str, purpose: str, secret: str | None) -> str:
    fields = {"name": purpose, "endpointURL": url, "purpose": purpose, "secret": secret}
    made = server.ok(CREATE_API, {"teamId": user.team_id, "input": fields}, token=user.token)
    return str(made["createCustomAPI"]["id"])


def create(
    server: LabelingServer, user: Any, kind: str, api_id: str, files: list[tuple[str, bytes]]
) -> dict[str, Any]:
    started = server.create_project(
        user.token, f"{kind} project", kind, files, teamId=user.team_id, customAPIId=api_id
    )
    assert "errors" not in started, started
    # A generous bound: the "lists" reply (2 million arrays, 6 MB) takes its job over 30 s of
    # CPU when other test workers share the two cores.
    return server.wait_job(user.token, started["data"]["createProject"]["id"], timeout=120.0)


def test_ocr_project_from_a_json_extractor(server: LabelingServer, fake_api: StartAPI) -> None:
    user = server.user("Acme")
    extractor = fake_api(lambda _: json_reply(OCR_REPLY))
    api_id = register(server, user, extractor.url, "OCR_API", API_SECRET)
    job = create(server, user, "OCR", api_id, [("scan.png", b"\x89PNG fake image bytes")])
    assert job["status"] == "DELIVERED" and job["progress"] == 100, job

    (request,) = extractor.received
    assert request.method == "POST" and request.path == "/predict"
    assert request.headers["accept"] == "application/json, text/plain"
    assert request.headers["authorization"] == f"Bearer {API_SECRET}"
    assert uploaded_files(request) == [("upload", "scan.png", b"\x89PNG fake image bytes")]

    project = server.project(user.token, job["resultId"])
    assert project is not None and project["kind"] == "OCR"
    (document,) = project["documents"]
    assert document["name"] == "scan.png" and document["importable"] == OCR_REPLY


def test_audio_project_from_a_text_extractor_with_speakers(
    server: LabelingServer, fake_api: StartAPI
) -> None:
    user = server.user("Acme")
    transcript = "Speaker 1: good morning\n\nSpeaker 2: hello there, how are you\nno label\n"
    extractor = fake_api(
        lambda _: (200, {"Content-Type": "text/plain; charset=utf-8"}, transcript.encode())
    )
    api_id = register(server, user, extractor.url, "ASR_API", None)
    job = create(server, user, "AUDIO", api_id, [("a.wav", b"RIFF...."), ("b.flac", b"fLaC")])
    assert job["status"] == "DELIVERED", job
    assert len(extractor.received) == 2
    assert "authorization" not in extractor.received[0].headers  # no secret, no header
    assert [f[1] for r in extractor.received for f in uploaded_files(r)] == ["a.wav", "b.flac"]

    project = server.project(user.token, job["resultId"])
    assert project is not None
    first = project["documents"][0]["importable"]
    assert first["type"] == "TIMESTAMP" and first["pages"] == [] and first["labels"] == []
    assert [(c["line"], c["content"], c["metadata"]) for c in first["cells"]] == [
        (0, "good morning", [{"key": "speaker", "value": "Speaker 1"}]),
        (1, "hello there, how are you", [{"key": "speaker", "value": "Speaker 2"}]),
        (2, "no label", []),
    ]


@pytest.mark.parametrize(
    ("reply", "message"),
    [
        ((200, {"Content-Type": "text/html"}, b"<p>hi</p>"), "Content-Type 'text/html'"),
        ((200, {}, b"no type at all"), "Content-Type '(none)'"),
        ((200, {"Content-Type": "application/json"}, b"{not json"), "invalid JSON"),
        (json_reply({"cells": "wrong"}), "not in the Importable format"),
        (json_reply({**OCR_REPLY, "type": "TIMESTAMP", "pages": [], "labels": []}), "expected"),
        ((500, {"Content-Type": "text/plain"}, b"crash"), "answered HTTP"),
        ((401, {}, b""), "answered HTTP"),
        # Issue 18: refused on the raw text, never "internal error" (RecursionError) or memory.
        (
            (200, {"Content-Type": "application/json"}, b"[" * 100_000 + b"]" * 100_000),
            "nested too deeply at "
            + "0/" * 31
            + "0 (limit 32, EXTRACTOR_LABELING_MAX_API_REPLY_DEPTH)",
        ),
        (
            (
                200,
                {"Content-Type": "application/json"},
                b'{"cells": [' + b"[]," * 2_000_000 + b"[]]}",
            ),
            "too many values at cells/1499997 (limit 1500000",
        ),
    ],
    ids=[
        "html",
        "no-type",
        "bad-json",
        "not-importable",
        "wrong-type",
        "500",
        "401",
        "deep",
        "lists",
    ],
)
def test_a_bad_extractor_reply_fails_the_job_and_makes_no_project(
    server: LabelingServer, fake_api: StartAPI, reply: Reply, message: str
) -> None:
    user = server.user("Acme")
    calls = {"n": 0}

    def second_fails(_: Received) -> Reply:
        calls["n"] += 1
        return json_reply(OCR_REPLY) if calls["n"] == 1 else reply

    extractor = fake_api(second_fails)
    api_id = register(server, user, extractor.url, "OCR_API", API_SECRET)
    job = create(server, user, "OCR", api_id, [("ok.png", b"1"), ("bad.png", b"2")])
    assert job["status"] == "FAILED" and job["resultId"] is None
    (error,) = job["errors"]
    assert message in error["stack"], error
    assert API_SECRET not in json.dumps(job)
    with server.db.engine.connect() as connection:
        assert connection.exec_driver_sql("SELECT count(*) FROM projects").scalar() == 0
        assert connection.exec_driver_sql("SELECT count(*) FROM documents").scalar() == 0
        assert connection.exec_driver_sql("SELECT count(*) FROM job_uploads").scalar() == 0


def test_a_custom_api_on_loopback_is_refused_unless_allowed(
    make_server: Callable[..., LabelingServer], fake_api: StartAPI
) -> None:
    server = make_server(outbound_allow="")
    user = server.user("Acme")
    extractor = fake_api(lambda _: json_reply(OCR_REPLY))
    api_id = register(server, user, extractor.url, "OCR_API", API_SECRET)
    job = create(server, user, "OCR", api_id, [("scan.png", b"x")])
    assert job["status"] == "FAILED"
    stack = job["errors"][0]["stack"]
    assert "the custom extraction API" in stack and "is not allowed" in stack
    assert extractor.received == []


def test_the_allow_list_opens_exactly_what_it_names(
    make_server: Callable[..., LabelingServer], fake_api: StartAPI
) -> None:
    server = make_server(outbound_allow="10.0.0.0/8:*, 127.0.0.1/32:*")
    user = server.user("Acme")
    extractor = fake_api(lambda _: json_reply(OCR_REPLY))
    api_id = register(server, user, extractor.url, "OCR_API", API_SECRET)
    assert create(server, user, "OCR", api_id, [("scan.png", b"x")])["status"] == "DELIVERED"
    other = register(server, user, extractor.url.replace("127.0.0.1", "127.0.0.2"), "OCR_API", None)
    refused = create(server, user, "OCR", other, [("scan.png", b"x")])
    assert refused["status"] == "FAILED" and "is not allowed" in refused["errors"][0]["stack"]

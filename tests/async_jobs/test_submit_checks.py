"""What a client is told: no reply names a server path (a request's workdir, the temporary
folder), and a job's callback_url is checked whole when the job is submitted (scheme, host,
port), not when its webhook is first sent."""

from __future__ import annotations

import io
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

import pytest
from flask import Flask
from jobs_support import fresh_database, serve, submit, wait_for

# Files whose kind is sniffed from their first bytes but whose decoder fails naming the file.
UNDECODABLE = {
    "bad.wav": b"RIFF\x24\x00\x00\x00WAVEfmt " + b"\x00" * 200,
    "bad.ogg": b"OggS" + b"\x00" * 300,
    "bad.png": b"\x89PNG\r\n\x1a\n" + b"\x00" * 300,
    "bad.jpg": b"\xff\xd8\xff\xe0" + b"\x00" * 300,
}


def _no_server_path(message: str, *folders: str) -> None:
    for folder in (tempfile.gettempdir(), *folders):
        assert folder not in message, message
    assert "extractor-" not in message and "request-" not in message, message


@pytest.mark.parametrize("name", sorted(UNDECODABLE))
@pytest.mark.parametrize("path", ["/extract", "/v1/audio/transcriptions"])
def test_no_error_reply_names_a_server_path(
    make_app: Callable[..., Flask], tmp_path: Path, name: str, path: str
) -> None:
    scratch = tmp_path / "requests"
    client = make_app().test_client()
    form: dict[str, object] = {
        "upload" if path == "/extract" else "file": (io.BytesIO(UNDECODABLE[name]), name)
    }
    if path != "/extract":
        form["model"] = "whisper-1"
    reply = client.post(path, data=form, content_type="multipart/form-data")
    assert 400 <= reply.status_code < 500, reply.get_data(as_text=True)
    message = reply.get_json()["error"]["message"]
    _no_server_path(message, str(scratch))
    if path == "/extract" and name in ("bad.wav", "bad.png"):
        assert "'.../upload'" in message  # the file the decoder named, without its folder


@pytest.mark.parametrize(
    ("url", "why"),
    [
        ("http://hooks.example.com:65536/hook", "ports are 1-65535"),
        ("http://hooks.example.com:0/hook", "ports are 1-65535"),
        ("ftp://hooks.example.com/hook", "only http and https"),
        ("http://127.1/hook", "non-standard form"),
        ("http://hooks..example.com/hook", "not a host name"),
        ("http://user:pw@hooks.example.com/hook", "user:password"),
        ("hooks.example.com/hook", "only http and https"),
    ],
)
def test_a_callback_url_is_checked_whole_at_submit(
    make_app: Callable[..., Flask], tmp_path: Path, url: str, why: str
) -> None:
    app = make_app(webhook_secret="s", data_dir=str(tmp_path / "data"), job_workers=0)
    reply = app.test_client().post(
        "/v1/jobs",
        query_string={"callback_url": url},
        data={"upload": (io.BytesIO(UNDECODABLE["bad.png"]), "a.png")},
        content_type="multipart/form-data",
    )
    assert reply.status_code == 400, reply.get_data(as_text=True)
    error = reply.get_json()["error"]
    assert error["code"] == "invalid_callback_url" and why in error["message"], error


@pytest.mark.slow  # a real server runs the job
def test_a_failed_job_s_error_names_no_server_path(tmp_path: Path) -> None:
    with fresh_database("sqlite", tmp_path, None) as url:
        server = serve(tmp_path, url)
        try:
            with server.client() as client:
                reply = submit(client, UNDECODABLE["bad.wav"], "bad.wav")
                assert reply.status_code == 202, reply.text
                job = wait_for(client, reply.json()["id"], timeout=120)
                sync = client.post("/extract", files={"upload": ("b.wav", UNDECODABLE["bad.wav"])})
        finally:
            server.stop()
    assert job["status"] == "failed"
    _no_server_path(job["error"]["message"], str(tmp_path))
    assert job["error"] == sync.json()["error"]  # as the synchronous reply says it


@pytest.mark.parametrize("language", ["xx", "de"])  # unknown to Whisper; not in tiny.en
def test_a_language_the_model_lacks_is_refused_at_submit_as_extract_refuses_it(
    make_app: Callable[..., Flask], tmp_path: Path, speech_wav: bytes, language: str
) -> None:
    app = make_app(data_dir=str(tmp_path / "data"), job_workers=0)
    client = app.test_client()
    replies = [
        client.post(
            path,
            query_string={"language": language},
            data={"upload": (io.BytesIO(speech_wav), "speech.wav")},
            content_type="multipart/form-data",
        )
        for path in ("/extract", "/v1/jobs")
    ]
    errors = [reply.get_json()["error"] for reply in replies]
    assert [reply.status_code for reply in replies] == [400, 400], errors
    assert errors[0] == errors[1] and errors[0]["param"] == "language", errors
    listed = client.get("/v1/jobs").get_json()
    assert listed["data"] == [], "the refused job was not queued"


def test_speakers_auto_without_its_extra_is_refused_at_submit_as_extract_refuses_it(
    make_app: Callable[..., Flask], tmp_path: Path, speech_wav: bytes,
    monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    from extractor.asr.speakers import DIARIZER_MODULE

    # None in sys.modules is how Python itself marks a module as not importable.
    monkeypatch.setitem(sys.modules, DIARIZER_MODULE, None)
    client = make_app(data_dir=str(tmp_path / "data"), job_workers=0).test_client()
    replies = [
        client.post(
            path,
            query_string={"speakers": "auto"},
            data={"upload": (io.BytesIO(speech_wav), "speech.wav")},
            content_type="multipart/form-data",
        )
        for path in ("/extract", "/v1/jobs")
    ]
    errors = [reply.get_json()["error"] for reply in replies]
    assert [reply.status_code for reply in replies] == [501, 501], errors
    assert errors[0] == errors[1] and errors[0]["code"] == "speakers_unavailable", errors
    assert client.get("/v1/jobs").get_json()["data"] == [], "the refused job was not queued"

"""POST /v1/audio/transcriptions, driven by the official ``openai`` package and by curl against a
real gunicorn server, with the real default engine."""

from __future__ import annotations

import io
import json
import shutil
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

import openai
import pytest
from flask import Flask
from support import SPOKEN, serving, words_of

from extractor import samples
from extractor.web.openai_api import GRANULARITIES, RENDERINGS

SECRET = "openai-s3cret"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with serving(
        tmp_path_factory.mktemp("openai-server-tmp"), "--workers", "1", "--secret", SECRET
    ) as url:
        yield url


@pytest.fixture(scope="module")
def speech_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if not samples.have_espeak():
        pytest.skip("espeak-ng is not installed")
    path = tmp_path_factory.mktemp("speech") / "speech.wav"
    path.write_bytes(samples.speech(SPOKEN, "wav"))
    return path


@pytest.fixture(scope="module")
def client(server: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=server + "/v1", api_key=SECRET, max_retries=0, timeout=120)


@pytest.fixture(scope="module")
def transcript(client: openai.OpenAI, speech_file: Path) -> set[str]:
    """The words this server hears in the speech file (a plain json request): every other
    rendering of the same decode carries them. Which words they are varies with the CPU
    (tiny.en in espeak's voice); that is the accuracy gate's to judge, not this API's."""
    with speech_file.open("rb") as fh:
        text = client.audio.transcriptions.create(model="whisper-1", file=fh).text
    assert words_of(text) - {""}, text
    return words_of(text)


def test_json(client: openai.OpenAI, speech_file: Path, transcript: set[str]) -> None:
    with speech_file.open("rb") as fh:
        result = client.audio.transcriptions.create(model="whisper-1", file=fh)
    assert words_of(result.text) == transcript, "the same audio decodes the same"


def test_text(client: openai.OpenAI, speech_file: Path, transcript: set[str]) -> None:
    with speech_file.open("rb") as fh:
        text = client.audio.transcriptions.create(
            model="whisper-1", file=fh, response_format="text"
        )
    assert isinstance(text, str)
    assert words_of(text) == transcript, text


@pytest.mark.parametrize(
    ("response_format", "first_line", "separator"), [("srt", "1", ","), ("vtt", "WEBVTT", ".")]
)
def test_subtitles(
    client: openai.OpenAI,
    speech_file: Path,
    transcript: set[str],
    response_format: str,
    first_line: str,
    separator: str,
) -> None:
    with speech_file.open("rb") as fh:
        cues = client.audio.transcriptions.create(
            model="whisper-1", file=fh, response_format=response_format
        )
    assert isinstance(cues, str)
    lines = cues.strip().splitlines()
    assert lines[0] == first_line
    assert any(" --> " in line and f"00{separator}" in line.split(" --> ")[0] for line in lines)
    said = " ".join(line for line in lines[1:] if "-->" not in line and not line.isdigit())
    assert words_of(said) == transcript, cues


def test_verbose_json_with_segments_and_words(
    client: openai.OpenAI, speech_file: Path, transcript: set[str]
) -> None:
    with speech_file.open("rb") as fh:
        result = client.audio.transcriptions.create(
            model="whisper-1",
            file=fh,
            response_format="verbose_json",
            timestamp_granularities=["segment", "word"],
            language="en",
            temperature=0,
        )
    assert words_of(result.text) == transcript, result.text
    assert result.language == "en"
    assert 1.0 < result.duration < 10.0
    assert result.segments, "segments were asked for"
    first = result.segments[0]
    assert 0 <= first.start < first.end <= result.duration
    assert first.tokens and isinstance(first.tokens[0], int), "the decoder's real token ids"
    assert first.avg_logprob < 0 and 0 <= first.no_speech_prob <= 1
    assert result.words, "words were asked for"
    assert [w.word for w in result.words][:2] == result.text.split()[:2]
    starts = [w.start for w in result.words]
    assert starts == sorted(starts) and all(w.start <= w.end for w in result.words)


def test_verbose_json_words_only_leaves_out_segments(
    client: openai.OpenAI, speech_file: Path
) -> None:
    with speech_file.open("rb") as fh:
        result = client.audio.transcriptions.create(
            model="whisper-1", file=fh, response_format="verbose_json",
            timestamp_granularities=["word"],
        )  # fmt: skip
    assert result.words and not getattr(result, "segments", None)


def test_prompt_is_accepted(client: openai.OpenAI, speech_file: Path) -> None:
    with speech_file.open("rb") as fh:
        result = client.audio.transcriptions.create(
            model="whisper-1", file=fh, prompt="A weather report about a park walk."
        )
    assert words_of(result.text) - {""}, "a prompt conditions the words, it does not stop them"


def test_wrong_key_is_an_openai_authentication_error(server: str, speech_file: Path) -> None:
    wrong = openai.OpenAI(base_url=server + "/v1", api_key="nope", max_retries=0)
    with speech_file.open("rb") as fh, pytest.raises(openai.AuthenticationError) as caught:
        wrong.audio.transcriptions.create(model="whisper-1", file=fh)
    assert caught.value.code == "invalid_api_key"


def test_bad_parameters_are_openai_bad_request_errors(
    client: openai.OpenAI, speech_file: Path
) -> None:
    with speech_file.open("rb") as fh, pytest.raises(openai.BadRequestError) as caught:
        client.audio.transcriptions.create(
            model="whisper-1", file=fh, response_format="json", timestamp_granularities=["word"]
        )
    assert caught.value.param == "timestamp_granularities"
    assert "verbose_json" in caught.value.message


def test_curl(server: str, speech_file: Path, transcript: set[str]) -> None:
    if shutil.which("curl") is None:
        pytest.skip("curl is not installed")
    reply = subprocess.run(
        [
            "curl", "-sS", "--max-time", "120", f"{server}/v1/audio/transcriptions",
            "-H", f"Authorization: Bearer {SECRET}", "-F", f"file=@{speech_file}",
            "-F", "model=whisper-1", "-F", "response_format=verbose_json",
        ],
        capture_output=True, check=True, timeout=130,
    )  # fmt: skip
    body = json.loads(reply.stdout)
    assert words_of(body["text"]) == transcript, body["text"]
    assert body["task"] == "transcribe" and body["segments"]


# -- errors, through the Flask test client (no engine needed) --------------------------------


@pytest.mark.parametrize(
    ("form", "param"),
    [
        ({"response_format": "docx"}, "response_format"),
        ({"timestamp_granularities[]": "letter"}, "timestamp_granularities"),
        ({"temperature": "hot"}, "temperature"),
        ({"temperature": "1.5"}, "temperature"),
        ({"temperature": "nan"}, "temperature"),
        ({"language": "english!"}, "language"),
        ({"prompt": "x" * 2001}, "prompt"),
        ({"model": "m" * 201}, "model"),
    ],
)
def test_invalid_fields_name_the_field(
    make_app: Callable[..., Flask], form: dict[str, str], param: str
) -> None:
    client = make_app().test_client()
    data = {**form, "file": (io.BytesIO(b"not even looked at"), "speech.wav")}
    reply = client.post("/v1/audio/transcriptions", data=data, content_type="multipart/form-data")
    assert reply.status_code == 400
    error = reply.get_json()["error"]
    assert error["param"] == param and error["type"] == "invalid_request_error"
    assert error["message"]


def test_missing_file_and_wrong_kind(
    make_app: Callable[..., Flask], page_one: samples.TextPage
) -> None:
    client = make_app().test_client()
    missing = client.post("/v1/audio/transcriptions", data={"model": "whisper-1"})
    assert missing.status_code == 400
    assert missing.get_json()["error"]["param"] == "file"
    png = samples.encode_image(page_one.image, "PNG")
    image = client.post(
        "/v1/audio/transcriptions",
        data={"file": (io.BytesIO(png), "scan.png"), "model": "whisper-1"},
        content_type="multipart/form-data",
    )
    assert 400 <= image.status_code < 500
    assert "not audio" in image.get_json()["error"]["message"]


def test_too_large_upload_is_an_openai_error(make_app: Callable[..., Flask]) -> None:
    client = make_app(max_upload_bytes=1000).test_client()
    reply = client.post(
        "/v1/audio/transcriptions",
        data={"file": (io.BytesIO(b"\0" * 200_000), "big.wav")},
        content_type="multipart/form-data",
    )
    assert reply.status_code == 413
    assert reply.get_json()["error"]["code"] == "payload_too_large"


def test_openapi_documents_the_endpoint() -> None:
    from extractor.web.openapi import load_openapi

    operation = load_openapi()["paths"]["/v1/audio/transcriptions"]["post"]
    form = operation["requestBody"]["content"]["multipart/form-data"]["schema"]["properties"]
    assert form["response_format"]["enum"] == list(RENDERINGS)
    assert form["timestamp_granularities[]"]["items"]["enum"] == list(GRANULARITIES)
    assert {"file", "model", "language", "prompt", "temperature", "stream"} <= set(form)
    assert "text/event-stream" in operation["responses"]["200"]["content"]

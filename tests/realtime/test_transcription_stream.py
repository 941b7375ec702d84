"""POST /v1/audio/transcriptions with stream=true: OpenAI's transcript.text.* events, through
the official client against a real server, the text equal to the reply without stream."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest
from realtime_support import FIRST, SECOND
from support import start_server, stop_server

from extractor.samples import speech_wav


@pytest.fixture(scope="module")
def server() -> Iterator[str]:
    url, process = start_server("--workers", "1")
    try:
        yield url
    finally:
        stop_server(process)


def test_streamed_text_equals_the_reply(server: str) -> None:
    from openai import OpenAI

    client = OpenAI(base_url=server + "/v1", api_key="unused")
    wav = speech_wav(f"{FIRST} Then a long pause. {SECOND}")
    plain = client.audio.transcriptions.create(model="whisper-1", file=("a.wav", wav))
    events = list(
        client.audio.transcriptions.create(model="whisper-1", file=("a.wav", wav), stream=True)
    )
    kinds = [e.type for e in events]
    assert kinds[-1] == "transcript.text.done" and set(kinds[:-1]) == {"transcript.text.delta"}
    deltas = "".join(e.delta for e in events[:-1])  # type: ignore[union-attr]
    assert deltas == events[-1].text == plain.text  # type: ignore[union-attr]
    assert events[-1].usage.seconds > 3  # type: ignore[union-attr]


def test_stream_needs_a_text_format(server: str) -> None:
    reply = httpx.post(
        server + "/v1/audio/transcriptions",
        files={"file": ("a.wav", speech_wav("hello"))},
        data={"model": "whisper-1", "stream": "true", "response_format": "srt"},
        timeout=60,
    )
    assert reply.status_code == 400
    assert reply.json()["error"]["param"] == "stream"

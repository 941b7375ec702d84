"""POST /v1/audio/transcriptions with stream=true: OpenAI's transcript.text.* events, through
the official client and httpx against a real gunicorn server with the real engine.

The deltas joined equal the reply without stream; they arrive while the engine still works
(the first one while the extraction holds its engine slot); a client that leaves stops the
transcription, frees the slot and leaves no files; the request timeout ends a stream with an
``error`` event; errors found before the first event are plain JSON replies.
"""

from __future__ import annotations

import json
import re
import socket
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from realtime_support import FIRST, SECOND
from support import serving, start_server, stop_server

from extractor.samples import repeat_speech, speech_wav, two_speaker_stereo
from extractor.samples.prose import APACHE_DEFINITIONS

ROUTE = "/v1/audio/transcriptions"
GENEROUS = 300  # seconds: a bound for a busy machine, never a figure


@pytest.fixture(scope="module")
def scratch(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("stream-tmp")


@pytest.fixture(scope="module")
def server_log(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("stream-log") / "server.log"


@pytest.fixture(scope="module")
def server(scratch: Path, server_log: Path) -> Iterator[str]:
    with serving(scratch, "--workers", "1", log=server_log) as url:
        yield url


@pytest.fixture(scope="module")
def minute() -> bytes:
    """About a minute of speech (espeak-ng reading the Apache License's definitions)."""
    return repeat_speech(APACHE_DEFINITIONS.replace("\n", " "), 60)


def events(
    url: str, wav: bytes, request_id: str | None = None, **form: str
) -> Iterator[tuple[float, dict[str, Any]]]:
    """The stream's events, each with the seconds since the request when it arrived;
    ``request_id`` names the request in the server's log (X-Request-ID)."""
    started = time.monotonic()
    data = {"model": "whisper-1", "stream": "true", **form}
    headers = {"X-Request-ID": request_id} if request_id else None
    with httpx.stream("POST", url + ROUTE, files={"file": ("a.wav", wav)}, data=data,
                      headers=headers, timeout=GENEROUS) as reply:  # fmt: skip
        assert reply.status_code == 200, reply.read()
        assert reply.headers["content-type"].startswith("text/event-stream")
        for line in reply.iter_lines():
            if line.startswith("data: "):
                yield time.monotonic() - started, json.loads(line[6:])


def engines_busy(url: str) -> float:
    """Extractions running or queued in the server (its ``extractor_queue_depth``)."""
    text = httpx.get(url + "/metrics", timeout=30).text
    match = re.search(r"^extractor_queue_depth(?:\{[^}]*\})? (\S+)$", text, re.M)
    assert match, text
    return float(match.group(1))


def audio_seconds(url: str) -> float:
    text = httpx.get(url + "/metrics", timeout=30).text
    match = re.search(r"^extractor_audio_seconds_total (\S+)$", text, re.M)
    return float(match.group(1)) if match else 0.0


def wait_idle(url: str) -> None:
    deadline = time.monotonic() + GENEROUS
    while engines_busy(url) > 0:
        assert time.monotonic() < deadline, "the engine slot was never released"
        time.sleep(0.2)


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


@pytest.mark.slow
def test_a_minute_streams_as_it_is_decoded(server: str, minute: bytes) -> None:
    """On a minute of speech the first delta comes while the engine still works (its slot
    held), well before ``done``; the deltas joined are the plain reply's text exactly."""
    plain = httpx.post(server + ROUTE, files={"file": ("a.wav", minute)},
                       data={"model": "whisper-1"}, timeout=GENEROUS)  # fmt: skip
    assert plain.status_code == 200
    wait_idle(server)
    counted = audio_seconds(server)
    deltas: list[tuple[float, str]] = []
    busy_at_first = None
    for at, event in events(server, minute):
        if event["type"] == "transcript.text.delta":
            if not deltas:
                busy_at_first = engines_busy(server)
            deltas.append((at, event["delta"]))
        else:
            assert event["type"] == "transcript.text.done", event
            done_at, text = at, event["text"]
    assert busy_at_first == 1, "the first delta came only after the transcription ended"
    assert len(deltas) > 1
    assert deltas[0][0] < done_at
    assert "".join(d for _at, d in deltas) == text == plain.json()["text"]
    assert len(text.split()) > 100  # a minute of speech, heard
    wait_idle(server)
    assert audio_seconds(server) - counted == pytest.approx(60, abs=1)  # counted as a reply's


def test_word_timed_lines_stream_the_same_text(server: str) -> None:
    """words=on makes lines of the engine's words rather than its segment text: the deltas
    are made the same way."""
    wav = speech_wav(f"{FIRST} {SECOND}")
    form = {"model": "whisper-1", "words": "on"}
    plain = httpx.post(server + ROUTE, files={"file": ("a.wav", wav)}, data=form,
                       timeout=GENEROUS)  # fmt: skip
    assert plain.status_code == 200, plain.text
    seen = [event for _at, event in events(server, wav, words="on")]
    deltas = "".join(e["delta"] for e in seen if e["type"] == "transcript.text.delta")
    assert deltas == seen[-1]["text"] == plain.json()["text"]


def test_speaker_lines_come_at_the_end_and_equal_the_reply(server: str) -> None:
    """speakers=channels: lines are ordered by time across both channels once both are
    heard, so their deltas come at the end; joined they still equal the plain reply."""
    wav = two_speaker_stereo(FIRST, SECOND)
    form = {"model": "whisper-1", "speakers": "channels"}
    plain = httpx.post(server + ROUTE, files={"file": ("a.wav", wav)}, data=form,
                       timeout=GENEROUS)  # fmt: skip
    assert plain.status_code == 200, plain.text
    seen = [event for _at, event in events(server, wav, speakers="channels")]
    assert [e["type"] for e in seen][-1] == "transcript.text.done"
    deltas = "".join(e["delta"] for e in seen if e["type"] == "transcript.text.delta")
    assert deltas == seen[-1]["text"] == plain.json()["text"]
    assert len(seen) >= 3  # one delta per line: a line of each speaker


@pytest.mark.slow
def test_a_client_that_leaves_stops_the_transcription(
    server: str, scratch: Path, server_log: Path
) -> None:
    """Closing the connection after the first delta: the engine stops (it does not finish
    the five minutes), its slot is free, the workspace is gone, and the next request works."""
    wav = repeat_speech(APACHE_DEFINITIONS.replace("\n", " "), 300)
    wait_idle(server)
    request_id = uuid.uuid4().hex
    stream = events(server, wav, request_id)
    _at, first = next(stream)
    assert first["type"] == "transcript.text.delta"
    stream.close()  # the connection closes here
    wait_idle(server)
    # This stream's own record: the slot is free before its thread removes the workspace and
    # logs, and the module's earlier streams logged "finished" (the last record was theirs).
    ended = _record_of(server_log, "streamed transcription ended", request_id)
    assert ended["outcome"] == "stopped: client gone", ended
    workspaces = [p for p in scratch.iterdir() if re.fullmatch(r"extractor-\d+-\d+", p.name)]
    assert workspaces == [], "the stream's workspace was left behind"
    reply = httpx.post(server + ROUTE, files={"file": ("a.wav", speech_wav(FIRST))},
                       data={"model": "whisper-1"}, timeout=GENEROUS)  # fmt: skip
    # The next request is served whole: words, whichever ones tiny.en hears on this CPU.
    assert reply.status_code == 200 and reply.json()["text"].split(), reply.text


@pytest.mark.slow
def test_a_client_that_leaves_before_the_first_event_stops_it(
    server: str, scratch: Path, server_log: Path
) -> None:
    """A client that sends ten minutes and hangs up while the server is still reading them
    (the VAD runs over the whole recording before the first window is decoded): stopped too."""
    wav = repeat_speech(APACHE_DEFINITIONS.replace("\n", " "), 600)
    wait_idle(server)
    request_id = uuid.uuid4().hex
    body, boundary = _multipart(wav, {"model": "whisper-1", "stream": "true"})
    port = int(server.rsplit(":", 1)[1])
    with socket.create_connection(("127.0.0.1", port)) as sock:
        sock.sendall(
            f"POST {ROUTE} HTTP/1.1\r\nHost: s\r\nContent-Length: {len(body)}\r\n"
            f"X-Request-ID: {request_id}\r\n"
            f"Content-Type: multipart/form-data; boundary={boundary}\r\n\r\n".encode()
            + body
        )
        deadline = time.monotonic() + GENEROUS
        while engines_busy(server) == 0:  # received whole, and queued or running
            assert time.monotonic() < deadline
            time.sleep(0.05)
    wait_idle(server)
    ended = _record_of(server_log, "streamed transcription ended", request_id)
    assert ended["outcome"] == "stopped: client gone", ended
    workspaces = [p for p in scratch.iterdir() if re.fullmatch(r"extractor-\d+-\d+", p.name)]
    assert workspaces == []
    gone = [r for r in _log_records(server_log, "transcription stream ended")
            if r["request_id"] == request_id and r["outcome"] == "client gone"
            and r["events"] == 0]  # fmt: skip
    assert gone, "the request thread did not see its client leave"


def test_errors_before_the_first_event_are_json_replies(server: str) -> None:
    """What is found wrong before any event (here a file that claims to be audio and does not
    decode, and a language the English-only model lacks) is the plain OpenAI error reply."""
    broken = b"RIFF\x24\x00\x00\x00WAVEfmt " + b"\x00" * 40
    for files, form in (
        ({"file": ("a.wav", broken)}, {}),
        ({"file": ("a.wav", speech_wav(FIRST))}, {"language": "fr"}),
    ):
        reply = httpx.post(server + ROUTE, files=files, timeout=GENEROUS,
                           data={"model": "whisper-1", "stream": "true", **form})  # fmt: skip
        assert 400 <= reply.status_code < 500, reply.text
        assert reply.headers["content-type"] == "application/json"
        assert reply.json()["error"]["message"]


def test_stream_needs_a_text_format(server: str) -> None:
    reply = httpx.post(
        server + ROUTE,
        files={"file": ("a.wav", speech_wav("hello"))},
        data={"model": "whisper-1", "stream": "true", "response_format": "srt"},
        timeout=60,
    )
    assert reply.status_code == 400
    assert reply.json()["error"]["param"] == "stream"


@pytest.mark.slow
def test_the_request_timeout_ends_a_stream_with_an_error_event(tmp_path: Path) -> None:
    """Fifteen minutes of speech against a 20 s request timeout: deltas, then one ``error``
    event (OpenAI's error document, code engine_timeout) and no ``done``; the official client
    raises APIError on it. 20 s leaves a busy machine room for the first delta (~2.5 s idle
    here; 12 s was once too short under a deliberately loaded xdist run: a 504 before any
    delta) and is half the ~40 s the whole takes idle (ten minutes: 26 s)."""
    from openai import APIError, OpenAI

    wav = repeat_speech(APACHE_DEFINITIONS.replace("\n", " "), 900)
    url, process = start_server("--workers", "1", env={"EXTRACTOR_REQUEST_TIMEOUT": "20"})
    try:
        seen = list(events(url, wav))
        kinds = [event["type"] for _at, event in seen]
        assert kinds[0] == "transcript.text.delta"
        assert kinds[-1] == "error" and "transcript.text.done" not in kinds
        error = seen[-1][1]["error"]
        assert error["code"] == "engine_timeout" and error["type"] == "server_error"
        wait_idle(url)
        client = OpenAI(base_url=url + "/v1", api_key="unused", max_retries=0)
        stream = client.audio.transcriptions.create(model="whisper-1", file=("a.wav", wav),
                                                    stream=True)  # fmt: skip
        with pytest.raises(APIError, match="timeout"):
            for _event in stream:
                pass
    finally:
        stop_server(process)


def _log_records(path: Path, message: str) -> list[dict[str, Any]]:
    records = []
    for line in path.read_text(errors="replace").splitlines():
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if isinstance(record, dict) and record.get("event") == message:
            records.append(record)
    return records


def _record_of(path: Path, message: str, request_id: str) -> dict[str, Any]:
    """The server's ``message`` record of request ``request_id``, once it is logged."""
    deadline = time.monotonic() + GENEROUS
    while True:
        for record in _log_records(path, message):
            if record.get("request_id") == request_id:
                return record
        assert time.monotonic() < deadline, f"no {message!r} record of {request_id}"
        time.sleep(0.2)


def _multipart(data: bytes, fields: dict[str, str]) -> tuple[bytes, str]:
    boundary = "stream-test-boundary"
    parts = [
        f'--{boundary}\r\nContent-Disposition: form-data; name="{k}"\r\n\r\n{v}\r\n'.encode()
        for k, v in fields.items()
    ]
    parts.append(
        f'--{boundary}\r\nContent-Disposition: form-data; name="file"; filename="a.wav"\r\n'
        "Content-Type: audio/wav\r\n\r\n".encode()
        + data
        + b"\r\n"
    )
    return b"".join(parts) + f"--{boundary}--\r\n".encode(), boundary

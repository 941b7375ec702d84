"""WS /v1/realtime?intent=transcription on a real gunicorn server over loopback: the official
openai client for the protocol, a raw WebSocket client for the refusals and the limits."""

from __future__ import annotations

import base64
import functools
import json
import os
import signal
import subprocess
import sys
import threading
import time
import wave
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest
from realtime_support import (
    ALIKE,
    FIRST,
    SECOND,
    append,
    appends,
    extracted,
    g711,
    likeness,
    live_metric,
    pcm,
    silence,
)
from support import start_server, stop_server
from tls_proxy import self_signed, tls_proxy
from websockets.exceptions import ConnectionClosed, InvalidStatus
from websockets.sync.client import ClientConnection, connect

from extractor.realtime.audio import G711_TABLES

SECRET = "live-secret"


@pytest.fixture(scope="module")
def server() -> Iterator[str]:
    url, process = start_server(
        "--workers", "1", "--secret", SECRET, "--realtime-sessions", "2",
        "--realtime-max-append-bytes", "65536", "--realtime-idle-timeout", "3",
    )  # fmt: skip
    try:
        yield url
    finally:
        stop_server(process)


@functools.cache
def alone(url: str, text: str) -> list[str]:
    """The words the server's /extract hears in ``text`` spoken: the same engine run alone on
    the speech a live turn is held to (which words tiny.en hears depends on the CPU)."""
    return extracted(url, pcm(text), SECRET)


def wav_file(path: Path, pcm16: bytes) -> Path:
    """``pcm16`` (mono, 24 kHz) as a WAV file, for `extractor listen FILE`."""
    with wave.open(str(path), "wb") as out:
        out.setnchannels(1)
        out.setsampwidth(2)
        out.setframerate(24_000)
        out.writeframes(pcm16)
    return path


def live_audio_seconds(url: str) -> float:
    """The seconds of audio the server's live sessions have received (its /metrics)."""
    return live_metric(url, "extractor_realtime_audio_seconds_total")


def ws_url(url: str, query: str = "intent=transcription") -> str:
    return url.replace("http://", "ws://") + "/v1/realtime?" + query


def raw(url: str, **kwargs: Any) -> ClientConnection:
    headers = {"Authorization": f"Bearer {SECRET}"}
    return connect(ws_url(url), additional_headers=headers, open_timeout=30, **kwargs)


def events_until(ws: ClientConnection, kind: str, timeout: float = 60) -> list[dict[str, Any]]:
    got: list[dict[str, Any]] = []
    deadline = time.monotonic() + timeout
    while True:
        got.append(json.loads(ws.recv(timeout=max(0.1, deadline - time.monotonic()))))
        if got[-1]["type"] == kind:
            return got


@contextmanager
def holding(*sockets: ClientConnection) -> Iterator[None]:
    """Keeps ``sockets``' sessions open past the server's 3 s idle timeout (40 ms of silence
    each half second): a test that needs the streams' places taken while another client
    starts, which takes seconds on a loaded machine, must not see them freed by idleness."""
    stop = threading.Event()

    def feed() -> None:
        while not stop.wait(0.5):
            for ws in sockets:
                ws.send(append(silence(0.04)))

    feeder = threading.Thread(target=feed, daemon=True)
    feeder.start()
    try:
        yield
    finally:
        stop.set()
        feeder.join()


def test_the_official_client_transcribes_live(server: str) -> None:
    """openai 3.x, unchanged, with base_url on this server: deltas while speaking, each turn
    completed with the deltas' text and its duration."""
    from openai import OpenAI

    client = OpenAI(base_url=server + "/v1", api_key=SECRET)
    audio = silence(0.5) + pcm(FIRST) + silence(1.2) + pcm(SECOND) + silence(1.2)
    received: list[tuple[float, Any]] = []
    with client.realtime.connect(extra_query={"intent": "transcription"}) as conn:
        assert conn.recv().type == "session.created"
        conn.session.update(
            session={
                "type": "transcription",
                "audio": {
                    "input": {
                        "format": {"type": "audio/pcm", "rate": 24000},
                        "transcription": {"model": "whisper-1", "language": "en"},
                        "turn_detection": {"type": "server_vad", "silence_duration_ms": 500},
                    }
                },
            }
        )

        def read() -> None:
            for event in conn:
                received.append((time.monotonic(), event))
                done = [e for _t, e in received if e.type == "conversation.item.done"]
                if len(done) == 2:
                    return

        reader = threading.Thread(target=read)
        reader.start()
        size = 24_000 * 2 * 40 // 1000
        # Paced as a microphone sends it, 40 ms each 40 ms: the partial decodes (three must
        # agree on a word) then run while the turn is spoken, even on a loaded machine.
        for start in range(0, len(audio), size):
            conn.input_audio_buffer.append(
                audio=base64.b64encode(audio[start : start + size]).decode()
            )
            time.sleep(0.04)
        reader.join(timeout=90)
    events = [e for _t, e in received]
    assert events[0].type == "session.updated"
    assert events[0].session.audio.input.turn_detection.silence_duration_ms == 500
    completed = [
        e for e in events if e.type == "conversation.item.input_audio_transcription.completed"
    ]
    assert len(completed) == 2
    for done in completed:
        deltas = [
            e.delta
            for e in events
            if e.type == "conversation.item.input_audio_transcription.delta"
            and e.item_id == done.item_id
        ]
        assert "".join(deltas) == done.transcript
        assert done.usage.type == "duration" and done.usage.seconds > 2
    assert likeness(completed[0].transcript, alone(server, FIRST)) >= ALIKE
    assert likeness(completed[1].transcript, alone(server, SECOND)) >= ALIKE
    # The server's extension events (the revisable tail) came, and the client read them along
    # with the rest: it keeps the fields of an event type it does not know.
    tails = [e for e in events if e.type.startswith("x_")]
    assert tails and {e.item_id for e in tails} <= {e.item_id for e in completed}
    assert all(isinstance(e.text, str) for e in tails)
    # Partial words: a turn's text comes in more than one delta (when they arrive relative to
    # the speech is the bench's business, bench/realtime.py, not a loaded test machine's).
    assert (
        max(
            sum(
                1
                for e in events
                if getattr(e, "item_id", None) == done.item_id and e.type.endswith("delta")
            )
            for done in completed
        )
        >= 2
    )


@pytest.mark.parametrize(
    ("shape", "codec"),
    [
        ({"type": "session.update", "session": {"type": "transcription", "audio": {
            "input": {"format": {"type": "audio/pcmu"}}}}}, "pcm_mulaw"),
        ({"type": "transcription_session.update",
          "session": {"input_audio_format": "g711_alaw"}}, "pcm_alaw"),
    ],
    ids=["session.update audio/pcmu", "transcription_session.update g711_alaw"],
)  # fmt: skip
def test_g711_telephone_audio_over_the_wire(server: str, shape: dict[str, Any], codec: str) -> None:
    """8 kHz G.711 as a telephony bridge sends it, set by either shape of the update."""
    with raw(server) as ws:
        assert json.loads(ws.recv(timeout=30))["type"] == "session.created"
        ws.send(json.dumps(shape))
        updated = json.loads(ws.recv(timeout=30))
        assert updated["type"] == shape["type"].replace("update", "updated"), updated
        audio = g711(silence(0.5, 8_000) + pcm(FIRST, 8_000) + silence(1.2, 8_000), codec)
        for start in range(0, len(audio), 320):  # 40 ms a message: 320 one-byte samples
            ws.send(append(audio[start : start + 320]))
        events = events_until(ws, "conversation.item.input_audio_transcription.completed")
    assert not [e for e in events if e["type"] == "error"], events
    # As /extract hears the same 8 kHz audio, expanded from G.711 (telephone audio is heard
    # otherwise than the 24 kHz voice).
    kind = "audio/pcmu" if codec == "pcm_mulaw" else "audio/pcma"
    expanded = (G711_TABLES[kind][np.frombuffer(audio, np.uint8)] * 32767).astype("<i2")
    heard = extracted(server, expanded.tobytes(), SECRET, rate=8_000)
    assert likeness(events[-1]["transcript"], heard) >= ALIKE, heard
    assert 2 < events[-1]["usage"]["seconds"] < len(audio) / 8_000  # the turn, not the silence


@pytest.mark.parametrize(
    ("how", "headers", "subprotocols", "query"),
    [
        ("bearer", {"Authorization": f"Bearer {SECRET}"}, None, "intent=transcription"),
        ("browser", {}, ["realtime", f"openai-insecure-api-key.{SECRET}"], "intent=transcription"),
        ("query", {}, None, f"intent=transcription&api_key={SECRET}"),
    ],
)
def test_the_secret_in_each_of_its_three_places(
    server: str, how: str, headers: dict[str, str], subprotocols: list[str] | None, query: str
) -> None:
    with connect(
        ws_url(server, query),
        additional_headers=headers,
        subprotocols=subprotocols,  # type: ignore[arg-type]
        open_timeout=30,
    ) as ws:
        assert json.loads(ws.recv(timeout=30))["type"] == "session.created"
        if how == "browser":
            assert ws.subprotocol == "realtime"


@pytest.mark.parametrize(
    ("headers", "subprotocols", "query", "status", "code"),
    [
        ({}, None, "intent=transcription", 401, "invalid_api_key"),
        ({"Authorization": "Bearer wrong"}, None, "intent=transcription", 401, "invalid_api_key"),
        (
            {},
            ["realtime", "openai-insecure-api-key.wrong"],
            "intent=transcription",
            401,
            "invalid_api_key",
        ),
        ({}, None, "intent=transcription&api_key=wrong", 401, "invalid_api_key"),
        (
            {"Authorization": f"Bearer {SECRET}"},
            None,
            "model=gpt-realtime",
            400,
            "unsupported_intent",
        ),
    ],
)
def test_refused_before_any_audio_is_read(
    server: str,
    headers: dict[str, str],
    subprotocols: list[str] | None,
    query: str,
    status: int,
    code: str,
) -> None:
    with pytest.raises(InvalidStatus) as refused:
        connect(
            ws_url(server, query),
            additional_headers=headers,
            subprotocols=subprotocols,  # type: ignore[arg-type]
            open_timeout=30,
        )
    response = refused.value.response
    assert response.status_code == status
    assert json.loads(response.body)["error"]["code"] == code


def test_mistakes_over_the_wire_keep_the_session(server: str) -> None:
    with raw(server) as ws:
        events_until(ws, "session.created")
        ws.send("{nope")
        ws.send(json.dumps({"type": "conversation.item.create", "event_id": "evt_9"}))
        ws.send(b"\x00binary")
        too_big = base64.b64encode(bytes(200_000)).decode()  # over the server's 64 KiB
        ws.send(json.dumps({"type": "input_audio_buffer.append", "audio": too_big}))
        # Dropped unparsed, yet its error names it, wherever the key is:
        ws.send(
            json.dumps({"event_id": "big_1", "type": "input_audio_buffer.append", "audio": too_big})
        )
        ws.send(
            json.dumps({"type": "input_audio_buffer.append", "audio": too_big, "event_id": "big_2"})
        )
        ws.send(json.dumps({"type": "input_audio_buffer.clear"}))
        got = events_until(ws, "input_audio_buffer.cleared")
    errors = [e["error"] for e in got if e["type"] == "error"]
    assert [e["code"] for e in errors] == [
        "invalid_json", "unknown_event", "invalid_event", *["audio_too_large"] * 3,
    ]  # fmt: skip
    assert [e["event_id"] for e in errors] == [None, "evt_9", None, None, "big_1", "big_2"]


def test_one_stream_beyond_the_limit_is_told_and_closed_1013(server: str) -> None:
    with raw(server) as one, raw(server) as two:
        events_until(one, "session.created")
        events_until(two, "session.created")
        with holding(one, two), raw(server) as three:
            (error,) = [e for e in events_until(three, "error")]
            assert error["error"]["code"] == "session_limit_reached"
            assert "EXTRACTOR_REALTIME_SESSIONS" in error["error"]["message"]
            with pytest.raises(ConnectionClosed):
                three.recv(timeout=10)
            assert three.close_code == 1013
            metrics = httpx.get(server + "/metrics", timeout=10).text
        assert 'extractor_realtime_refused_total{code="session_limit_reached"}' in metrics
        # The two admitted streams still work (a sentence: a two-word phrase hangs on one
        # word, "Hello there." heard as "Below there." with beam 5 and "Hello, Nairr." greedy).
        for ws in (one, two):
            for message in appends(silence(0.3) + pcm(FIRST) + silence(0.2)):
                ws.send(message)
            ws.send(json.dumps({"type": "input_audio_buffer.commit"}))
        for ws in (one, two):
            done = events_until(ws, "conversation.item.input_audio_transcription.completed")
            assert likeness(done[-1]["transcript"], alone(server, FIRST)) >= ALIKE


def test_an_idle_session_is_closed(server: str) -> None:
    with raw(server) as ws:
        events_until(ws, "session.created")
        started = time.monotonic()
        (error,) = [e for e in events_until(ws, "error", timeout=20)]
        assert error["error"]["code"] == "idle_timeout"
        with pytest.raises(ConnectionClosed):
            ws.recv(timeout=10)
        assert ws.close_code == 1001
        assert 2.5 < time.monotonic() - started < 15


def test_extractor_listen_prints_the_words(server: str, tmp_path: Path) -> None:
    """`extractor listen FILE` and `extractor listen` (raw PCM16 at 16 kHz on stdin) print each
    turn's words on a line; a wrong secret is an error naming the refusal. With ``--fast``
    the whole file is on the server before its first turn completes: every turn is still
    printed, not only those done when the audio ran out."""
    wav = wav_file(
        tmp_path / "speech.wav",
        silence(0.3) + pcm(FIRST) + silence(1.2) + pcm(SECOND) + silence(0.5),
    )
    command = [sys.executable, "-m", "extractor.cli", "listen", "--url", server]
    shown = subprocess.run(
        [*command, str(wav), "--secret", SECRET, "--fast"],
        capture_output=True, text=True, timeout=120, check=True,
    )  # fmt: skip
    lines = shown.stdout.strip().splitlines()
    assert len(lines) == 2, lines
    assert likeness(lines[0], alone(server, FIRST)) >= ALIKE
    assert likeness(lines[1], alone(server, SECOND)) >= ALIKE
    raw16 = silence(0.3, 16_000) + pcm(SECOND, 16_000) + silence(1, 16_000)
    piped = subprocess.run(
        [*command, "--rate", "16000", "--secret", SECRET],  # no FILE: standard input
        input=raw16, capture_output=True, timeout=120, check=True,
    )  # fmt: skip
    assert likeness(piped.stdout.decode(), alone(server, SECOND)) >= ALIKE
    refused = subprocess.run(
        [*command, str(wav), "--secret", "wrong"], capture_output=True, text=True, timeout=60
    )
    assert refused.returncode != 0 and "refused with 401" in refused.stderr
    # A file that is not there, or not audio, is named before any connection.
    (tmp_path / "notes.txt").write_text("not audio")
    for name in ("missing.wav", "notes.txt"):
        unreadable = subprocess.run(
            [*command, str(tmp_path / name), "--secret", SECRET],
            capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        assert unreadable.returncode != 0, name
        assert f"cannot read {tmp_path / name}" in unreadable.stderr, unreadable.stderr
        assert "Traceback" not in unreadable.stderr


def test_extractor_listen_on_a_terminal_redraws_the_tail(server: str, tmp_path: Path) -> None:
    """On a terminal (a pty, its screen emulated by pyte), the words not yet confirmed show
    dimmed after each turn's words and are redrawn as they change: the screen ends with each
    turn's confirmed words alone, exactly what the deltas printed."""
    import fcntl
    import pty
    import re
    import select
    import struct
    import termios

    import pyte

    wav = wav_file(tmp_path / "speech.wav", silence(0.3) + pcm(FIRST) + silence(1.2))
    master, tty = pty.openpty()
    fcntl.ioctl(tty, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 40, 0, 0))  # 40 columns
    env = {k: v for k, v in os.environ.items() if k not in ("NO_COLOR", "COLUMNS", "LINES")}
    command = [sys.executable, "-m", "extractor.cli", "listen", "--url", server]
    child = subprocess.Popen(
        [*command, str(wav), "--secret", SECRET], stdout=tty, stderr=subprocess.PIPE,
        env={**env, "TERM": "xterm"},
    )  # fmt: skip
    os.close(tty)
    raw, deadline = b"", time.monotonic() + 120
    while time.monotonic() < deadline:
        if not select.select([master], [], [], 1)[0]:
            if child.poll() is not None:
                break
            continue
        try:
            chunk = os.read(master, 65536)
        except OSError:  # EIO: the child closed the terminal
            break
        if not chunk:
            break
        raw += chunk
    os.close(master)
    assert child.wait(timeout=30) == 0, child.stderr.read() if child.stderr else ""
    text = raw.decode()
    assert "\x1b[2m" in text, "no tail was drawn"
    # What the deltas printed: the output without the tails and the cursor movements.
    words = re.sub(r"\x1b\[2m.*?\x1b\[0m|\x1b\[\d*[A-Za-z]|\r", "", text, flags=re.S)
    screen = pyte.Screen(40, 24)
    pyte.ByteStream(screen).feed(raw)
    rows = [row.rstrip() for row in screen.display if row.strip()]
    printed = words.strip().splitlines()
    assert len(printed) == 1 and likeness(printed[0], alone(server, FIRST)) >= ALIKE
    assert "".join(row.ljust(40) for row in rows).rstrip() == printed[0], (rows, text)


def test_extractor_listen_finishes_the_turn_on_ctrl_c(server: str) -> None:
    """Ctrl-C on `extractor listen -` stops reading the microphone; the words of the turn
    being spoken still come (the audio sent is committed), then it exits 130, as Ctrl-C does."""
    command = [sys.executable, "-m", "extractor.cli", "listen", "--url", server, "-"]
    audio = silence(0.3) + pcm(FIRST)  # no pause after it: the turn is open
    before = live_audio_seconds(server)
    listener = subprocess.Popen(
        [*command, "--secret", SECRET], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=False,
        # A test run started in the background (`make test &`) ignores SIGINT, and a process
        # started with it ignored keeps ignoring it: Ctrl-C is what is under test here.
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )  # fmt: skip
    try:
        assert listener.stdin is not None
        listener.stdin.write(audio)
        listener.stdin.flush()
        # Ctrl-C once the audio is on the server (a pipe is not paced), not at a guessed time:
        # on a loaded machine the client may still be importing its modules after seconds.
        sent = len(audio) / (24_000 * 2) - 0.1
        deadline = time.monotonic() + 60
        while live_audio_seconds(server) < before + sent and time.monotonic() < deadline:
            time.sleep(0.1)
        listener.send_signal(signal.SIGINT)
        out, err = listener.communicate(timeout=60)
    finally:
        listener.kill()
    assert listener.returncode == 130, err
    assert b"stopped" in err
    assert likeness(out.decode(), alone(server, FIRST)) >= ALIKE


def test_extractor_listen_says_why_the_server_refused_the_stream(
    server: str, tmp_path: Path
) -> None:
    """A stream beyond the server's limit: the server's reason, exit status 1, no hang."""
    wav = wav_file(tmp_path / "speech.wav", silence(0.3) + pcm(FIRST) + silence(0.5))
    with raw(server) as one, raw(server) as two:
        events_until(one, "session.created")
        events_until(two, "session.created")
        with holding(one, two):
            refused = subprocess.run(
                [sys.executable, "-m", "extractor.cli", "listen", "--url", server, str(wav),
                 "--secret", SECRET],
                capture_output=True, text=True, timeout=60,
            )  # fmt: skip
    assert refused.returncode == 1
    assert "EXTRACTOR_REALTIME_SESSIONS" in refused.stderr
    assert "Traceback" not in refused.stderr


def test_extractor_listen_over_tls(server: str, tmp_path: Path) -> None:
    """`extractor listen https://...` through a TLS-terminating proxy (what an ingress is):
    the words come when the system trusts the certificate (SSL_CERT_FILE here), and an
    untrusted one is a one-line refusal, not a traceback."""
    wav = wav_file(tmp_path / "speech.wav", silence(0.3) + pcm(FIRST) + silence(0.5))
    cert, key = self_signed(tmp_path)
    backend = int(server.rsplit(":", 1)[1])
    with tls_proxy(backend, cert, key) as port:
        command = [sys.executable, "-m", "extractor.cli", "listen", str(wav), "--fast",
                   "--secret", SECRET, "--url", f"https://127.0.0.1:{port}"]  # fmt: skip
        trusted = {**os.environ, "SSL_CERT_FILE": str(cert)}
        shown = subprocess.run(command, capture_output=True, text=True, timeout=120, env=trusted)
        assert shown.returncode == 0, shown.stderr
        assert likeness(shown.stdout, alone(server, FIRST)) >= ALIKE
        untrusted = {k: v for k, v in os.environ.items() if k != "SSL_CERT_FILE"}
        refused = subprocess.run(command, capture_output=True, text=True, timeout=60, env=untrusted)
    assert refused.returncode != 0
    assert "cannot connect" in refused.stderr and "CERTIFICATE_VERIFY_FAILED" in refused.stderr
    assert "Traceback" not in refused.stderr


def test_live_metrics(server: str) -> None:
    """Open streams, audio seconds and both latencies are on /metrics."""
    with raw(server) as ws:
        events_until(ws, "session.created")
        for message in appends(silence(0.3) + pcm(FIRST) + silence(0.8)):
            ws.send(message)
        events_until(ws, "conversation.item.done")
        text = httpx.get(server + "/metrics", timeout=10).text
        assert "extractor_realtime_streams 1.0" in text
    for name in (
        "extractor_realtime_audio_seconds_total",
        "extractor_realtime_word_latency_seconds_bucket",
        "extractor_realtime_completed_latency_seconds_count",
    ):
        assert name in text, name

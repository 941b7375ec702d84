"""The protocol's client-event checks: each mistake is a specific, recoverable error event."""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest
from realtime_support import pcm, silence

from extractor.realtime.audio import G711_TABLES, AudioInput
from extractor.realtime.decoder import WindowDecoder
from extractor.realtime.events import event_id_in
from extractor.realtime.session import Session


@pytest.mark.parametrize(
    ("message", "code", "param"),
    [
        ("{not json", "invalid_json", None),
        ("[1, 2]", "invalid_event", None),
        (b"\x00\x01", "invalid_event", None),
        (json.dumps({"type": "response.create", "event_id": "e1"}), "unknown_event", "type"),
        (
            json.dumps({"type": "input_audio_buffer.append", "audio": "%%%", "event_id": "e1"}),
            "invalid_audio",
            "audio",
        ),
        (
            json.dumps({"type": "input_audio_buffer.append", "audio": 5, "event_id": "e1"}),
            "invalid_value",
            "audio",
        ),
        (
            json.dumps(
                {
                    "type": "input_audio_buffer.append",
                    "audio": base64.b64encode(bytes(2000)).decode(),
                    "event_id": "e1",
                }
            ),
            "audio_too_large",
            "audio",
        ),
        (
            json.dumps(
                {
                    "type": "session.update",
                    "event_id": "e1",
                    "session": {
                        "audio": {"input": {"format": {"type": "audio/pcm", "rate": 44100}}}
                    },
                }
            ),
            "invalid_value",
            "session.audio.input.format",
        ),
        (
            json.dumps(
                {
                    "type": "session.update",
                    "event_id": "e1",
                    "session": {"type": "realtime"},
                }
            ),
            "invalid_value",
            "session.type",
        ),
        (
            json.dumps(
                {
                    "type": "transcription_session.update",
                    "event_id": "e1",
                    "session": {"turn_detection": {"type": "semantic_vad"}},
                }
            ),
            "invalid_value",
            "session.turn_detection",  # where the older shape has it
        ),
        (
            json.dumps(
                {
                    "type": "transcription_session.update",
                    "event_id": "e1",
                    "session": {"input_audio_transcription": {"language": "de"}},
                }
            ),
            "unsupported_language",
            "session.input_audio_transcription.language",
        ),
        (
            json.dumps(
                {
                    "type": "session.update",
                    "event_id": "e1",
                    "session": {"audio": {"input": {"turn_detection": {"type": "semantic_vad"}}}},
                }
            ),
            "invalid_value",
            "session.audio.input.turn_detection",
        ),
        (
            json.dumps(
                {
                    "type": "session.update",
                    "event_id": "e1",
                    "session": {"audio": {"input": {"transcription": {"language": "de"}}}},
                }
            ),
            "unsupported_language",
            "session.audio.input.transcription.language",
        ),
        (
            json.dumps({"type": "input_audio_buffer.commit", "event_id": "e1"}),
            "input_audio_buffer_commit_empty",
            None,
        ),
    ],
)
def test_each_mistake_gets_its_error_and_the_session_goes_on(
    decoder: WindowDecoder, message: str | bytes, code: str, param: str | None
) -> None:
    ok = json.dumps({"type": "input_audio_buffer.clear"})
    out: list[dict[str, Any]] = []
    session = Session(decoder, out.append, max_append_bytes=1000)
    for each in (message, ok):
        session.receive(each)
        while session.step():
            pass
    (error,) = [e["error"] for e in out if e["type"] == "error"]
    assert error["code"] == code and error["param"] == param
    assert error["type"] == "invalid_request_error" and error["message"]
    if isinstance(message, str) and '"event_id"' in message:
        assert error["event_id"] == json.loads(message)["event_id"]
    assert out[-1]["type"] == "input_audio_buffer.cleared", "the session is still open"


def test_updates_answer_in_their_own_shape(decoder: WindowDecoder) -> None:
    out: list[dict[str, Any]] = []
    session = Session(decoder, out.append)
    created = out[0]["session"]
    assert out[0]["type"] == "session.created"
    assert created["type"] == "transcription"
    assert created["audio"]["input"]["format"] == {"type": "audio/pcm", "rate": 24000}
    assert created["audio"]["input"]["turn_detection"] == {
        "type": "server_vad",
        "threshold": 0.5,
        "prefix_padding_ms": 300,
        "silence_duration_ms": 500,
    }
    current = {
        "type": "session.update",
        "session": {
            "type": "transcription",
            "audio": {
                "input": {
                    "format": {"type": "audio/pcmu"},
                    "transcription": {"model": "gpt-4o-transcribe", "language": "en"},
                    "turn_detection": {"type": "server_vad", "silence_duration_ms": 800},
                }
            },
        },
    }
    beta = {"type": "transcription_session.update", "session": {"input_audio_format": "pcm16"}}
    for message in (current, beta):
        session.receive(json.dumps(message))
        session.step()
    updated, beta_updated = out[1], out[2]
    assert updated["type"] == "session.updated"
    audio_in = updated["session"]["audio"]["input"]
    assert audio_in["format"] == {"type": "audio/pcmu"}
    assert audio_in["transcription"]["model"] == "gpt-4o-transcribe"
    assert audio_in["turn_detection"]["silence_duration_ms"] == 800
    assert audio_in["turn_detection"]["threshold"] == 0.5
    assert beta_updated["type"] == "transcription_session.updated"
    assert beta_updated["session"]["input_audio_format"] == "pcm16"
    assert beta_updated["session"]["turn_detection"]["silence_duration_ms"] == 800


def test_audio_split_anywhere_converts_the_same() -> None:
    """PCM16 split at odd bytes, resampled piece by piece, equals the whole at once."""
    data = silence(0.1) + pcm("one two three")
    whole = AudioInput("audio/pcm", 24_000)
    expected = list(whole.convert(data)) + list(whole.flush())
    pieces = AudioInput("audio/pcm", 24_000)
    got: list[float] = []
    for start in range(0, len(data), 777):
        got.extend(pieces.convert(data[start : start + 777]))
    got.extend(pieces.flush())
    assert len(got) == len(expected) == pytest.approx(len(data) / 2 * 2 / 3, abs=2)


def test_g711_tables_match_the_standard() -> None:
    """mu-law 0xFF and A-law 0xD5 are zero; the extremes are +-32124 and +-32256 (G.711)."""
    mu, a = G711_TABLES["audio/pcmu"] * 32768, G711_TABLES["audio/pcma"] * 32768
    assert mu[0xFF] == 0 and mu[0x80] == 32124 and mu[0x00] == -32124
    assert a[0xD5] == 8 and a[0xAA] == 32256 and a[0x2A] == -32256


@pytest.mark.parametrize(
    ("edges", "event_id"),
    [
        (['{"event_id": "e_1", "type": "input_audio_buffer.append", "audio": "AAAA', ""], "e_1"),
        (['{"type": "input_audio_buffer.append", "audio": "AAAA', 'AA", "event_id":"e_2"}'], "e_2"),
        (['{"event_id": "say \\"hi\\"", "audio": "AAAA', ""], 'say "hi"'),
        (['{"event_id": 7, "audio": "AAAA', ""], None),
        (['{"type": "input_audio_buffer.append", "audio": "AAAA', 'AAAA"}'], None),
    ],
)
def test_an_oversized_message_is_named_by_the_event_id_at_its_edges(
    edges: list[str], event_id: str | None
) -> None:
    assert event_id_in(*edges) == event_id

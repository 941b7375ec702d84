"""The Realtime transcription protocol's events: client events parsed and checked, server events
built, in the shapes OpenAI's API uses, so its clients work unchanged.

A session is configured by ``session.update`` (the current shape: ``session.type =
"transcription"``, settings under ``session.audio.input``) or by ``transcription_session.update``
(the older beta shape: ``input_audio_format``, ``input_audio_transcription``,
``turn_detection`` at the top); each is answered with its own ``*.updated`` event, in the shape
it was asked in (``updates`` checks them and builds the documents). Anything a client gets
wrong becomes a :class:`ProtocolError`, sent as an ``error`` event carrying the offending
``event_id``; only the ones given a ``close_code`` end the session.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import json
import re
import secrets
import time
from dataclasses import dataclass, field
from typing import Any

# OpenAI's limit on one input_audio_buffer.append, in bytes of decoded audio.
MAX_APPEND_BYTES = 15 * 1024 * 1024
MAX_EVENT_ID_CHARS = 256  # an event_id is echoed in the errors about its event
SHOWN_CHARS = 60  # of a client's value quoted in an error message
CLIENT_EVENTS = (
    "session.update",
    "transcription_session.update",
    "input_audio_buffer.append",
    "input_audio_buffer.commit",
    "input_audio_buffer.clear",
)


class ProtocolError(Exception):
    """Something a client sent that the server refuses: an ``error`` event, and for one with a
    ``close_code`` the end of the session (the code the WebSocket closes with)."""

    def __init__(
        self,
        code: str,
        message: str,
        *,
        param: str | None = None,
        event_id: str | None = None,
        kind: str = "invalid_request_error",
        close_code: int | None = None,
    ) -> None:
        super().__init__(message)
        self.code, self.message, self.param = code, message, param
        self.event_id, self.kind, self.close_code = event_id, kind, close_code

    def event(self) -> dict[str, Any]:
        """The ``error`` server event."""
        return server_event(
            "error",
            error={
                "type": self.kind,
                "code": self.code,
                "message": self.message,
                "param": self.param,
                "event_id": self.event_id,
            },
        )


def transcription_failed(item_id: str, kind: str, code: str, message: str) -> dict[str, Any]:
    """``conversation.item.input_audio_transcription.failed``: the item will not complete."""
    return server_event(
        "conversation.item.input_audio_transcription.failed",
        item_id=item_id,
        content_index=0,
        error={"type": kind, "code": code, "message": message},
    )


def transcription_delta(item_id: str, delta: str) -> dict[str, Any]:
    """``conversation.item.input_audio_transcription.delta``: words that follow the item's."""
    kind = "conversation.item.input_audio_transcription.delta"
    return server_event(kind, item_id=item_id, content_index=0, delta=delta)


def transcription_tentative(item_id: str, text: str) -> dict[str, Any]:
    """An extension (``x_``): the words after the item's deltas that the newest decode hears
    but that are not confirmed yet. Each replaces the item's last; a delta voids it."""
    kind = "x_conversation.item.input_audio_transcription.tentative"
    return server_event(kind, item_id=item_id, content_index=0, text=text)


def transcription_completed(
    item_id: str, previous_id: str | None, transcript: str, seconds: float
) -> list[dict[str, Any]]:
    """A turn's ``...input_audio_transcription.completed`` (``usage``: its ``seconds`` of
    audio) and its ``conversation.item.done``."""
    completed = server_event(
        "conversation.item.input_audio_transcription.completed",
        item_id=item_id,
        content_index=0,
        transcript=transcript,
        usage={"type": "duration", "seconds": round(seconds, 3)},
    )
    done = user_item(item_id)
    done["content"][0]["transcript"] = transcript
    return [
        completed,
        server_event("conversation.item.done", previous_item_id=previous_id, item=done),
    ]


def new_id(prefix: str) -> str:
    """An id in OpenAI's style: ``prefix_`` and 22 random characters."""
    return f"{prefix}_{secrets.token_urlsafe(16)[:22]}"


def server_event(kind: str, **fields: Any) -> dict[str, Any]:
    return {"type": kind, "event_id": new_id("event"), **fields}


@dataclass(frozen=True)
class ServerVad:
    """``turn_detection`` of type ``server_vad``, OpenAI's defaults."""

    threshold: float = 0.5
    prefix_padding_ms: int = 300
    silence_duration_ms: int = 500

    def document(self) -> dict[str, Any]:
        return {
            "type": "server_vad",
            "threshold": self.threshold,
            "prefix_padding_ms": self.prefix_padding_ms,
            "silence_duration_ms": self.silence_duration_ms,
        }


@dataclass(frozen=True)
class SessionConfig:
    """What a session is configured to do; every update makes a new one."""

    format: tuple[str, int] = ("audio/pcm", 24_000)
    turn_detection: ServerVad | None = field(default_factory=ServerVad)
    model: str = "whisper-1"  # echoed back; the server's own engine transcribes
    language: str | None = None
    prompt: str = ""
    include: tuple[str, ...] = ()
    noise_reduction: Any = None  # accepted and echoed; nothing is done with it


def shown(value: Any) -> str:
    """A client's value as an error message quotes it: its ``repr``, cut to ``SHOWN_CHARS``."""
    text = repr(value)
    return text if len(text) <= SHOWN_CHARS else text[: SHOWN_CHARS - 3] + "..."


def parse_message(text: str | bytes) -> dict[str, Any]:
    """A client message as an event object with a known ``type``."""
    if isinstance(text, bytes):
        raise ProtocolError("invalid_event", "events are JSON text messages, not binary ones")
    try:
        event = json.loads(text)
    except (ValueError, RecursionError) as exc:
        raise ProtocolError("invalid_json", f"the message is not valid JSON: {exc}") from None
    if not isinstance(event, dict):
        raise ProtocolError("invalid_event", "an event is a JSON object with a 'type'")
    event_id = event.get("event_id") if isinstance(event.get("event_id"), str) else None
    if event_id is not None and len(event_id) > MAX_EVENT_ID_CHARS:
        raise ProtocolError(
            "string_above_max_length",
            f"an event_id is at most {MAX_EVENT_ID_CHARS} characters",
            param="event_id",
        )
    kind = event.get("type")
    if kind not in CLIENT_EVENTS:
        raise ProtocolError(
            "unknown_event",
            f"unknown event type {shown(kind)}; a transcription session takes "
            + ", ".join(CLIENT_EVENTS),
            param="type",
            event_id=event_id,
        )
    return event


def audio_bytes(event: dict[str, Any], max_bytes: int = MAX_APPEND_BYTES) -> bytes:
    """The decoded ``audio`` of an ``input_audio_buffer.append``."""
    audio = event.get("audio")
    event_id = event.get("event_id")
    if not isinstance(audio, str):
        raise ProtocolError(
            "invalid_value", "'audio' must be base64 text", param="audio", event_id=event_id
        )
    if len(audio) > (max_bytes + 2) // 3 * 4:
        raise audio_too_large(event_id, max_bytes)
    try:
        return base64.b64decode(audio, validate=True)
    except (binascii.Error, ValueError):
        raise ProtocolError(
            "invalid_audio", "'audio' is not valid base64", param="audio", event_id=event_id
        ) from None


def audio_too_large(event_id: str | None, max_bytes: int) -> ProtocolError:
    return ProtocolError(
        "audio_too_large",
        f"one input_audio_buffer.append may carry at most {max_bytes} bytes of audio",
        param="audio",
        event_id=event_id,
    )


# An oversized message is dropped as it arrives, never parsed whole; its ``event_id`` is looked
# for in the characters kept from its start and its end (wherever the client put the key).
EDGE_CHARS = 512
_EVENT_ID = re.compile(rf'"event_id"\s*:\s*("(?:[^"\\]|\\.){{0,{MAX_EVENT_ID_CHARS}}}")')


def event_id_in(*edges: str) -> str | None:
    """The ``event_id`` of a message of which only ``edges`` (its first and last characters)
    were kept, or None."""
    for edge in edges:
        found = _EVENT_ID.search(edge)
        if found:
            with contextlib.suppress(ValueError):  # a bad escape: not JSON
                return str(json.loads(found.group(1)))  # a quoted string: always a str
    return None


def user_item(item_id: str) -> dict[str, Any]:
    """The conversation item an input audio turn becomes (its transcript comes in events)."""
    return {
        "id": item_id,
        "object": "realtime.item",
        "type": "message",
        "status": "completed",
        "role": "user",
        "content": [{"type": "input_audio", "transcript": None}],
    }


def now() -> float:
    return time.time()

"""The Realtime transcription protocol's events: client events parsed and checked, server events
built, in the shapes OpenAI's API uses, so its clients work unchanged.

A session is configured by ``session.update`` (the current shape: ``session.type =
"transcription"``, settings under ``session.audio.input``) or by ``transcription_session.update``
(the older beta shape: ``input_audio_format``, ``input_audio_transcription``,
``turn_detection`` at the top); each is answered with its own ``*.updated`` event, in the shape
it was asked in. Anything a client gets wrong becomes a :class:`ProtocolError`, sent as an
``error`` event carrying the offending ``event_id``; only the ones marked ``fatal`` end the
session.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import json
import re
import secrets
import time
from dataclasses import dataclass, field, replace
from typing import Any

# OpenAI's limit on one input_audio_buffer.append, in bytes of decoded audio.
MAX_APPEND_BYTES = 15 * 1024 * 1024
CLIENT_EVENTS = (
    "session.update",
    "transcription_session.update",
    "input_audio_buffer.append",
    "input_audio_buffer.commit",
    "input_audio_buffer.clear",
)
# The audio formats: (type, rate). audio/pcm at 16 kHz is this server's extension.
FORMATS = {
    ("audio/pcm", 24_000),
    ("audio/pcm", 16_000),
    ("audio/pcmu", 8_000),
    ("audio/pcma", 8_000),
}
BETA_FORMATS = {
    "pcm16": ("audio/pcm", 24_000),
    "pcm16_16000": ("audio/pcm", 16_000),  # extension
    "g711_ulaw": ("audio/pcmu", 8_000),
    "g711_alaw": ("audio/pcma", 8_000),
}


class ProtocolError(Exception):
    """Something a client sent that the server refuses: an ``error`` event, and for ``fatal``
    ones the end of the session (``close_code`` says how the WebSocket closes)."""

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

    @property
    def fatal(self) -> bool:
        return self.close_code is not None

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
    kind = event.get("type")
    if kind not in CLIENT_EVENTS:
        raise ProtocolError(
            "unknown_event",
            f"unknown event type {kind!r}; a transcription session takes "
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
_EVENT_ID = re.compile(r'"event_id"\s*:\s*("(?:[^"\\]|\\.){0,256}")')


def event_id_in(*edges: str) -> str | None:
    """The ``event_id`` of a message of which only ``edges`` (its first and last characters)
    were kept, or None."""
    for edge in edges:
        found = _EVENT_ID.search(edge)
        if found:
            with contextlib.suppress(ValueError):  # a bad escape: not JSON
                return str(json.loads(found.group(1)))  # a quoted string: always a str
    return None


def apply_update(config: SessionConfig, event: dict[str, Any]) -> SessionConfig:
    """``config`` changed by a ``session.update`` or ``transcription_session.update``."""
    event_id = event.get("event_id")
    session = event.get("session")
    if not isinstance(session, dict):
        raise ProtocolError(
            "invalid_value", "'session' must be an object", param="session", event_id=event_id
        )
    try:
        if event["type"] == "session.update":
            return _apply_current(config, session)
        return _apply_beta(config, session)
    except ProtocolError as error:
        error.event_id = event_id
        raise


def _apply_current(config: SessionConfig, session: dict[str, Any]) -> SessionConfig:
    kind = session.get("type", "transcription")
    if kind != "transcription":
        raise ProtocolError(
            "invalid_value",
            f"session.type {kind!r}: this server only does transcription sessions",
            param="session.type",
        )
    audio = _object(session, "audio", "session")
    given = _object(audio, "input", "session.audio")
    if "format" in given:
        config = replace(config, format=_format(given["format"]))
    if "turn_detection" in given:
        td = given["turn_detection"]
        config = replace(
            config,
            turn_detection=_turn_detection(
                td, config.turn_detection, "session.audio.input.turn_detection"
            ),
        )
    if "transcription" in given:
        path = "session.audio.input.transcription"
        config = _transcription(config, given["transcription"], path)
    if "noise_reduction" in given:
        config = replace(config, noise_reduction=given["noise_reduction"])
    if "include" in session:
        config = replace(config, include=_include(session["include"]))
    return config


def _apply_beta(config: SessionConfig, session: dict[str, Any]) -> SessionConfig:
    if "input_audio_format" in session:
        name = session["input_audio_format"]
        if name not in BETA_FORMATS:
            raise ProtocolError(
                "invalid_value",
                f"input_audio_format {name!r}: expected one of {', '.join(BETA_FORMATS)}",
                param="session.input_audio_format",
            )
        config = replace(config, format=BETA_FORMATS[name])
    if "turn_detection" in session:
        td = session["turn_detection"]
        config = replace(
            config,
            turn_detection=_turn_detection(td, config.turn_detection, "session.turn_detection"),
        )
    if "input_audio_transcription" in session:
        path = "session.input_audio_transcription"
        config = _transcription(config, session["input_audio_transcription"], path)
    if "input_audio_noise_reduction" in session:
        config = replace(config, noise_reduction=session["input_audio_noise_reduction"])
    if "include" in session:
        config = replace(config, include=_include(session["include"]))
    return config


def _object(parent: dict[str, Any], key: str, path: str) -> dict[str, Any]:
    value = parent.get(key) or {}
    if not isinstance(value, dict):
        raise ProtocolError("invalid_value", f"'{key}' must be an object", param=f"{path}.{key}")
    return value


def _format(value: Any) -> tuple[str, int]:
    param = "session.audio.input.format"
    if not isinstance(value, dict):
        raise ProtocolError("invalid_value", "'format' must be an object", param=param)
    kind = value.get("type")
    rate = value.get("rate", 24_000 if kind == "audio/pcm" else 8_000)
    if not isinstance(kind, str) or (kind, rate) not in FORMATS:
        raise ProtocolError(
            "invalid_value",
            f"audio format {kind!r} at {rate!r} Hz is not supported: audio/pcm (PCM16 mono"
            " little-endian) at 24000 Hz (or 16000 Hz), audio/pcmu or audio/pcma at 8000 Hz",
            param=param,
        )
    return kind, int(rate)


def _turn_detection(value: Any, current: ServerVad | None, param: str) -> ServerVad | None:
    """``value`` checked and merged into ``current``; ``param``: where it is in the event's
    shape, for the error."""
    if value is None:
        return None
    if not isinstance(value, dict) or value.get("type", "server_vad") != "server_vad":
        kind = value.get("type") if isinstance(value, dict) else value
        raise ProtocolError(
            "invalid_value",
            f"turn_detection {kind!r}: this server offers 'server_vad' or null (the client"
            " commits)",
            param=param,
        )
    base = current or ServerVad()
    threshold = value.get("threshold", base.threshold)
    padding = value.get("prefix_padding_ms", base.prefix_padding_ms)
    silence = value.get("silence_duration_ms", base.silence_duration_ms)
    number = (int, float)
    if not isinstance(threshold, number) or not 0.0 <= threshold <= 1.0:
        raise ProtocolError(
            "invalid_value", "threshold must be in [0, 1]", param=f"{param}.threshold"
        )
    for name, ms in (("prefix_padding_ms", padding), ("silence_duration_ms", silence)):
        if not isinstance(ms, int) or isinstance(ms, bool) or not 0 <= ms <= 10_000:
            raise ProtocolError(
                "invalid_value",
                f"{name} must be whole milliseconds from 0 to 10000",
                param=f"{param}.{name}",
            )
    return ServerVad(float(threshold), padding, silence)


def _transcription(config: SessionConfig, value: Any, path: str) -> SessionConfig:
    """``value`` (the transcription object at ``path`` in the event) merged into ``config``."""
    if value is None:
        return config
    if not isinstance(value, dict):
        raise ProtocolError("invalid_value", "'transcription' must be an object", param=path)
    model = value.get("model", config.model)
    language = value.get("language", config.language)
    prompt = value.get("prompt", config.prompt) or ""
    if not isinstance(model, str) or not isinstance(prompt, str):
        raise ProtocolError("invalid_value", "model and prompt must be strings", param=path)
    if language is not None and (not isinstance(language, str) or language.lower() != "en"):
        raise ProtocolError(
            "unsupported_language",
            f"language {language!r}: the live transcription model is English-only ('en')",
            param=f"{path}.language",
        )
    return replace(config, model=model, language=language, prompt=prompt[:2000])


def _include(value: Any) -> tuple[str, ...]:
    if value is None:
        return ()
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ProtocolError("invalid_value", "'include' must be a list of strings")
    return tuple(value)


def session_document(config: SessionConfig, session_id: str, expires_at: float) -> dict[str, Any]:
    """The session object of ``session.created`` / ``session.updated`` (the current shape)."""
    kind, rate = config.format
    audio_format: dict[str, Any] = {"type": kind} | ({"rate": rate} if kind == "audio/pcm" else {})
    return {
        "type": "transcription",
        "object": "realtime.transcription_session",
        "id": session_id,
        "expires_at": int(expires_at),
        "audio": {
            "input": {
                "format": audio_format,
                "transcription": {
                    "model": config.model,
                    "language": config.language,
                    "prompt": config.prompt,
                },
                "noise_reduction": config.noise_reduction,
                "turn_detection": config.turn_detection.document()
                if config.turn_detection
                else None,
            }
        },
        "include": list(config.include) or None,
    }


def beta_session_document(
    config: SessionConfig, session_id: str, expires_at: float
) -> dict[str, Any]:
    """The session object of ``transcription_session.updated`` (the beta shape)."""
    name = next(n for n, f in BETA_FORMATS.items() if f == config.format)
    return {
        "id": session_id,
        "object": "realtime.transcription_session",
        "expires_at": int(expires_at),
        "modalities": ["text"],
        "input_audio_format": name,
        "input_audio_transcription": {
            "model": config.model,
            "language": config.language,
            "prompt": config.prompt,
        },
        "turn_detection": config.turn_detection.document() if config.turn_detection else None,
        "input_audio_noise_reduction": config.noise_reduction,
        "include": list(config.include) or None,
    }


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

"""``session.update`` and ``transcription_session.update``: a session's configuration changed
by a client, every field checked and bounded, and the session documents that answer them.

A field is bounded as the HTTP routes bound it (the prompt by the extraction option's
``MAX_PROMPT_CHARS``, the model name by the OpenAI route's ``MAX_MODEL_CHARS``); a value the
server only echoes (``include``, ``noise_reduction``) takes only the values OpenAI documents,
so nothing a client sends is held or sent back at any size. A refusal is an ``error`` event
whose ``param`` is the field's path in the event's shape (``session.audio.input.transcription
.prompt``, ``session.input_audio_transcription.prompt``), the session unchanged.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from ..pipeline.request import MAX_PROMPT_CHARS
from ..web.openai_api import MAX_MODEL_CHARS
from .events import ProtocolError, ServerVad, SessionConfig, shown

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


INCLUDE = ("item.input_audio_transcription.logprobs",)  # what OpenAI's ``include`` takes
NOISE_REDUCTION = ("near_field", "far_field")  # its ``noise_reduction`` types (or null)


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
            f"session.type {shown(kind)}: this server only does transcription sessions",
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
        param = "session.audio.input.noise_reduction"
        config = replace(config, noise_reduction=_noise_reduction(given["noise_reduction"], param))
    if "include" in session:
        config = replace(config, include=_include(session["include"]))
    return config


def _apply_beta(config: SessionConfig, session: dict[str, Any]) -> SessionConfig:
    if "input_audio_format" in session:
        name = session["input_audio_format"]
        if not isinstance(name, str) or name not in BETA_FORMATS:
            raise ProtocolError(
                "invalid_value",
                f"input_audio_format {shown(name)}: expected one of {', '.join(BETA_FORMATS)}",
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
        value, param = session["input_audio_noise_reduction"], "session.input_audio_noise_reduction"
        config = replace(config, noise_reduction=_noise_reduction(value, param))
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
    if not isinstance(kind, str) or not isinstance(rate, int) or (kind, rate) not in FORMATS:
        raise ProtocolError(
            "invalid_value",
            f"audio format {shown(kind)} at {shown(rate)} Hz is not supported: audio/pcm (PCM16 mono"
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
            f"turn_detection {shown(kind)}: this server offers 'server_vad' or null (the client"
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
    for name, text, most in (
        ("model", model, MAX_MODEL_CHARS),
        ("prompt", prompt, MAX_PROMPT_CHARS),
    ):
        if not isinstance(text, str):
            raise ProtocolError(
                "invalid_value", f"'{name}' must be a string", param=f"{path}.{name}"
            )
        if len(text) > most:
            raise ProtocolError(
                "string_above_max_length",
                f"'{name}' is {len(text)} characters long: at most {most} are taken",
                param=f"{path}.{name}",
            )
    if language is not None and (not isinstance(language, str) or language.lower() != "en"):
        raise ProtocolError(
            "unsupported_language",
            f"language {shown(language)}: the live transcription model is English-only ('en')",
            param=f"{path}.language",
        )
    return replace(config, model=model, language=language, prompt=prompt)


def _include(value: Any) -> tuple[str, ...]:
    if value is None:
        return ()
    if not isinstance(value, list) or not all(v in INCLUDE for v in value):
        raise ProtocolError(
            "invalid_value",
            f"'include' must be a list of {', '.join(INCLUDE)} (or null)",
            param="session.include",
        )
    return tuple(dict.fromkeys(value))


def _noise_reduction(value: Any, param: str) -> Any:
    if value is None:
        return None
    if (
        not isinstance(value, dict)
        or set(value) != {"type"}
        or value["type"] not in NOISE_REDUCTION
    ):
        raise ProtocolError(
            "invalid_value",
            "noise reduction is null or {'type': 'near_field' or 'far_field'}",
            param=param,
        )
    return {"type": value["type"]}


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

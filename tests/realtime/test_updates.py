"""Every field of ``session.update`` and ``transcription_session.update`` is bounded: a value
past its bound is an ``error`` naming the field in ``param``, short whatever was sent, and the
session keeps its configuration."""

from __future__ import annotations

import json
from typing import Any

import pytest

from extractor.pipeline.request import MAX_PROMPT_CHARS
from extractor.realtime.decoder import WindowDecoder
from extractor.realtime.events import MAX_EVENT_ID_CHARS
from extractor.realtime.session import Session
from extractor.web.openai_api import MAX_MODEL_CHARS

HUGE = "x" * 1_000_000  # a megabyte of text: what no field takes
CURRENT = "session.audio.input"


def current(input_fields: dict[str, Any], **session: Any) -> dict[str, Any]:
    body = {"type": "transcription", "audio": {"input": input_fields}, **session}
    return {"type": "session.update", "event_id": "evt_1", "session": body}


def beta(**session: Any) -> dict[str, Any]:
    return {"type": "transcription_session.update", "event_id": "evt_1", "session": session}


def updated(decoder: WindowDecoder, *events: dict[str, Any]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    session = Session(decoder, out.append)
    for event in events:
        session.receive(json.dumps(event))
        while session.step():
            pass
    return out


@pytest.mark.parametrize(
    ("event", "code", "param"),
    [
        (current({"transcription": {"prompt": HUGE}}), "string_above_max_length",
         f"{CURRENT}.transcription.prompt"),
        (current({"transcription": {"prompt": "x" * (MAX_PROMPT_CHARS + 1)}}),
         "string_above_max_length", f"{CURRENT}.transcription.prompt"),
        (beta(input_audio_transcription={"prompt": HUGE}), "string_above_max_length",
         "session.input_audio_transcription.prompt"),
        (current({"transcription": {"model": "x" * (MAX_MODEL_CHARS + 1)}}),
         "string_above_max_length", f"{CURRENT}.transcription.model"),
        (beta(input_audio_transcription={"model": HUGE}), "string_above_max_length",
         "session.input_audio_transcription.model"),
        (current({"transcription": {"prompt": 5}}), "invalid_value",
         f"{CURRENT}.transcription.prompt"),
        (current({"transcription": {"language": HUGE}}), "unsupported_language",
         f"{CURRENT}.transcription.language"),
        (current({"noise_reduction": {"type": "near_field", "padding": HUGE}}), "invalid_value",
         f"{CURRENT}.noise_reduction"),
        (beta(input_audio_noise_reduction=HUGE), "invalid_value",
         "session.input_audio_noise_reduction"),
        (current({}, include=[HUGE]), "invalid_value", "session.include"),
        (beta(include=["item.input_audio_transcription.logprobs", 5]), "invalid_value",
         "session.include"),
        (beta(input_audio_format=HUGE), "invalid_value", "session.input_audio_format"),
        (beta(input_audio_format=["pcm16"]), "invalid_value", "session.input_audio_format"),
        (current({"format": {"type": HUGE, "rate": [24000]}}), "invalid_value",
         f"{CURRENT}.format"),
        (current({"turn_detection": {"type": HUGE}}), "invalid_value",
         f"{CURRENT}.turn_detection"),
        (current({}, type=HUGE), "invalid_value", "session.type"),
    ],
)  # fmt: skip
def test_a_field_past_its_bound_is_refused_by_name(
    decoder: WindowDecoder, event: dict[str, Any], code: str, param: str
) -> None:
    first = current({"transcription": {"prompt": "Stella"}})
    out = updated(decoder, first, event, {"type": "session.update", "session": {}})
    (error,) = [e["error"] for e in out if e["type"] == "error"]
    assert (error["code"], error["param"], error["event_id"]) == (code, param, "evt_1")
    assert len(error["message"]) < 300, "the error quotes at most a little of the value"
    # The refused update changed nothing: the next session.updated shows the first update's.
    assert out[-1]["type"] == "session.updated"
    transcription = out[-1]["session"]["audio"]["input"]["transcription"]
    assert transcription["prompt"] == "Stella"
    assert out[-1]["session"]["audio"]["input"]["noise_reduction"] is None
    assert out[-1]["session"]["include"] is None


def test_values_at_their_bounds_are_taken(decoder: WindowDecoder) -> None:
    prompt, model = "y" * MAX_PROMPT_CHARS, "m" * MAX_MODEL_CHARS
    include = ["item.input_audio_transcription.logprobs"]
    event = current(
        {"transcription": {"prompt": prompt, "model": model},
         "noise_reduction": {"type": "far_field"}},
        include=include,
    )  # fmt: skip
    out = updated(decoder, event)
    assert out[-1]["type"] == "session.updated", out[-1]
    audio_in = out[-1]["session"]["audio"]["input"]
    assert audio_in["transcription"]["prompt"] == prompt
    assert audio_in["transcription"]["model"] == model
    assert audio_in["noise_reduction"] == {"type": "far_field"}
    assert out[-1]["session"]["include"] == include


def test_an_event_id_past_its_bound_is_not_echoed(decoder: WindowDecoder) -> None:
    event = {"type": "session.update", "event_id": "e" * (MAX_EVENT_ID_CHARS + 1), "session": {}}
    out = updated(decoder, event)
    (error,) = [e["error"] for e in out if e["type"] == "error"]
    assert (error["code"], error["param"], error["event_id"]) == (
        "string_above_max_length", "event_id", None,
    )  # fmt: skip

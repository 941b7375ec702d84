"""A live session over the real Whisper model and Silero VAD, driven without a network."""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pytest
from realtime_support import (
    ALIKE,
    FIRST,
    SECOND,
    append,
    appends,
    g711,
    heard_alone,
    likeness,
    noise,
    pcm,
    silence,
    transcript_words,
)

from extractor.realtime.audio import AudioInput
from extractor.realtime.decoder import WindowDecoder
from extractor.realtime.session import Session


class CountingDecoder:
    """The real decoder, counting its calls (to prove silence is never decoded)."""

    def __init__(self, real: WindowDecoder) -> None:
        self.real, self.calls = real, 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self.real, name)

    def decode(self, *args: Any, **kwargs: Any) -> list[str]:
        self.calls += 1
        return self.real.decode(*args, **kwargs)

    def word_ends(self, *args: Any, **kwargs: Any) -> list[float]:
        self.calls += 1
        return self.real.word_ends(*args, **kwargs)

    def decode_timed(self, *args: Any, **kwargs: Any) -> tuple[list[str], list[float]]:
        self.calls += 1
        return self.real.decode_timed(*args, **kwargs)


def run(session: Session, messages: list[str]) -> None:
    for message in messages:
        session.receive(message)
        while session.step():
            pass


def of_type(events: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [e for e in events if e["type"] == kind]


def test_two_turns_stream_append_only_deltas(decoder: WindowDecoder) -> None:
    events: list[dict[str, Any]] = []
    session = Session(decoder, events.append)
    audio = silence(1) + pcm(FIRST) + silence(1.5) + pcm(SECOND) + silence(1.5)
    run(session, appends(audio))
    kinds = [e["type"] for e in events]
    assert kinds[0] == "session.created"
    completed = of_type(events, "conversation.item.input_audio_transcription.completed")
    assert len(completed) == 2
    for done in completed:
        deltas = [
            e["delta"]
            for e in of_type(events, "conversation.item.input_audio_transcription.delta")
            if e["item_id"] == done["item_id"]
        ]
        assert "".join(deltas) == done["transcript"]
        assert len(deltas) >= 2, "words arrive while the turn is still being spoken"
        assert done["usage"]["type"] == "duration" and 2 < done["usage"]["seconds"] < 7
    # Each turn is its own sentence as the engine hears it alone, not the other one.
    first, second = heard_alone(decoder, FIRST), heard_alone(decoder, SECOND)
    assert (
        likeness(completed[0]["transcript"], first)
        >= ALIKE
        > likeness(completed[0]["transcript"], second)
    )
    assert (
        likeness(completed[1]["transcript"], second)
        >= ALIKE
        > likeness(completed[1]["transcript"], first)
    )

    # Per turn, each of these events names the turn's item, in this order:
    def at(kind: str, item: str) -> int:
        (index,) = [
            i
            for i, e in enumerate(events)
            if e["type"] == kind and item in (e.get("item_id"), e.get("item", {}).get("id"))
        ]
        return index

    lifecycle = (
        "input_audio_buffer.speech_started",
        "input_audio_buffer.speech_stopped",
        "input_audio_buffer.committed",
        "conversation.item.added",
        "conversation.item.input_audio_transcription.completed",
        "conversation.item.done",
    )
    for done in completed:
        order = [at(kind, done["item_id"]) for kind in lifecycle]
        assert order == sorted(order)
    committed = of_type(events, "input_audio_buffer.committed")
    assert committed[1]["previous_item_id"] == committed[0]["item_id"]
    started = of_type(events, "input_audio_buffer.speech_started")
    stopped = of_type(events, "input_audio_buffer.speech_stopped")
    # Offsets are milliseconds of the session's audio: the first turn starts after 1 s of
    # silence (less 300 ms of prefix padding), the second after the first ends.
    assert 500 <= started[0]["audio_start_ms"] <= 1100
    assert stopped[0]["audio_end_ms"] < started[1]["audio_start_ms"]
    items = of_type(events, "conversation.item.done")
    assert items[1]["previous_item_id"] == items[0]["item"]["id"]
    assert items[0]["item"]["content"][0]["transcript"] == completed[0]["transcript"]


def test_a_turn_cleared_after_its_words_were_sent_is_withdrawn(decoder: WindowDecoder) -> None:
    events: list[dict[str, Any]] = []
    session = Session(decoder, events.append)
    speech = pcm(SECOND)
    spoken = silence(1) + speech[: len(speech) * 3 // 4 // 2 * 2]  # cut while still speaking
    run(session, appends(spoken))
    deltas = of_type(events, "conversation.item.input_audio_transcription.delta")
    assert deltas, "words were sent while the turn was spoken"
    assert not of_type(events, "input_audio_buffer.committed")
    run(session, [json.dumps({"type": "input_audio_buffer.clear"})])
    (failed,) = of_type(events, "conversation.item.input_audio_transcription.failed")
    assert failed["item_id"] == deltas[0]["item_id"]
    assert failed["error"]["code"] == "input_audio_buffer_cleared"
    assert events[-1]["type"] == "input_audio_buffer.cleared"
    # The session goes on, and its offsets still count the audio cleared (PCM16 at 24 kHz:
    # 48 bytes a millisecond).
    run(session, appends(silence(1) + pcm(FIRST) + silence(1.5)))
    cleared_ms = len(spoken) / 48
    (started,) = of_type(events, "input_audio_buffer.speech_started")[1:]
    assert cleared_ms + 500 <= started["audio_start_ms"] <= cleared_ms + 1100
    (completed,) = of_type(events, "conversation.item.input_audio_transcription.completed")
    assert completed["item_id"] == started["item_id"] != failed["item_id"]
    assert likeness(completed["transcript"], heard_alone(decoder, FIRST)) >= ALIKE, (
        "the turn after a clear is its own audio alone"
    )


@pytest.mark.parametrize("audio", [silence(60), noise(60)], ids=["silence", "room-noise"])
def test_a_minute_of_silence_or_noise_gives_no_words(decoder: WindowDecoder, audio: bytes) -> None:
    counting = CountingDecoder(decoder)
    events: list[dict[str, Any]] = []
    session = Session(counting, events.append)  # type: ignore[arg-type]
    run(session, appends(audio, chunk_ms=200))
    run(session, [json.dumps({"type": "input_audio_buffer.commit"})])
    assert counting.calls == 0, "nothing is decoded from a buffer VAD calls silence"
    assert not of_type(events, "conversation.item.input_audio_transcription.delta")
    assert not of_type(events, "input_audio_buffer.speech_started")
    (completed,) = of_type(events, "conversation.item.input_audio_transcription.completed")
    assert completed["transcript"] == ""


@pytest.mark.slow  # seconds of the real model: make test runs it, make test-fast does not
def test_client_commits_without_turn_detection(decoder: WindowDecoder) -> None:
    events: list[dict[str, Any]] = []
    session = Session(decoder, events.append)
    update = {
        "type": "session.update",
        "event_id": "evt_1",
        "session": {"type": "transcription", "audio": {"input": {"turn_detection": None}}},
    }
    run(session, [json.dumps(update)])
    assert events[-1]["type"] == "session.updated"
    assert events[-1]["session"]["audio"]["input"]["turn_detection"] is None
    audio = silence(0.5) + pcm(FIRST) + silence(1) + pcm(SECOND) + silence(0.5)
    run(session, [*appends(audio), json.dumps({"type": "input_audio_buffer.commit"})])
    assert not of_type(events, "input_audio_buffer.speech_started")
    (completed,) = of_type(events, "conversation.item.input_audio_transcription.completed")
    # One turn of both sentences, as the engine hears each alone.
    both = [*heard_alone(decoder, FIRST), *heard_alone(decoder, SECOND)]
    assert likeness(completed["transcript"], both) >= ALIKE
    deltas = of_type(events, "conversation.item.input_audio_transcription.delta")
    assert "".join(d["delta"] for d in deltas) == completed["transcript"]
    assert completed["usage"]["seconds"] == pytest.approx(len(audio) / 48_000, abs=0.05)


def transcribed(decoder: WindowDecoder, data: bytes, name: str) -> str:
    """The one turn a session in the beta shape's ``name`` format hears in ``data``, sent in
    50 appends."""
    events: list[dict[str, Any]] = []
    session = Session(decoder, events.append)
    update = {"type": "transcription_session.update", "session": {"input_audio_format": name}}
    run(session, [json.dumps(update)])
    assert events[-1]["type"] == "transcription_session.updated"
    assert events[-1]["session"]["input_audio_format"] == name
    step = len(data) // 50
    run(session, [append(data[i : i + step]) for i in range(0, len(data), step)])
    (completed,) = of_type(events, "conversation.item.input_audio_transcription.completed")
    return str(completed["transcript"])


@pytest.mark.slow  # seconds of the real model: make test runs it, make test-fast does not
def test_g711_and_16_khz_audio(decoder: WindowDecoder) -> None:
    """16 kHz PCM is heard as the engine hears the speech alone; mu-law and A-law at 8 kHz
    (the beta shape's g711_ulaw, g711_alaw) as a 16 kHz session hears the same samples
    expanded and resampled (telephone audio is heard otherwise than the clean voice)."""
    wide = silence(0.5, 16_000) + pcm(FIRST, 16_000) + silence(1, 16_000)
    assert likeness(transcribed(decoder, wide, "pcm16_16000"), heard_alone(decoder, FIRST)) >= ALIKE
    for name, codec, kind in (
        ("g711_ulaw", "pcm_mulaw", "audio/pcmu"),
        ("g711_alaw", "pcm_alaw", "audio/pcma"),
    ):
        data = g711(silence(0.5, 8_000) + pcm(FIRST, 8_000) + silence(1, 8_000), codec)
        received = AudioInput(kind, 8_000)
        samples = np.concatenate([received.convert(data), received.flush()])
        as_pcm16 = (np.clip(samples, -1, 1) * 32767).astype("<i2").tobytes()
        alike = transcribed(decoder, as_pcm16, "pcm16_16000")
        assert likeness(transcribed(decoder, data, name), transcript_words(alike)) >= ALIKE, name


class StopsAfterASentence:
    """The real decoder, but hearing nothing after a forced prefix of six words or more: what
    tiny.en does now and then after one ending a sentence (bench/realtime.md), made sure."""

    def __init__(self, real: WindowDecoder) -> None:
        self.real = real

    def __getattr__(self, name: str) -> Any:
        return getattr(self.real, name)

    def decode(self, audio: Any, *, prefix: str = "", **kwargs: Any) -> list[str]:
        if len(prefix.split()) >= 6:
            return []
        return self.real.decode(audio, prefix=prefix, **kwargs)

    def decode_timed(
        self, audio: Any, *, prefix: str = "", **kwargs: Any
    ) -> tuple[list[str], list[float]]:
        if len(prefix.split()) >= 6:
            return [], []
        return self.real.decode_timed(audio, prefix=prefix, **kwargs)


@pytest.mark.slow  # seconds of the real model: make test runs it, make test-fast does not
def test_a_window_that_stops_after_a_sentence_restarts(decoder: WindowDecoder) -> None:
    events: list[dict[str, Any]] = []
    session = Session(StopsAfterASentence(decoder), events.append)  # type: ignore[arg-type]
    # One turn: the second sentence follows the first with no pause VAD would end it at.
    run(session, appends(silence(1) + pcm(FIRST) + pcm(SECOND) + silence(1.5)))
    (completed,) = of_type(events, "conversation.item.input_audio_transcription.completed")
    # Both sentences, as the engine hears each alone: the second is not lost, nor either
    # heard twice (9 or 15 words more than the 24 of both).
    both = [*heard_alone(decoder, FIRST), *heard_alone(decoder, SECOND)]
    assert likeness(completed["transcript"], both) >= ALIKE
    assert len(completed["transcript"].split()) <= len(both) + 3, "nor heard twice"
    deltas = of_type(events, "conversation.item.input_audio_transcription.delta")
    assert "".join(d["delta"] for d in deltas) == completed["transcript"]

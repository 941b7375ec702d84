"""A live turn's revisable tail (``x_conversation.item.input_audio_transcription.tentative``):
the words the newest decode hears after those sent, ahead of their deltas (the real tiny.en
and Silero VAD, espeak-ng speech, no network)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from realtime_support import (
    ALIKE,
    FIRST,
    SECOND,
    appends,
    heard_alone,
    likeness,
    pcm,
    silence,
    transcript_words,
)

from extractor.realtime.decoder import WindowDecoder
from extractor.realtime.items import DecodePolicy
from extractor.realtime.session import Session

TENTATIVE = "x_conversation.item.input_audio_transcription.tentative"
DELTA = "conversation.item.input_audio_transcription.delta"
COMPLETED = "conversation.item.input_audio_transcription.completed"


def two_turns(decoder: WindowDecoder, policy: DecodePolicy) -> list[dict[str, Any]]:
    events: list[dict[str, Any]] = []
    session = Session(decoder, events.append, policy=policy)
    audio = silence(1) + pcm(FIRST) + silence(1.5) + pcm(SECOND) + silence(1.5)
    for count, message in enumerate(appends(audio), 1):
        session.receive(message)
        while session.step():
            pass
        for event in events:  # the audio sent when it came out (40 ms appends)
            event.setdefault("heard_s", count * 0.04)
    return events


@pytest.mark.slow  # seconds of the real model: make test runs it, make test-fast does not
def test_the_tail_comes_before_its_words_are_confirmed(decoder: WindowDecoder) -> None:
    events = two_turns(decoder, DecodePolicy(tentative=True))
    completed = [e for e in events if e["type"] == COMPLETED]
    assert len(completed) == 2
    for done in completed:
        item = done["item_id"]
        mine = [(i, e) for i, e in enumerate(events) if e.get("item_id") == item]
        started = next(i for i, e in mine if e["type"] == "input_audio_buffer.speech_started")
        committed = next(i for i, e in mine if e["type"] == "input_audio_buffer.committed")
        tails = [(i, e["text"]) for i, e in mine if e["type"] == TENTATIVE]
        deltas = [(i, e["delta"]) for i, e in mine if e["type"] == DELTA]
        assert tails and deltas
        # Only while the turn is open, and from a decode that heard a second of it at least
        # (from less, tiny.en guesses: words out of a breath).
        assert all(started < i < committed for i, _text in tails)
        begun = events[started]["audio_start_ms"] / 1000
        assert all(events[i]["heard_s"] >= begun + 1.0 for i, _text in tails)
        # What the client shows as the tail: an event only when it changes, and whenever one
        # shows, the next delta confirms its first word (the agreement's newest hypotheses
        # begin with it), so a word is read there before it is sent.
        shown, foretold = "", 0
        for _i, e in mine:
            if e["type"] == TENTATIVE:
                assert e["text"] != shown
                shown = e["text"]
            elif e["type"] == DELTA:
                if shown:
                    assert transcript_words(e["delta"])[0] == transcript_words(shown)[0]
                    foretold += 1
                shown = ""
        assert foretold >= len(deltas) - 1, (tails, deltas)  # all but a turn's first, at most
        assert all(e["content_index"] == 0 for _i, e in mine if e["type"] == TENTATIVE)
        # The last tail, the turn's end decoded while the speaker paused, is exactly the delta
        # that completes the turn once VAD ends it.
        assert tails[-1][1] and tails[-1][1] == deltas[-1][1]
        assert tails[-1][0] < deltas[-1][0]
    assert likeness(completed[0]["transcript"], heard_alone(decoder, FIRST)) >= ALIKE
    assert likeness(completed[1]["transcript"], heard_alone(decoder, SECOND)) >= ALIKE


def test_turned_off_only_openais_events_are_sent(decoder: WindowDecoder) -> None:
    events = two_turns(decoder, DecodePolicy(tentative=False))
    assert not [e for e in events if e["type"].startswith("x_")]
    completed = [e for e in events if e["type"] == COMPLETED]
    assert [bool(transcript_words(e["transcript"])) for e in completed] == [True, True]


def test_a_clear_voids_a_tail_that_no_delta_confirmed(decoder: WindowDecoder) -> None:
    """A turn cleared while only its tail is shown (no delta to end with ``failed``): an empty
    tail tells the client to drop it."""
    events: list[dict[str, Any]] = []
    session = Session(decoder, events.append, policy=DecodePolicy(tentative=True))
    for message in appends(silence(1) + pcm(FIRST)):
        session.receive(message)
        while session.step():
            pass
        if any(e["type"] == TENTATIVE for e in events):
            break
    (item_id,) = {e["item_id"] for e in events if e["type"] == TENTATIVE}
    assert not [e for e in events if e["type"] == DELTA]  # a tail only, so far
    seen = len(events)
    session.receive(json.dumps({"type": "input_audio_buffer.clear"}))
    while session.step():
        pass
    cleared = events[seen:]
    assert [e["type"] for e in cleared] == [TENTATIVE, "input_audio_buffer.cleared"]
    assert cleared[0]["item_id"] == item_id and cleared[0]["text"] == ""

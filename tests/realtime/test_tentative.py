"""A live turn's revisable tail (``x_conversation.item.input_audio_transcription.tentative``):
the words the newest decode hears after those sent, ahead of their deltas (the real tiny.en
and Silero VAD, espeak-ng speech, no network)."""

from __future__ import annotations

from typing import Any

from realtime_support import FIRST, SECOND, appends, pcm, silence, transcript_words

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
    for message in appends(audio):
        session.receive(message)
        while session.step():
            pass
    return events


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
        # Only while the turn is open, each a change, each with OpenAI's item fields.
        assert all(started < i < committed for i, _text in tails)
        shown = ""  # what the client shows as the tail: sent only when it changes
        for _i, e in mine:
            if e["type"] == TENTATIVE:
                assert e["text"] != shown
                shown = e["text"]
            elif e["type"] == DELTA:
                shown = ""
        assert all(e["content_index"] == 0 for _i, e in mine if e["type"] == TENTATIVE)
        # The first word sent was shown as the tail before it was confirmed...
        first_sent, first_word = deltas[0][0], transcript_words(deltas[0][1])[0]
        assert any(i < first_sent and first_word in transcript_words(text) for i, text in tails), (
            first_word,
            tails,
        )
        # ...and the last tail, the turn's end decoded while the speaker paused, is exactly
        # the delta that completes the turn once VAD ends it.
        assert tails[-1][1] and tails[-1][1] == deltas[-1][1]
        assert tails[-1][0] < deltas[-1][0]
    assert {"quick", "over"} <= set(transcript_words(completed[0]["transcript"]))
    assert {"bring", "store"} <= set(transcript_words(completed[1]["transcript"]))


def test_turned_off_only_openais_events_are_sent(decoder: WindowDecoder) -> None:
    events = two_turns(decoder, DecodePolicy(tentative=False))
    assert not [e for e in events if e["type"].startswith("x_")]
    completed = [e for e in events if e["type"] == COMPLETED]
    assert [bool(transcript_words(e["transcript"])) for e in completed] == [True, True]

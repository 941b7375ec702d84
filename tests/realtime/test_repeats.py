"""The repetition guard: a hypothesis is cut where it repeats itself or the words just sent."""

from __future__ import annotations

from typing import Any, cast

from realtime_support import FIRST, appends, pcm, silence

from extractor.realtime.decoder import WindowDecoder
from extractor.realtime.items import DecodePolicy
from extractor.realtime.repeats import unrepeated
from extractor.realtime.session import Session

SENT = [
    "They",
    "say",
    "it",
    "will",
    "rain.",
    "I'm",
    "going",
    "to",
    "go",
    "on",
    "Sunday",
    "morning.",
]


def test_a_hypothesis_saying_the_last_sentence_again_is_dropped() -> None:
    again = ["I'm", "going", "to", "go", "on", "Sunday", "morning.", "Even", "for"]
    assert unrepeated(SENT, again, 3) == []


def test_new_words_pass() -> None:
    assert unrepeated(SENT, ["Even", "for", "a", "minute"], 3) == ["Even", "for", "a", "minute"]


def test_a_loop_is_cut_after_its_first_copy() -> None:
    looping = ["the", "garden", "looks", "much", "much", "much", "much", "much", "much", "much"]
    assert unrepeated([], looping, 3) == ["the", "garden", "looks", "much"]
    twice = ["we", "said", "we", "said", "we", "said", "it"]
    assert unrepeated([], twice, 3) == ["we", "said"]


def test_a_short_repeat_a_speaker_makes_is_kept() -> None:
    assert unrepeated(["no"], ["no,", "no", "I", "said"], 3) == ["no,", "no", "I", "said"]
    assert unrepeated([], ["very", "very", "good"], 3) == ["very", "very", "good"]


def test_off_when_zero() -> None:
    assert unrepeated(SENT, SENT[-4:], 0) == SENT[-4:]


class RepeatingDecoder:
    """Whisper's beam-search failure, which the real model shows only on some voices: after
    the words sent it hears the same sentence again."""

    def decode(self, audio: object, *, prefix: str = "", **_options: object) -> list[str]:
        return ["The", "quick", "brown", "fox."]


def test_a_session_never_sends_a_repeated_sentence() -> None:
    events: list[dict[str, Any]] = []
    decoder = cast(WindowDecoder, RepeatingDecoder())
    session = Session(
        decoder, events.append, policy=DecodePolicy(repeat_words=3, margin=0, context_seconds=0)
    )
    for message in appends(silence(1) + pcm(FIRST) + silence(1.5)):
        session.receive(message)
        while session.step():
            pass
    (done,) = [e for e in events if e["type"].endswith("transcription.completed")]
    assert done["transcript"] == "The quick brown fox."

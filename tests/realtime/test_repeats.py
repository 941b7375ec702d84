"""The repetition guard: a hypothesis is cut where it repeats itself or the words just sent."""

from __future__ import annotations

from extractor.realtime.repeats import unrepeated

SENT = "They say it will rain. I'm going to go on Sunday morning.".split()


def test_a_hypothesis_saying_the_last_sentence_again_is_dropped() -> None:
    again = "I'm going to go on Sunday morning. Even for".split()
    assert unrepeated(SENT, again, 3) == []


def test_new_words_pass() -> None:
    assert unrepeated(SENT, ["Even", "for", "a", "minute"], 3) == ["Even", "for", "a", "minute"]


def test_a_loop_is_cut_after_its_first_copy() -> None:
    looping = "the garden looks much much much much much much much".split()
    assert unrepeated([], looping, 3) == ["the", "garden", "looks", "much"]
    twice = "we said we said we said it".split()
    assert unrepeated([], twice, 3) == ["we", "said"]


def test_a_short_repeat_a_speaker_makes_is_kept() -> None:
    assert unrepeated(["no"], ["no,", "no", "I", "said"], 3) == ["no,", "no", "I", "said"]
    assert unrepeated([], ["very", "very", "good"], 3) == ["very", "very", "good"]


def test_off_when_zero() -> None:
    assert unrepeated(SENT, SENT[-4:], 0) == SENT[-4:]

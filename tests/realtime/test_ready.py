"""A turn's end decoded during the pause: when its words still stand at the turn's end."""

from __future__ import annotations

from extractor.realtime.audio import SAMPLE_RATE
from extractor.realtime.items import Item

TAIL, SETTLED = 0.4, 0.2


def _paused_item() -> Item:
    """A turn whose end was decoded during a pause: its speech ended at 3 s, the decode heard
    to 3.4 s (the tail), three words sent in its window before."""
    item = Item("item_1", start=0, window=0, speech_end=3 * SAMPLE_RATE)
    item.window_words = 3
    item.ready = (item.final_key, ["the", "end."])
    return item


def test_nothing_heard_since_keeps_the_pause_decode() -> None:
    assert _paused_item().ready_words(TAIL, SETTLED) == ["the", "end."]


def test_a_moment_of_speech_the_decode_heard_well_past_keeps_it() -> None:
    item = _paused_item()
    item.speech_end += int(0.2 * SAMPLE_RATE)  # VAD above threshold again up to 3.2 s
    assert item.ready_words(TAIL, SETTLED) == ["the", "end."]


def test_speech_near_or_past_the_end_of_what_the_decode_heard_voids_it() -> None:
    for later in (0.25, 0.4, 1.0):
        item = _paused_item()
        item.speech_end += int(later * SAMPLE_RATE)
        assert item.ready_words(TAIL, SETTLED) is None, later


def test_words_sent_or_a_new_window_since_void_it() -> None:
    item = _paused_item()
    item.window_words += 1
    assert item.ready_words(TAIL, SETTLED) is None
    item = _paused_item()
    item.new_window(2 * SAMPLE_RATE)
    assert item.ready_words(TAIL, SETTLED) is None
    assert Item("item_2", start=0, window=0).ready_words(TAIL, SETTLED) is None

"""A long live turn's window starting anew near its end (EXTRACTOR_REALTIME_SLIDE_SECONDS): the
words sent in its last seconds stay forced, the earlier ones leave the decoder's window."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from realtime_support import ALIKE, appends, heard_alone, likeness, pcm, silence
from support import requires_espeak

from extractor.realtime.decoder import WindowDecoder
from extractor.realtime.hypotheses import slide
from extractor.realtime.items import DecodePolicy, Item
from extractor.realtime.session import Session

pytestmark = requires_espeak
RATE = 16_000
# One turn of about 16 s with no pause VAD would end it at (espeak-ng's default voice).
LONG = (
    "Please call Stella and ask her to bring these things with her from the store, six spoons"
    " of fresh snow peas, five thick slabs of blue cheese and maybe a snack for her brother Bob,"
    " we also need a small plastic snake and a big toy frog for the kids"
)


class Recording:
    """The real decoder, noting the length (s) of the audio each decode heard."""

    def __init__(self, real: WindowDecoder) -> None:
        self.real = real
        self.heard: list[float] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self.real, name)

    def decode(self, audio: np.ndarray, **kwargs: Any) -> list[str]:
        self.heard.append(len(audio) / RATE)
        return self.real.decode(audio, **kwargs)


def one_turn(decoder: Any, policy: DecodePolicy) -> list[dict[str, Any]]:
    events: list[dict[str, Any]] = []
    session = Session(decoder, events.append, policy=policy)
    for message in appends(silence(1) + pcm(LONG) + silence(1.5)):
        session.receive(message)
        while session.step():
            pass
    return events


def transcript(events: list[dict[str, Any]]) -> str:
    kind = "conversation.item.input_audio_transcription.completed"
    (done,) = [e["transcript"] for e in events if e["type"] == kind]
    deltas = "".join(
        e["delta"]
        for e in events
        if e["type"] == "conversation.item.input_audio_transcription.delta"
    )
    assert done == deltas  # append-only: what was sent is the transcript
    return done


@pytest.mark.slow  # seconds of the real model: make test runs it, make test-fast does not
def test_a_long_turn_is_decoded_in_windows_that_stay_short(decoder: WindowDecoder) -> None:
    growing, sliding = Recording(decoder), Recording(decoder)
    # Without slides, a decode each 2 s (not 0.4 s) is enough to see the window grow: the
    # decodes of a growing window are what make this test long.
    whole = transcript(one_turn(growing, DecodePolicy(slide_seconds=0, step_seconds=2.0)))
    slid = transcript(one_turn(sliding, DecodePolicy(slide_seconds=8, slide_keep=5)))
    assert max(growing.heard) > 10  # without: the window grows with the speech
    # A window past 8 s starts anew 5 s or less before its end: a decode hears at most 8 s
    # and the step (0.4 s) or the turn's tail after the speech (0.4 s) past it.
    assert max(sliding.heard) <= 8 + 0.5
    alone = heard_alone(decoder, LONG)  # one window: which words depends on the CPU
    for text in (whole, slid):
        assert likeness(text, alone) >= ALIKE, (text, alone)
        assert len(text.split()) <= len(alone) + 3, text  # no words said twice after a slide


def test_a_slide_keeps_the_words_sent_in_the_window_s_last_seconds(
    decoder: WindowDecoder,
) -> None:
    spoken = "Good morning, how are you today? I hope the weather stays fine for the picnic."
    audio = np.frombuffer(pcm(spoken, rate=RATE), "<i2").astype(np.float32) / 32768
    item = Item("item_1", 0, 0, transcript=spoken, window_text=spoken)
    item.words = spoken.split()
    item.window_words, item.sent_heard_at = len(item.words), len(audio)
    seconds = len(audio) / RATE
    slide(decoder, DecodePolicy(slide_seconds=seconds - 1, slide_keep=2.5), item, audio)
    kept = item.window_text.split()
    assert item.window_text.startswith(" ") and spoken.endswith(item.window_text)
    assert 1 <= len(kept) == item.window_words < len(item.words)
    assert kept[-1] == "picnic."
    # The new window starts where its first kept word does: 2.5 s or less before the end.
    assert seconds - 2.5 <= item.window / RATE < seconds - 0.3


def test_a_window_is_left_as_it_is_when_no_word_sent_is_in_its_last_seconds(
    decoder: WindowDecoder,
) -> None:
    spoken = "Good morning, how are you today?"
    speech = np.frombuffer(pcm(spoken, rate=RATE), "<i2").astype(np.float32) / 32768
    audio = np.concatenate([speech, np.zeros(4 * RATE, np.float32)])  # 4 s with nothing sent
    item = Item("item_1", 0, 0, transcript=spoken, window_text=spoken)
    item.words = spoken.split()
    item.window_words, item.sent_heard_at = len(item.words), len(speech)
    slide(decoder, DecodePolicy(slide_seconds=3, slide_keep=2), item, audio)
    assert (item.window, item.window_text, item.window_words) == (0, spoken, 6)

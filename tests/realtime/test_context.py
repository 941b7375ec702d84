"""A live turn heard after the end of the turn before it (EXTRACTOR_REALTIME_CONTEXT_SECONDS):
its audio first, its words forced as the decoder's prefix, never sent again."""

from __future__ import annotations

from typing import Any

import numpy as np
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
from support import requires_espeak

from extractor.realtime.decoder import PAD_SECONDS, WindowDecoder
from extractor.realtime.hypotheses import hypothesis, turn_end
from extractor.realtime.items import Context, DecodePolicy, Item
from extractor.realtime.session import Session

pytestmark = requires_espeak
RATE = 16_000
COMPLETED = "conversation.item.input_audio_transcription.completed"


class Recording:
    """The real decoder, noting each decode's forced prefix and audio length; with ``stop``,
    a decode whose prefix holds that word hears nothing (tiny.en ending its text at the
    context's end, which the real model does on some voices but not on demand). With
    ``stop_after_a_turn``, that word is the last one of the turn completed before, whichever
    word the decode heard there."""

    def __init__(
        self, real: WindowDecoder, stop: str | None = None, *, stop_after_a_turn: bool = False
    ) -> None:
        self.real, self.stop, self.stop_after_a_turn = real, stop, stop_after_a_turn
        self.calls: list[tuple[str, float]] = []
        self.prompts: list[str] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self.real, name)

    def heard(self, event: dict[str, Any]) -> None:
        words = transcript_words(event.get("transcript", ""))
        if self.stop_after_a_turn and event["type"] == COMPLETED and words:
            self.stop = words[-1]

    def decode(self, audio: np.ndarray, *, prefix: str = "", **kwargs: Any) -> list[str]:
        self.calls.append((prefix, len(audio) / RATE))
        self.prompts.append(kwargs.get("prompt", ""))
        if self.stop and self.stop in transcript_words(prefix):
            return []
        return self.real.decode(audio, prefix=prefix, **kwargs)


def two_turns(decoder: Any, policy: DecodePolicy | None = None) -> list[dict[str, Any]]:
    events: list[dict[str, Any]] = []

    def emit(event: dict[str, Any]) -> None:
        events.append(event)
        if isinstance(decoder, Recording):
            decoder.heard(event)

    session = Session(decoder, emit, policy=policy)
    for message in appends(silence(1) + pcm(FIRST) + silence(1.5) + pcm(SECOND) + silence(1.5)):
        session.receive(message)
        while session.step():
            pass
    return events


def completed(events: list[dict[str, Any]]) -> list[str]:
    return [e["transcript"] for e in events if e["type"] == COMPLETED]


def holds(words: list[str], run: list[str]) -> bool:
    """``run`` is in ``words``, its words next to each other."""
    return any(words[i : i + len(run)] == run for i in range(len(words) - len(run) + 1))


def own_words(prefix: str, transcripts: list[str]) -> bool:
    """``prefix`` is the start of one of ``transcripts``: words its turn sent, nothing else."""
    words = transcript_words(prefix)
    return any(transcript_words(t)[: len(words)] == words for t in transcripts)


def deltas_of(events: list[dict[str, Any]], item_id: str) -> str:
    kind = "conversation.item.input_audio_transcription.delta"
    return "".join(e["delta"] for e in events if e["type"] == kind and e["item_id"] == item_id)


def speech(text: str) -> np.ndarray:
    """``text`` spoken by espeak-ng, 16 kHz float."""
    return np.frombuffer(pcm(text, rate=RATE), "<i2").astype(np.float32) / 32768


def test_word_ends_align_known_words(decoder: WindowDecoder) -> None:
    spoken = speech("Good morning, how are you today?")
    audio = np.concatenate([spoken, np.zeros(RATE, np.float32)])
    ends = decoder.word_ends(audio, "Good morning, how are you today?")
    assert len(ends) == 6 and ends == sorted(ends)
    # Every word but the last (whose end Whisper's alignment draws into the silence) ends
    # within the speech: where the next one starts, which is what a context is cut at.
    assert 0 < ends[0] < ends[-2] <= len(spoken) / RATE + 0.2


def test_a_context_is_the_words_of_its_last_seconds() -> None:
    audio = np.arange(4 * RATE, dtype=np.float32)
    words, ends = ["one", "two", "three", "four."], [0.9, 2.1, 3.0, 3.8]
    context = Context.of(audio, words, ends, seconds=2.5)
    assert context is not None and context.words == ["three", "four."]
    assert context.starts == [0, int(0.9 * RATE)]
    assert context.audio[0] == int(2.1 * RATE) and len(context.audio) == int(1.9 * RATE)
    shorter = context.last(int(1.5 * RATE))
    assert (
        shorter is not None and shorter.words == ["four."] and len(shorter.audio) == int(1.0 * RATE)
    )
    assert context.last(RATE // 2) is None  # not even the last word fits
    assert Context.of(audio, words, ends, seconds=10).words == words  # type: ignore[union-attr]


@pytest.mark.slow  # seconds of the real model: make test runs it, make test-fast does not
def test_the_next_turn_hears_the_turn_before_and_sends_only_its_own_words(
    decoder: WindowDecoder,
) -> None:
    spy = Recording(decoder)
    events = two_turns(spy)
    first, second = completed(events)
    assert likeness(first, heard_alone(decoder, FIRST)) >= ALIKE
    assert likeness(second, heard_alone(decoder, SECOND)) >= ALIKE
    ending = transcript_words(first)[-2:]
    assert not holds(transcript_words(second), ending), "the context is heard, not sent again"
    # A decode given the first turn's end: forced with its last words, which are no turn's
    # own start.
    with_context = [
        (p, s)
        for p, s in spy.calls
        if not own_words(p, [first, second]) and holds(transcript_words(p), ending)
    ]
    assert with_context, "the second turn's decodes were given the first turn's end"
    # The context never makes the encoder's window longer than the turn alone would.
    assert all(s <= decoder.min_window_seconds - PAD_SECONDS + 1e-6 for _p, s in with_context)
    done = [e for e in events if e["type"].endswith("transcription.completed")]
    assert all(deltas_of(events, e["item_id"]) == e["transcript"] for e in done)


@pytest.mark.slow  # seconds of the real model: make test runs it, make test-fast does not
def test_a_context_the_model_stops_at_is_dropped(decoder: WindowDecoder) -> None:
    spy = Recording(decoder, stop_after_a_turn=True)
    first, second = completed(two_turns(spy))
    assert likeness(second, heard_alone(decoder, SECOND)) >= ALIKE
    last = transcript_words(first)[-1]
    stopped = [p for p, _s in spy.calls if last in transcript_words(p)]
    # Decodes every 0.4 s: dropped once a second of the turn was heard as nothing.
    assert 1 <= len(stopped) <= 4


@pytest.mark.slow  # seconds of the real model: make test runs it, make test-fast does not
def test_no_context_when_it_is_off(decoder: WindowDecoder) -> None:
    spy = Recording(decoder)
    events = two_turns(spy, DecodePolicy(context_seconds=0))
    turns = completed(events)
    assert likeness(turns[1], heard_alone(decoder, SECOND)) >= ALIKE
    # Every decode is forced only with the words its own turn sent.
    assert all(own_words(p, turns) for p, _s in spy.calls), spy.calls


@pytest.mark.slow  # seconds of the real model: make test runs it, make test-fast does not
def test_a_turn_is_prompted_with_the_last_words_of_the_turns_before(
    decoder: WindowDecoder,
) -> None:
    spy = Recording(decoder)
    first, second = completed(two_turns(spy, DecodePolicy(history_words=4)))
    assert likeness(second, heard_alone(decoder, SECOND)) >= ALIKE
    said = " ".join(first.split()[-4:])  # "over the lazy dog." as the decode heard it
    prompted = [p for p in spy.prompts if p]
    assert prompted and all(p.startswith(said) for p in prompted), spy.prompts
    assert all(len(p.split()) <= 4 for p in spy.prompts), "at most 4 words"


@pytest.mark.slow  # seconds of the real model: make test runs it, make test-fast does not
def test_no_earlier_turn_in_the_prompt_when_the_history_is_off(decoder: WindowDecoder) -> None:
    spy = Recording(decoder)
    _first, second = completed(two_turns(spy, DecodePolicy(history_words=0)))
    assert likeness(second, heard_alone(decoder, SECOND)) >= ALIKE
    assert spy.calls and not any(spy.prompts), spy.prompts


def second_turn(decoder: WindowDecoder) -> tuple[Item, np.ndarray]:
    """A turn of SECOND heard after FIRST's end, none of its words sent yet."""
    first = np.concatenate([speech(FIRST), np.zeros(RATE // 2, np.float32)])
    context = turn_end(decoder, first, FIRST, seconds=5)
    assert context is not None and context.words[-1] == "dog."
    turn = np.concatenate([speech(SECOND), np.zeros(RATE // 2, np.float32)])
    return Item("item_test", 0, 0, context=context), turn


def hear(spy: Recording, item: Item, audio: np.ndarray, *, timed: bool) -> list[str]:
    """One decode of ``item``'s window as a session runs it (the default policy, beam 5):
    ``timed`` for a partial decode, else the turn's final one."""
    decoder: Any = spy  # the real decoder, behind the spy
    return hypothesis(decoder, DecodePolicy(), item, audio, 5, "", timed=timed)[0]


def test_a_short_turn_the_context_hides_is_heard_alone_at_its_end(
    decoder: WindowDecoder,
) -> None:
    spy = Recording(decoder, stop="dog")
    item, audio = second_turn(decoder)
    short = audio[: int(0.8 * RATE)]  # under CONTEXT_SILENT_SECONDS: partials wait for more
    assert hear(spy, item, short, timed=True) == []
    assert item.context is not None and len(spy.calls) == 1
    assert hear(spy, item, short, timed=False) and item.context is None, (
        "the final decode hears it without the context"
    )
    assert len(spy.calls) == 3 and "dog" not in transcript_words(spy.calls[-1][0])

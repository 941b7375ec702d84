"""Whisper's heavy steps taking turns (extractor.asr.step_turns): a big encoder pass alone, the
other steps together, a step waiting to run alone before the steps that come after it."""

from __future__ import annotations

import threading
from collections.abc import Callable
from contextlib import AbstractContextManager

from extractor.asr.step_turns import SHARED_ENCODE_FRAMES, StepTurns

WAIT = 30.0  # seconds: only a bound against a hang; nothing here waits on time


def holding(
    turn: Callable[[], AbstractContextManager[None]], log: list[str], name: str
) -> tuple[threading.Thread, threading.Event, threading.Event]:
    """A thread that takes ``turn``, notes ``name`` in ``log``, and holds the turn until its
    ``release`` event is set; ``inside`` is set once it has the turn."""
    inside, release = threading.Event(), threading.Event()

    def run() -> None:
        with turn():
            log.append(name)
            inside.set()
            assert release.wait(WAIT)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, inside, release


def waiting(turns: StepTurns, alone: int = 0, beside: int = 0) -> bool:
    """Whether ``turns`` has this many steps waiting to run alone and running together."""
    return bool(turns._waiting_alone == alone and turns._beside == beside)


def until(condition: Callable[[], bool]) -> None:
    for _ in range(3000):
        if condition():
            return
        threading.Event().wait(0.01)
    raise AssertionError("the condition never held")


def test_light_steps_run_together() -> None:
    turns, log = StepTurns(), []
    first, first_in, first_out = holding(turns.beside, log, "first")
    second, second_in, second_out = holding(turns.beside, log, "second")
    assert first_in.wait(WAIT) and second_in.wait(WAIT)  # both inside at once
    first_out.set(), second_out.set()
    first.join(WAIT), second.join(WAIT)


def test_a_big_encoder_pass_waits_for_the_steps_in_flight_and_holds_later_ones_back() -> None:
    turns, log = StepTurns(), []
    light, light_in, light_out = holding(turns.beside, log, "decode")
    assert light_in.wait(WAIT)
    big, big_in, big_out = holding(lambda: turns.encode(3000), log, "encode 30 s")
    until(lambda: waiting(turns, alone=1, beside=1))
    later, later_in, later_out = holding(lambda: turns.encode(1000), log, "encode 10 s")
    assert not big_in.is_set() and not later_in.is_set()  # the big one waits; the later too
    light_out.set()
    assert big_in.wait(WAIT)
    assert not later_in.is_set()  # nothing runs beside the big one
    big_out.set()
    assert later_in.wait(WAIT)
    later_out.set()
    for thread in (light, big, later):
        thread.join(WAIT)
    assert log == ["decode", "encode 30 s", "encode 10 s"]


def test_encoder_passes_up_to_the_limit_run_beside_other_steps() -> None:
    turns, log = StepTurns(), []
    decode, decode_in, decode_out = holding(turns.beside, log, "decode")
    assert decode_in.wait(WAIT)
    short, short_in, short_out = holding(
        lambda: turns.encode(SHARED_ENCODE_FRAMES), log, "encode 20 s"
    )
    assert short_in.wait(WAIT)  # beside the decode in flight
    decode_out.set(), short_out.set()
    decode.join(WAIT), short.join(WAIT)


def test_two_big_encoder_passes_run_one_after_the_other() -> None:
    turns, log = StepTurns(), []
    first, first_in, first_out = holding(lambda: turns.encode(3000), log, "first")
    assert first_in.wait(WAIT)
    second, second_in, second_out = holding(lambda: turns.encode(3000), log, "second")
    until(lambda: waiting(turns, alone=1))
    assert not second_in.is_set()
    first_out.set()
    assert second_in.wait(WAIT)
    second_out.set()
    first.join(WAIT), second.join(WAIT)

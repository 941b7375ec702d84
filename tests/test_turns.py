"""Whisper's encoder and an in-process Tesseract page take turns (extractor.pipeline.turns)."""

from __future__ import annotations

import threading
import time

from extractor.pipeline.turns import MemoryTurns


def test_a_page_goes_in_process_only_when_no_transcription_runs() -> None:
    turns = MemoryTurns()
    with turns.page(True) as warm:
        assert warm
    with turns.page(False) as warm:
        assert not warm  # no place in process was asked for
    with turns.transcription(), turns.page(True) as warm:
        assert not warm  # through the CLI while the encoder may run
    with turns.page(True) as warm:
        assert warm  # the transcription is over


def test_a_transcription_waits_for_the_page_being_read_in_process() -> None:
    turns = MemoryTurns()
    order: list[str] = []
    page_started = threading.Event()

    def page() -> None:
        with turns.page(True) as warm:
            assert warm
            page_started.set()
            time.sleep(0.3)
            order.append("page done")

    reader = threading.Thread(target=page)
    reader.start()
    assert page_started.wait(10)
    with turns.transcription():
        order.append("transcribing")
        with turns.page(True) as warm:
            assert not warm
    reader.join(10)
    assert order == ["page done", "transcribing"]


def test_pages_read_through_the_cli_do_not_hold_a_transcription() -> None:
    turns = MemoryTurns()
    with turns.page(False):
        started = time.monotonic()
        with turns.transcription():
            pass
    assert time.monotonic() - started < 5  # no wait for a page that is not in process

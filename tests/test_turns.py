"""Whisper's encoder and an in-process Tesseract page never run at once (pipeline.turns), and
a page read beside a job's transcription goes to the warm reader process (ocr.reader): the same
words and boxes, in a process of its own."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import cast

import pytest
from support import PAGE_ONE

from extractor import samples
from extractor.errors import EngineTimeout
from extractor.media.images import PageImage, image_pages
from extractor.ocr.reader import PageReader, ReaderUnavailable
from extractor.ocr.tesseract import OcrOptions, TesseractEngine
from extractor.pipeline.turns import MemoryTurns, Place


class WantedReader:
    """Records what the turns ask of the reader process, starts none."""

    def __init__(self) -> None:
        self.wanted: list[bool] = []

    def want(self, wanted: bool) -> None:
        self.wanted.append(wanted)


def turns() -> tuple[MemoryTurns, WantedReader]:
    reader = WantedReader()
    return MemoryTurns(cast(PageReader, reader)), reader


def test_a_page_is_read_in_process_only_when_no_transcription_runs() -> None:
    memory, _ = turns()
    with memory.page(True, job=False) as place:
        assert place is Place.IN_PROCESS
    with memory.page(False, job=False) as place:
        assert place is Place.CLI  # no place in process was free
    with memory.transcription(job=True), memory.page(True, job=False) as place:
        assert place is Place.READER  # beside the encoder: the reader process, never waiting
    with memory.page(True, job=False) as place:
        assert place is Place.IN_PROCESS  # the transcription is over


def test_a_jobs_pages_go_through_the_cli() -> None:
    memory, _ = turns()
    with memory.page(True, job=True) as place:
        assert place is Place.CLI


def test_the_reader_process_is_wanted_while_jobs_transcribe() -> None:
    memory, reader = turns()
    with memory.transcription(job=False):
        assert reader.wanted == []  # a synchronous transcription never meets a page (one slot)
    with memory.transcription(job=True):
        with memory.transcription(job=True):
            assert reader.wanted == [True]
        assert reader.wanted == [True]
    assert reader.wanted == [True, False]


def test_a_transcription_waits_for_the_page_being_read_in_process() -> None:
    memory, _ = turns()
    order: list[str] = []
    page_started = threading.Event()

    def page() -> None:
        with memory.page(True, job=False) as place:
            assert place is Place.IN_PROCESS
            page_started.set()
            time.sleep(0.3)
            order.append("page done")

    reader = threading.Thread(target=page)
    reader.start()
    assert page_started.wait(10)
    with memory.transcription(job=True):
        order.append("transcribing")
    reader.join(10)
    assert order == ["page done", "transcribing"]


def test_pages_read_elsewhere_do_not_hold_a_transcription() -> None:
    memory, _ = turns()
    with memory.page(False, job=False), memory.page(True, job=True):
        started = time.monotonic()
        with memory.transcription(job=True):
            pass
    assert time.monotonic() - started < 5  # no wait for a page that is not in process


# -- the reader process (real Tesseract) ------------------------------------------------------


@pytest.fixture
def page(tmp_path: Path) -> PageImage:
    path = tmp_path / "test.png"
    samples.text_page(PAGE_ONE).image.save(path)
    (image,) = image_pages(path, tmp_path, max_pages=1)
    return image


@pytest.fixture
def engine() -> Iterator[TesseractEngine]:
    engine = TesseractEngine(OcrOptions(in_process=True))
    assert engine.mode == "library"
    yield engine
    engine.reader.close()


def running(reader: PageReader, seconds: float = 20) -> bool:
    until = time.monotonic() + seconds
    while not reader.running and time.monotonic() < until:
        time.sleep(0.05)
    return reader.running


def test_the_reader_process_reads_the_same_words_and_boxes(
    engine: TesseractEngine, page: PageImage
) -> None:
    far = time.monotonic() + 120
    through_cli = engine.recognise(page, far, reader=True)  # not running: the CLI reads it
    engine.reader.want(True)
    assert running(engine.reader)
    with engine.reader.claim() as ours:
        assert ours
        with engine.reader.claim() as second:
            assert not second  # one page at a time: another goes through the CLI
    in_reader = engine.recognise(page, far, reader=True)
    assert in_reader == engine.recognise(page, far) == through_cli
    assert "Invoice" in " ".join(w.text for line in in_reader for w in line.words)
    engine.reader.want(False)
    until = time.monotonic() + 20
    while engine.reader.running and time.monotonic() < until:
        time.sleep(0.05)
    assert not engine.reader.running  # stopped once no job transcribes


def test_a_dead_reader_process_is_replaced_and_its_page_read_by_the_cli(
    engine: TesseractEngine, page: PageImage
) -> None:
    engine.reader.want(True)
    assert running(engine.reader)
    with engine.reader.claim() as ours:
        assert ours
        process = engine.reader._process
        assert process is not None
        process.kill()  # while a page is on its way to it
        process.wait()
        with pytest.raises(ReaderUnavailable):
            engine.reader.tsv(page.path, 0, "eng", time.monotonic() + 60)
    # The next page finds it gone (the CLI reads it) or already replaced: the same words.
    lines = engine.recognise(page, time.monotonic() + 60, reader=True)
    assert "Invoice" in " ".join(w.text for line in lines for w in line.words)
    assert running(engine.reader)  # the keeper started another
    assert engine.reader._process is not process


def test_the_reader_process_keeps_the_request_deadline(
    engine: TesseractEngine, page: PageImage
) -> None:
    engine.reader.want(True)
    assert running(engine.reader)
    with pytest.raises(EngineTimeout):
        engine.recognise(page, time.monotonic() - 1, reader=True)


def test_the_keeper_sleeps_while_no_job_wants_the_reader(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every worker starts the keeper at load; with no job transcribing it must not wake
    (it looked every second in every worker before), yet a want() still wakes it at once."""
    reader = PageReader("eng", None, 1)
    settled = threading.Event()
    looks: list[float] = []

    def settle() -> None:
        looks.append(time.monotonic())
        settled.set()

    monkeypatch.setattr(reader, "_settle", settle)
    reader.start_keeper()
    time.sleep(2.5)  # the old keeper looked twice by now
    assert looks == []
    reader.want(True)  # nothing is started: _settle is the counter
    assert settled.wait(20)
    reader.want(False)  # back to sleep: nothing more to settle

"""Rendering ahead of the readers: pages in order, a bounded number waiting, failures passed on."""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from extractor.errors import UnsupportedMedia
from extractor.media.images import PageImage
from extractor.pipeline.gate import PagesAhead


def page(index: int) -> PageImage:
    return PageImage(index, Path(f"page-{index}.pgm"), 10, 10, derived=True)


def test_pages_come_in_order_and_never_more_than_the_bound_wait() -> None:
    produced: list[int] = []
    waiting: list[int] = []
    taken = [0]
    lock = threading.Lock()

    def produce(index: int) -> PageImage:
        with lock:
            produced.append(index)
            waiting.append(len(produced) - taken[0])
        return page(index)

    with PagesAhead(12, produce, ahead=2) as ahead:
        time.sleep(0.2)  # nobody reads yet: the producer must stop at the bound
        assert produced == [0, 1, 2]

        def read(index: int) -> int:
            got = ahead.get(index)
            with lock:
                taken[0] += 1
            time.sleep(0.01)
            return got.index

        with ThreadPoolExecutor(2) as readers:
            assert list(readers.map(read, range(12))) == list(range(12))
    assert produced == list(range(12))
    assert max(waiting) <= 3


def test_a_failed_page_fails_every_later_one_and_no_reader_hangs() -> None:
    def produce(index: int) -> PageImage:
        if index == 3:
            raise UnsupportedMedia("PDF page 4 could not be rendered")
        return page(index)

    with PagesAhead(8, produce, ahead=2) as ahead:
        assert [ahead.get(i).index for i in range(3)] == [0, 1, 2]
        for index in range(3, 8):
            with pytest.raises(UnsupportedMedia, match="page 4"):
                ahead.get(index)


def test_leaving_early_stops_the_producer() -> None:
    produced: list[int] = []

    def produce(index: int) -> PageImage:
        produced.append(index)
        return page(index)

    started = time.monotonic()
    with PagesAhead(100, produce, ahead=1) as ahead:
        ahead.get(0)
    assert time.monotonic() - started < 5
    assert len(produced) <= 4  # the bound, not the document

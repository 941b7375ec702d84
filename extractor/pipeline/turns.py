"""Whisper's encoder and a page read by the worker's in-process Tesseract never run at once.

A transcription's encoder takes ~85 MB above the worker for each 30 s window, and a page read by
the in-process library its own working memory on top (a 300 dpi page 30-40 MB, ``test.png``
~25 MB with its model reloaded): one at a time, a worker stays within 300 MB (bench/memory.md);
both at once, it does not (338-349 MB: an asynchronous job transcribing beside a synchronous
page). The engine gate keeps a worker's synchronous requests one at a time, but asynchronous
jobs run beside them, outside it. So:

- a synchronous page that comes while a transcription runs is read by the warm reader process
  (``ocr.reader``: the same library, models loaded, its memory its own), started when a job's
  transcription starts; if that process is busy or not up yet, through the Tesseract CLI. It
  never waits for the transcription, nor for the job;
- a transcription that starts while a page is being read in process waits for that page to end
  (at most ``EXTRACTOR_OCR_IN_PROCESS_PAGES`` pages, bounded by ``MAX_WAIT_SECONDS``);
- an asynchronous job reads its pages through the CLI (their latency matters less), so a
  synchronous transcription never waits for a job's page, nor stands on one.
"""

from __future__ import annotations

import enum
import threading
from collections.abc import Iterator
from contextlib import contextmanager

from extractor.ocr.reader import PageReader

MAX_WAIT_SECONDS = 30.0  # longer than a page takes; past it the transcription goes ahead


class Place(enum.Enum):
    """Where one page is read."""

    IN_PROCESS = "in process"  # the worker's warm library
    READER = "reader"  # the warm reader process, else the CLI
    CLI = "cli"  # a tesseract process of its own


class MemoryTurns:
    """One per worker: the pages being read in process and the transcriptions running."""

    def __init__(self, reader: PageReader) -> None:
        self.reader = reader
        self._changed = threading.Condition()
        self._pages = 0
        self._transcriptions = 0
        self._jobs = 0  # of those, asynchronous jobs' (they keep the reader process up)

    @contextmanager
    def page(self, in_process: bool, job: bool) -> Iterator[Place]:
        """Where a page is read: ``in_process`` says whether it may be read in process (a
        place of ``EXTRACTOR_OCR_IN_PROCESS_PAGES`` is free), ``job`` whether a job asks."""
        with self._changed:
            if job or not in_process:
                place = Place.CLI
            elif self._transcriptions:
                place = Place.READER
            else:
                place = Place.IN_PROCESS
                self._pages += 1
        try:
            yield place
        finally:
            if place is Place.IN_PROCESS:
                with self._changed:
                    self._pages -= 1
                    self._changed.notify_all()

    @contextmanager
    def transcription(self, job: bool) -> Iterator[None]:
        """Send new pages elsewhere, wait for those in process to end, then transcribe; a job's
        transcription keeps the reader process up while it runs."""
        with self._changed:
            self._transcriptions += 1
            self._jobs += job
            if job and self._jobs == 1:
                self.reader.want(True)  # up in ~0.1 s; until then such pages use the CLI
            self._changed.wait_for(lambda: not self._pages, MAX_WAIT_SECONDS)
        try:
            yield
        finally:
            with self._changed:
                self._transcriptions -= 1
                self._jobs -= job
                if job and not self._jobs:
                    self.reader.want(False)

"""Whisper's encoder and an in-process Tesseract page take turns in a worker's memory.

A transcription's encoder takes ~85 MB above the worker for each 30 s window, and a 300 dpi
page read by the in-process Tesseract 30-40 MB: one at a time, a worker stays within 300 MB
(bench/memory.md); both at once, it does not (338-349 MB, an asynchronous job transcribing
beside a synchronous page). The engine gate keeps a worker's synchronous requests one at a time,
but asynchronous jobs run beside them, outside it. So:

- while a transcription runs, a page is read through the Tesseract CLI (the same words and
  boxes, in a process of its own, ~60 ms more per page), never in process;
- a transcription that starts while a page is being read in process waits for that page to end
  (at most one page: ``EXTRACTOR_OCR_IN_PROCESS_PAGES``), bounded by ``MAX_WAIT_SECONDS``;
- an asynchronous job reads all its pages through the CLI (``Extractor`` asks for that), so a
  synchronous transcription never waits for a job's page.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager

MAX_WAIT_SECONDS = 30.0  # longer than a page takes; past it the transcription goes ahead


class MemoryTurns:
    """One per worker: how many pages are being read in process, and transcriptions running."""

    def __init__(self) -> None:
        self._changed = threading.Condition()
        self._pages = 0
        self._transcriptions = 0

    @contextmanager
    def page(self, in_process: bool) -> Iterator[bool]:
        """Whether a page that may be read in process (``in_process``) is: not while a
        transcription runs."""
        with self._changed:
            warm = in_process and not self._transcriptions
            self._pages += warm
        try:
            yield warm
        finally:
            if warm:
                with self._changed:
                    self._pages -= 1
                    self._changed.notify_all()

    @contextmanager
    def transcription(self) -> Iterator[None]:
        """Send new pages to the CLI, wait for those in process to end, then transcribe."""
        with self._changed:
            self._transcriptions += 1
            self._changed.wait_for(lambda: not self._pages, MAX_WAIT_SECONDS)
        try:
            yield
        finally:
            with self._changed:
                self._transcriptions -= 1

"""A warm Tesseract in a process of its own: pages read while the worker transcribes a job.

Whisper's encoder takes ~85 MB above a worker for each 30 s window; a page read at the same time
by the worker's in-process library adds Tesseract's working memory to it (an asynchronous job
transcribing beside a synchronous A4 page: 338-349 MB, ``test.png``: 317 MB; bench/memory.md).
Reading that page through the ``tesseract`` CLI keeps its memory out of the worker but pays a
process start and a model load per page: ``test.png`` took 0.64 s against 0.11 s idle on a busy
machine, past issue 21's 3x bound. Waiting for the encoder instead holds the page up to one
encoder call (~1 s on a busy core).

This process is started once when a job's transcription starts (``PageReader.want``) and keeps
its models loaded between pages as the worker's own pool does; it reads one page at a time with
the same library calls (``WarmApi.tsv``), so the same TSV byte for byte, in its own memory
(python, libtesseract and one page: ~50-90 MB). It is stopped when no job transcribes any more.

One JSON object per line each way on its stdin and stdout: ``{"path", "page", "languages",
"psm", "seconds", "dpi"}`` in, ``{"tsv": ...}`` or ``{"error": "timeout" | "unsupported" |
"unavailable", "message": ...}`` out. It ends at the end of its stdin (its worker is gone).
"""

from __future__ import annotations

import json
import logging
import os
import select
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO

from extractor.errors import EngineTimeout, EngineUnavailable, UnsupportedMedia

log = logging.getLogger(__name__)

REPLY_GRACE_SECONDS = 5.0  # past the page's deadline, the process is killed (its monitor failed)
STOP_SECONDS = 5.0  # a stopped reader finishing its page before it is killed
WATCH_SECONDS = 1.0  # how often a wanted process is looked at (it may die between pages)


class ReaderUnavailable(Exception):
    """The reader process is not running (not started yet, or it died): read the page otherwise."""


class PageReader:
    """The worker's side: starts, feeds and stops the reader process.

    ``want(True)`` may come from a job's thread, whose CPU priority is lowered (``job_niceness``)
    and would pass to a process it starts; a synchronous page must not run at a job's priority.
    So the process is started and stopped by a keeper thread of the worker's own priority
    (``start_keeper``, called while the worker loads its engines; without that, started by the
    first ``want``). ``want`` only tells the keeper, so it never blocks its caller.
    """

    def __init__(self, languages: str, psm: int | None, keep: int) -> None:
        self.languages, self.psm, self.keep = languages, psm, keep
        self._wanted = False
        self._changed = threading.Condition()
        self._process: subprocess.Popen[bytes] | None = None
        self._busy = threading.Lock()  # one page at a time
        self._keeper: threading.Thread | None = None

    @property
    def running(self) -> bool:
        process = self._process
        return process is not None and process.poll() is None

    def start_keeper(self) -> None:
        """Start the thread that starts and stops the process, at the calling thread's priority."""
        with self._changed:
            if self._keeper is None:
                self._keeper = threading.Thread(target=self._keep, name="page-reader", daemon=True)
                self._keeper.start()

    def want(self, wanted: bool) -> None:
        """Have the process running (``True``) or not, soon; never waits for it."""
        with self._changed:
            self._wanted = wanted
            self._changed.notify_all()
            self.start_keeper()

    def _keep(self) -> None:
        while True:
            with self._changed:
                # Woken by want() or by a page that found the process dead (``_replace``). Only
                # while the process is wanted does it also look once a second whether it died
                # unseen; a worker whose jobs never transcribe sleeps here for good.
                poll = WATCH_SECONDS if self._wanted else None
                self._changed.wait_for(lambda: self._wanted != self.running, timeout=poll)
            try:
                self._settle()
            except OSError:  # cannot start a process now: pages go through the CLI meanwhile
                log.warning("page reader not started", exc_info=True)
                time.sleep(5)
            time.sleep(0.05)  # a process that dies at once is not restarted in a tight loop

    def _settle(self) -> None:
        """Start or stop the process to match what is wanted."""
        if self._wanted and not self.running:
            with self._busy:  # not swapped under a page that found the old one dead
                self._process = self._spawn()
        elif not self._wanted and self._process is not None:
            with self._busy:  # a page being read finishes first
                process, self._process = self._process, None
            if process is not None:
                _end(process)

    def _spawn(self) -> subprocess.Popen[bytes]:
        command = [sys.executable, "-m", "extractor.ocr.reader", self.languages]
        command += [str(self.psm if self.psm is not None else "")]
        # OMP_THREAD_LIMIT as the CLI gets it: nothing else in that process uses OpenMP.
        return subprocess.Popen(
            command, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            env={**os.environ, "OMP_THREAD_LIMIT": "1"},
        )  # fmt: skip

    @contextmanager
    def claim(self) -> Iterator[bool]:
        """Whether the process is running and free for a page (never waits): if so, it is
        this caller's until the block ends."""
        if not self.running or not self._busy.acquire(blocking=False):
            yield False
            return
        try:
            yield self.running
        finally:
            self._busy.release()

    def tsv(
        self, path: Path, page_number: int, languages: str, deadline: float, dpi: int | None = None
    ) -> str:
        """Tesseract's TSV for the image at ``path``, read by the process (the caller holds
        ``claim``); past ``deadline`` a 504, and the process is replaced."""
        process = self._process
        if process is None or process.stdin is None or process.stdout is None:
            raise ReaderUnavailable("the page reader is not running")
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise EngineTimeout("the request timed out before OCR could run")
        ask = {"path": str(path), "page": page_number, "languages": languages,
               "psm": self.psm, "seconds": remaining, "dpi": dpi}  # fmt: skip
        try:
            process.stdin.write(json.dumps(ask).encode() + b"\n")
            process.stdin.flush()
            line = _line_within(process.stdout, remaining + REPLY_GRACE_SECONDS)
        except (OSError, ValueError) as exc:  # its pipe closed under us: it died
            self._replace(process)
            raise ReaderUnavailable(f"the page reader ended: {exc}") from exc
        if line is None:
            self._replace(process)
            raise EngineTimeout("OCR took longer than the request timeout")
        if not line:
            self._replace(process)
            raise ReaderUnavailable("the page reader ended")
        reply = json.loads(line)
        if "tsv" in reply:
            return str(reply["tsv"])
        error = {"timeout": EngineTimeout, "unsupported": UnsupportedMedia}
        raise error.get(reply["error"], EngineUnavailable)(reply["message"])

    def _replace(self, process: subprocess.Popen[bytes]) -> None:
        """Kill a process that no longer answers; the keeper starts another if still wanted."""
        process.kill()
        process.wait()
        with self._changed:
            if self._process is process:
                self._process = None
            self._changed.notify_all()

    def close(self) -> None:
        """Stop the process for good (the worker is exiting)."""
        self.want(False)
        process, self._process = self._process, None
        if process is not None:
            _end(process)


def _line_within(stream: IO[bytes], seconds: float) -> bytes | None:
    """One line from ``stream``, ``b""`` at its end, None if nothing came within ``seconds``."""
    ready, _, _ = select.select([stream], [], [], max(seconds, 0))
    return stream.readline() if ready else None


def _end(process: subprocess.Popen[bytes]) -> None:
    """Close its stdin (it exits after its page), kill it if it does not."""
    try:
        if process.stdin is not None:
            process.stdin.close()
        process.wait(STOP_SECONDS)
    except (OSError, subprocess.TimeoutExpired):
        process.kill()
        process.wait()


def serve(languages: str, psm: int | None) -> None:
    """The process's side: load ``languages`` once, then read each page asked for on stdin."""
    from extractor.ocr.tesslib import LibraryUnavailable, shared_pool

    pool = shared_pool()
    with pool.api(languages, psm, 1):  # loaded before the first page comes
        pass
    for line in sys.stdin.buffer:
        ask = json.loads(line)
        deadline = time.monotonic() + float(ask["seconds"])
        try:
            with pool.api(ask["languages"], ask["psm"], 1) as api:
                page = Path(ask["path"]), int(ask["page"])
                reply = {"tsv": api.tsv(*page, deadline, ask.get("dpi"))}
        except EngineTimeout as exc:
            reply = {"error": "timeout", "message": str(exc)}
        except UnsupportedMedia as exc:
            reply = {"error": "unsupported", "message": str(exc)}
        except LibraryUnavailable as exc:
            reply = {"error": "unavailable", "message": str(exc)}
        sys.stdout.buffer.write(json.dumps(reply).encode() + b"\n")
        sys.stdout.buffer.flush()


if __name__ == "__main__":
    serve(sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 and sys.argv[2] else None)

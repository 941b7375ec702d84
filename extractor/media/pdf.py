"""PDF pages rendered by PDFium in a renderer process of its own, one page at a time."""

from __future__ import annotations

import json
import logging
import os
import select
import signal
import subprocess
import sys
import tempfile
import threading
import time
from contextlib import suppress
from pathlib import Path
from typing import Any, NoReturn

from PIL import Image

from extractor.errors import (
    EngineTimeout,
    EngineUnavailable,
    ExtractorError,
    PayloadTooLarge,
    UnsupportedMedia,
)
from extractor.media.images import PageImage
from extractor.media.shrink import CHILD_ERRORS, child_environ, signalled

log = logging.getLogger(__name__)


class PdfPages:
    """A PDF opened for rendering page by page in a renderer process of its own.

    The renderer (``python -m extractor.media.pdfrender``) is started per document, so PDFium's
    memory (a scanned page's decoded JPEG, the page bitmap) is never part of the worker's:
    it is capped by ``memory_mb`` (``RLIMIT_AS`` in the renderer) and returned to the system
    when the document is closed. ``render(i)`` may be called from any thread; calls are
    serialised, one page rendering at a time. Each one waits at most ``page_timeout`` seconds
    or until the request's deadline, whichever comes first, then kills the renderer with a 504;
    since no two documents share a process or a lock, a slow or hung PDF cannot hold up any
    other request's PDF.

    After ``close()``, ``peak_rss_mb`` is the renderer's peak RSS (``ru_maxrss``).
    """

    def __init__(
        self, path: Path, workdir: Path, dpi: int, max_pages: int, *,
        page_timeout: float | None = None, deadline: float | None = None,
        memory_mb: int = 1024, fit_pixels: int = 0,
    ) -> None:  # fmt: skip
        self._workdir, self._page_timeout, self._memory_mb = workdir, page_timeout, memory_mb
        self._dpi = dpi
        self._lock = threading.Lock()  # one request to the renderer at a time
        self._reap_lock = threading.RLock()
        self._buffer = b""
        self._failure: tuple[type[ExtractorError], str] | None = None  # raised by later calls
        self._rendered = 0
        self.count = 0
        self.peak_rss_mb: float | None = None
        # Nameless, so never left behind; closed in close().
        self._stderr = tempfile.TemporaryFile(dir=workdir)  # noqa: SIM115
        command = [
            sys.executable, "-m", "extractor.media.pdfrender", str(path), str(dpi), str(max_pages),
            str(Image.MAX_IMAGE_PIXELS or 0), str(workdir), str(memory_mb), str(fit_pixels),
        ]  # fmt: skip
        try:
            self._process = subprocess.Popen(
                command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._stderr,
                close_fds=True, bufsize=0, env=child_environ(),
            )  # fmt: skip
        except BaseException:
            self._stderr.close()
            raise
        try:
            opened = self._answer(self._stop(deadline), "the PDF", -1)
            self.count = int(opened["pages"])
        except BaseException:
            self.close()
            raise

    def render(self, index: int, deadline: float | None = None) -> PageImage:
        """Render page ``index`` at the document's dpi into a file Tesseract reads (grey, or
        colour for a page with colour)."""
        what = f"PDF page {index + 1}"
        wait = -1.0 if deadline is None else max(deadline - time.monotonic(), 0.0)
        if not self._lock.acquire(timeout=wait):  # another page is rendering, too long
            raise EngineTimeout(f"{what}: waited for the PDF's other pages past the deadline")
        try:
            self._raise_failure()
            if self._process.returncode is not None:  # closed
                raise EngineUnavailable(f"{what}: the PDF's renderer has exited")
            try:
                assert self._process.stdin is not None
                self._process.stdin.write(json.dumps({"render": index}).encode() + b"\n")
            except OSError:  # the renderer died; its exit status says how
                pass
            reply = self._answer(self._stop(deadline), what, index)
            self._rendered += 1
            width, page_width = int(reply["width"]), int(reply["page_width"])
            return PageImage(
                index, Path(reply["path"]), width, int(reply["height"]), derived=True,
                upload_size=(page_width, int(reply["page_height"])),
                dpi=max(1, round(self._dpi * width / page_width)),  # drawn scaled down: fewer
            )  # fmt: skip
        finally:
            self._lock.release()

    def close(self) -> None:
        """Stop the renderer and reap it; safe to call again, and after it died."""
        with self._reap_lock:
            process = self._process
            if process.returncode is None:
                if process.stdin is not None:
                    with suppress(OSError):
                        process.stdin.close()  # EOF: the renderer closes the PDF and exits
                self._reap(kill_after=CLOSE_WAIT)
            for stream in (process.stdin, process.stdout, self._stderr):
                if stream is not None:
                    with suppress(OSError):
                        stream.close()

    # -- the protocol ---------------------------------------------------------------------

    def _stop(self, deadline: float | None) -> float | None:
        """When to give up waiting for an answer: the page timeout or the request deadline."""
        stop = deadline
        if self._page_timeout is not None:
            page_stop = time.monotonic() + self._page_timeout
            stop = page_stop if stop is None else min(stop, page_stop)
        return stop

    def _answer(self, stop: float | None, what: str, index: int) -> dict[str, Any]:
        """The renderer's next answer, or its error, timeout or death as an ``ExtractorError``."""
        line = self._read_line(stop)
        if line is None:  # past the time allowed: the renderer goes, the request fails
            self._reap(kill_after=0)
            if index >= 0:
                (self._workdir / f"page-{index}.pnm").unlink(missing_ok=True)  # half-written
            verb = "to render" if index >= 0 else "to open"
            self._fail(EngineTimeout, f"{what} took longer {verb} than allowed")
        if line == b"":  # the renderer died without answering
            self._reap(kill_after=CLOSE_WAIT)
            if index >= 0:
                (self._workdir / f"page-{index}.pnm").unlink(missing_ok=True)
            self._fail(*self._death(what, index))
        try:
            reply = json.loads(line)
        except ValueError:
            reply = {"error": "unsupported", "message": f"{what}: unreadable answer {line!r}"}
        if "error" in reply:
            kind = CHILD_ERRORS.get(reply["error"], UnsupportedMedia)
            raise kind(str(reply.get("message") or what))  # the renderer serves on: no _fail
        return dict(reply)

    def _read_line(self, stop: float | None) -> bytes | None:
        """One line from the renderer; ``b""`` at EOF, None once ``stop`` has passed."""
        assert self._process.stdout is not None
        fd = self._process.stdout.fileno()
        while b"\n" not in self._buffer:
            wait = None if stop is None else stop - time.monotonic()
            if wait is not None and wait <= 0:
                return None
            ready, _, _ = select.select([fd], [], [], wait)
            if not ready:
                continue
            chunk = os.read(fd, 65536)
            if not chunk:
                return b""
            self._buffer += chunk
        line, self._buffer = self._buffer.split(b"\n", 1)
        return line

    def _death(self, what: str, index: int) -> tuple[type[ExtractorError], str]:
        """What a renderer that died without answering means for the request.

        Killed by a signal: as ``shrink.signalled`` reads it (the OOM killer's SIGKILL a 413,
        a crash of PDFium's a 415, a stop from outside a 503). Exiting with a status means
        the renderer's Python failed where it could not answer: a MemoryError is a 413; before
        the PDF was opened it is the renderer that cannot start (a 503, logged with its
        stderr), after that a 415 for the page that did it.
        """
        status = self._process.returncode
        tail = self._stderr_tail()
        log.warning("PDF renderer died", extra={"page": index + 1, "status": status,
                                                "stderr": tail})  # fmt: skip
        page = what if index >= 0 else "the PDF"
        memory = (
            f"{page} needs more memory to render than EXTRACTOR_PDF_RENDER_MEMORY_MB allows"
            f" ({self._memory_mb} MB)"
        )
        if status is not None and status < 0:
            crashed = f"{page} could not be rendered by PDFium"
            return signalled(status, "the PDF renderer", memory, crashed)
        if "MemoryError" in tail:
            return PayloadTooLarge, memory
        if index < 0:
            return EngineUnavailable, f"the PDF renderer could not start (exit status {status})"
        return UnsupportedMedia, f"{page} could not be rendered (renderer exit status {status})"

    def _fail(self, kind: type[ExtractorError], message: str) -> NoReturn:
        """Raise, and have every later call on this document raise the same."""
        self._failure = (kind, message)
        raise kind(message)

    def _raise_failure(self) -> None:
        if self._failure is not None:
            kind, message = self._failure
            raise kind(message)

    def _stderr_tail(self) -> str:
        with suppress(OSError, ValueError):
            self._stderr.seek(0, os.SEEK_END)
            self._stderr.seek(max(self._stderr.tell() - 2000, 0))
            return self._stderr.read().decode(errors="replace").strip()
        return ""

    # -- the process ----------------------------------------------------------------------

    def _reap(self, kill_after: float) -> None:
        """Wait for the renderer to exit, SIGKILL it after ``kill_after`` seconds, and keep
        its exit status and peak RSS (``os.wait4``: Popen's own wait drops the rusage)."""
        with self._reap_lock:
            process = self._process
            if process.returncode is not None:
                return
            stop = time.monotonic() + kill_after
            try:
                while True:
                    pid, status, usage = os.wait4(process.pid, os.WNOHANG)
                    if pid:
                        break
                    if time.monotonic() >= stop:
                        with suppress(ProcessLookupError):
                            os.kill(process.pid, signal.SIGKILL)
                        pid, status, usage = os.wait4(process.pid, 0)
                        break
                    time.sleep(0.005)
            except ChildProcessError:  # reaped elsewhere (Popen.poll): its status is Popen's
                process.wait()
                return
            process.returncode = os.waitstatus_to_exitcode(status)  # Popen must not reap again
            self.peak_rss_mb = round(usage.ru_maxrss / 1024, 1)  # KiB on Linux
        log.debug(
            "PDF renderer exited",
            extra={"pages": self.count, "rendered": self._rendered,
                   "peak_rss_mb": self.peak_rss_mb, "status": process.returncode},
        )  # fmt: skip


CLOSE_WAIT = 2.0  # seconds a renderer gets to exit on EOF before it is killed

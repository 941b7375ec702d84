"""What an uploaded file is, decided from its bytes, and decoding it into pages or samples.

The file name and the part's Content-Type are never trusted: the magic numbers pick the kind,
and the decoder (Pillow, PDFium in a renderer process of its own, FFmpeg through PyAV) has the
last word. Every decoder error is translated here into ``UnsupportedMedia`` (415) or a
``PayloadTooLarge`` (413).
"""

from __future__ import annotations

import json
import logging
import os
import select
import signal
import site
import struct
import subprocess
import sys
import tempfile
import threading
import time
import warnings
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import Any, NoReturn

import numpy as np
from PIL import Image, ImageOps, UnidentifiedImageError

from .errors import (
    AudioTooLong,
    EngineTimeout,
    EngineUnavailable,
    ExtractorError,
    PayloadTooLarge,
    TooManyPages,
    UnsupportedMedia,
)

log = logging.getLogger(__name__)

SAMPLE_RATE = 16_000  # Hz: what Whisper expects
# Formats Tesseract (Leptonica) reads straight from the uploaded file, skipping a re-encode.
TESSERACT_NATIVE = {"PNG", "JPEG", "BMP", "TIFF"}
TESSERACT_NATIVE_MODES = {"1", "L", "P", "RGB", "RGBA", "LA"}


class MediaKind(Enum):
    IMAGE = "image"
    PDF = "pdf"
    AUDIO = "audio"


@dataclass(frozen=True)
class Sniffed:
    kind: MediaKind
    format: str  # a short name: png, jpeg, tiff, pdf, wav, flac, mp3, ogg, mp4, webm, ...


def sniff(head: bytes) -> Sniffed:
    """Classify a file by its first bytes; raise ``UnsupportedMedia`` for anything else."""
    checks: list[tuple[bool, MediaKind, str]] = [
        (head.startswith(b"\x89PNG\r\n\x1a\n"), MediaKind.IMAGE, "png"),
        (head.startswith(b"\xff\xd8\xff"), MediaKind.IMAGE, "jpeg"),
        (head[:4] in (b"II*\x00", b"MM\x00*", b"II+\x00", b"MM\x00+"), MediaKind.IMAGE, "tiff"),
        (head.startswith(b"BM") and len(head) >= 26, MediaKind.IMAGE, "bmp"),
        (head[:6] in (b"GIF87a", b"GIF89a"), MediaKind.IMAGE, "gif"),
        (head[:4] == b"RIFF" and head[8:12] == b"WEBP", MediaKind.IMAGE, "webp"),
        (b"%PDF-" in head[:1024], MediaKind.PDF, "pdf"),
        (head[:4] in (b"RIFF", b"RF64") and head[8:12] == b"WAVE", MediaKind.AUDIO, "wav"),
        (head.startswith(b"fLaC"), MediaKind.AUDIO, "flac"),
        (head.startswith(b"ID3"), MediaKind.AUDIO, "mp3"),
        (head.startswith(b"OggS"), MediaKind.AUDIO, "ogg"),
        (head[4:8] == b"ftyp", MediaKind.AUDIO, "mp4"),
        (head.startswith(b"\x1a\x45\xdf\xa3"), MediaKind.AUDIO, "webm"),
        (head[:4] == b"FORM" and head[8:12] in (b"AIFF", b"AIFC"), MediaKind.AUDIO, "aiff"),
        # An MPEG audio frame or an ADTS (AAC) header: 11 set sync bits.
        (len(head) >= 4 and head[0] == 0xFF and head[1] & 0xE0 == 0xE0, MediaKind.AUDIO, "mpeg"),
    ]
    for matched, kind, name in checks:
        if matched:
            return Sniffed(kind, name)
    raise UnsupportedMedia(
        "not a supported file: expected an image (PNG, JPEG, TIFF, BMP, GIF, WebP), a PDF, or"
        " audio (WAV, FLAC, MP3, OGG/Opus, M4A/AAC, WebM)"
    )


# -- images and PDFs ----------------------------------------------------------------------


@dataclass(frozen=True)
class PageImage:
    """One page ready for Tesseract: a file it can read, and the page's size in pixels."""

    index: int
    path: Path
    width: int
    height: int
    derived: bool = False  # a file made for Tesseract (not the upload): delete once read


@contextmanager
def _pillow_errors(what: str) -> Iterator[None]:
    try:
        yield
    except (Image.DecompressionBombError, Image.DecompressionBombWarning) as exc:
        # Pillow raises past twice MAX_IMAGE_PIXELS; the warning only arrives as an exception
        # when someone's warning filter says "error", and then means the same.
        raise PayloadTooLarge(f"{what} has too many pixels to decode safely: {exc}") from exc
    except (
        UnidentifiedImageError, OSError, ValueError, SyntaxError, EOFError,
        # Pillow's parsers also surface corrupt headers as these (fuzzing found a TIFF frame
        # without dimensions raising TypeError); inside this block they mean a bad file.
        TypeError, KeyError, IndexError, ZeroDivisionError, struct.error,
    ) as exc:  # fmt: skip
        raise UnsupportedMedia(f"{what} could not be decoded: {exc}") from exc


# check_pixels() refuses every image Pillow would warn about; the warning itself would only add
# a stderr line per distinct size. Set once here, never swapped per call (see check_pixels).
warnings.filterwarnings("ignore", category=Image.DecompressionBombWarning)


def check_pixels(width: float, height: float, what: str) -> None:
    """Refuse (413) a page past ``Image.MAX_IMAGE_PIXELS`` before it is decoded or rendered.

    Pillow itself only warns between that limit and twice it, and turning its warning into an
    error takes ``warnings.catch_warnings``, which swaps process-wide state and is not safe
    while other pages decode in other threads; an explicit count needs no shared state, and
    also covers every TIFF frame (Pillow checks only the first) and rendered PDF pages.
    """
    limit = Image.MAX_IMAGE_PIXELS
    if limit and width * height > limit:
        raise PayloadTooLarge(
            f"{what} has {width * height:.0f} pixels; the limit is {limit} (too many to decode"
            " safely)"
        )


def image_pages(path: Path, workdir: Path, max_pages: int) -> list[PageImage]:
    """Split an image into pages (every TIFF frame is one), re-encoding only what Tesseract
    cannot read as it is (GIF, WebP, rotated JPEGs, unusual modes)."""
    with _pillow_errors("the image"), Image.open(path) as image:
        check_pixels(image.width, image.height, "the image")
        frames = getattr(image, "n_frames", 1) if image.format == "TIFF" else 1
        if frames > max_pages:
            raise TooManyPages(f"the image has {frames} pages; the limit is {max_pages}")
        rotated = image.format == "JPEG" and image.getexif().get(0x0112, 1) != 1
        if (
            frames == 1
            and image.format in TESSERACT_NATIVE
            and image.mode in TESSERACT_NATIVE_MODES
            and not rotated
        ):
            image.load()  # decode fully once: a truncated file is a 415 here, not in Tesseract
            return [PageImage(0, path, image.width, image.height)]
        pages = []
        for index in range(frames):
            image.seek(index)
            check_pixels(image.width, image.height, f"page {index + 1} of the image")
            frame = ImageOps.exif_transpose(image) if rotated else image
            pages.append(_save_for_tesseract(frame, workdir / f"page-{index}.pnm", index))
        return pages


def _save_for_tesseract(image: Image.Image, target: Path, index: int) -> PageImage:
    if image.mode not in ("1", "L", "RGB"):
        image = image.convert("RGBA").convert("RGB") if "A" in image.mode else image.convert("RGB")
    # Netpbm (PGM/PPM): written in ~5 ms where even the fastest PNG takes ~90 ms for a 300 dpi
    # page, and Tesseract reads it as fast; the file is removed as soon as its page is read.
    image.save(target, format="PPM")
    return PageImage(index, target, image.width, image.height, derived=True)


class PdfPages:
    """A PDF opened for rendering page by page in a renderer process of its own.

    The renderer (``python -m extractor.pdfrender``) is started per document, so PDFium's
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
        memory_mb: int = 1024,
    ) -> None:  # fmt: skip
        self._workdir, self._page_timeout, self._memory_mb = workdir, page_timeout, memory_mb
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
            sys.executable, "-m", "extractor.pdfrender", str(path), str(dpi), str(max_pages),
            str(Image.MAX_IMAGE_PIXELS or 0), str(workdir), str(memory_mb),
        ]  # fmt: skip
        try:
            self._process = subprocess.Popen(
                command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._stderr,
                close_fds=True, bufsize=0, env=_renderer_environ(),
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
        """Render page ``index`` in grey at the document's dpi into a file Tesseract reads."""
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
            return PageImage(
                index, Path(reply["path"]), int(reply["width"]), int(reply["height"]),
                derived=True,
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
                (self._workdir / f"page-{index}.pgm").unlink(missing_ok=True)  # half-written
            verb = "to render" if index >= 0 else "to open"
            self._fail(EngineTimeout, f"{what} took longer {verb} than allowed")
        if line == b"":  # the renderer died without answering
            self._reap(kill_after=CLOSE_WAIT)
            if index >= 0:
                (self._workdir / f"page-{index}.pgm").unlink(missing_ok=True)
            self._fail(*self._death(what, index))
        try:
            reply = json.loads(line)
        except ValueError:
            reply = {"error": "unsupported", "message": f"{what}: unreadable answer {line!r}"}
        if "error" in reply:
            kind = _RENDER_ERRORS.get(reply["error"], UnsupportedMedia)
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

        Our own SIGKILL at a timeout never gets here (that is a 504). Killed by SIGKILL from
        elsewhere: the OOM killer (kernel or cgroup), the only other party that kills a busy
        renderer on its own, so the page needed too much memory, a 413. A crash (SIGSEGV,
        SIGABRT, ...): PDFium failed on this file (allocation failures under the cap don't crash
        it, they are answered or skipped), a 415. Any other signal (SIGTERM, SIGINT) stopped it
        from outside, nothing to do with the file: a 503, to retry. Exiting with a status means
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
            name = signal.Signals(-status).name if -status in _SIGNALS else f"signal {-status}"
            if -status == signal.SIGKILL:
                return PayloadTooLarge, f"{memory}: the renderer was killed (SIGKILL)"
            if -status in _CRASHES:
                return UnsupportedMedia, f"{page} could not be rendered: PDFium crashed ({name})"
            return EngineUnavailable, f"the PDF renderer was stopped by {name}; retry"
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


_RENDER_ERRORS: dict[str, type[ExtractorError]] = {
    "unsupported": UnsupportedMedia,
    "too_large": PayloadTooLarge,
    "too_many_pages": TooManyPages,
}
_SIGNALS = {s.value for s in signal.Signals}
_CRASHES = {signal.SIGSEGV, signal.SIGBUS, signal.SIGABRT, signal.SIGILL, signal.SIGFPE,
            signal.SIGTRAP}  # fmt: skip
CLOSE_WAIT = 2.0  # seconds a renderer gets to exit on EOF before it is killed


def _renderer_environ() -> dict[str, str]:
    """This environment, with the directory holding this ``extractor`` package first on
    PYTHONPATH, so the renderer runs the same code (a source tree, not an installed copy)."""
    env = dict(os.environ)
    root = str(Path(__file__).resolve().parent.parent)
    installed = {str(Path(p).resolve()) for p in site.getsitepackages()}
    if root not in installed:  # a site-packages dir first on the path would shadow the stdlib
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [root, env.get("PYTHONPATH")]))
    return env


# -- audio --------------------------------------------------------------------------------


@dataclass(frozen=True)
class Audio:
    """Decoded speech: float32 samples at 16 kHz, one row per channel kept."""

    samples: np.ndarray  # shape (channels, n)
    source_channels: int

    @property
    def duration(self) -> float:
        return self.samples.shape[1] / SAMPLE_RATE  # seconds

    def mono(self) -> np.ndarray:
        return self.samples[0] if self.samples.shape[0] == 1 else self.samples.mean(axis=0)


@contextmanager
def av_errors() -> Iterator[None]:
    import av

    try:
        yield
    except (av.FFmpegError, ValueError, IndexError, OSError) as exc:
        raise UnsupportedMedia(f"the audio could not be decoded: {exc}") from exc


def decode_audio(path: Path, *, max_seconds: float, keep_channels: bool = False) -> Audio:
    """Decode the first audio track to 16 kHz float32, mono or one row per channel, in memory.

    Samples go straight into one growing buffer (no list of chunks to concatenate), so a long
    recording is never held twice; the duration limit is checked from the container first and
    enforced while decoding for files that do not declare it. The server decodes with
    ``spooled.decode_spooled`` instead, which holds a bounded piece at a time.
    """
    import av

    with av_errors(), av.open(str(path), metadata_errors="ignore") as container:
        track = open_audio(container, max_seconds, keep_channels)
        # The buffer never outgrows the longest accepted audio: a file that declares its length
        # gets exactly that, one that does not starts at 30 s and doubles up to the limit.
        limit = int((max_seconds + 1) * SAMPLE_RATE)
        first = min(int(((track.declared or 30) + 1) * SAMPLE_RATE), limit)
        buffer = np.empty((track.rows, first), dtype=np.float32)
        filled = 0
        for chunk in track.pieces():
            filled, buffer = _append(buffer, filled, chunk, limit, max_seconds)
    if filled == 0:
        raise UnsupportedMedia("the audio track holds no samples")
    return Audio(buffer[:, :filled], track.channels)


@dataclass(frozen=True)
class AudioTrack:
    """An opened file's first audio track and the resampler to 16 kHz float rows."""

    container: Any
    stream: Any
    declared: float | None  # seconds, when the container states it
    channels: int  # in the file
    rows: int  # in the output: 1 (mono mix) or 2 (one per channel)
    resampler: Any

    def pieces(self) -> Iterator[np.ndarray]:
        """The resampled samples, (rows, n) float32 a frame at a time, then the resampler's
        tail; raise inside ``_av_errors``."""
        for frame in _frames(self.container, self.stream):
            for out in self.resampler.resample(frame):
                yield out.to_ndarray()
        for out in self.resampler.resample(None):
            yield out.to_ndarray()


def open_audio(container: Any, max_seconds: float, keep_channels: bool) -> AudioTrack:
    """The first audio track of an opened ``container``, checked (415 without one or without a
    decoder, 413 when its declared length passes ``max_seconds``)."""
    import av

    if not container.streams.audio:
        raise UnsupportedMedia("the file has no audio track")
    stream = container.streams.audio[0]
    declared = _declared_seconds(container, stream)
    if declared is not None and declared > max_seconds + 1:
        raise AudioTooLong(f"the audio lasts {declared:.0f} s; the limit is {max_seconds:.0f} s")
    if stream.codec_context is None:  # FFmpeg knows no decoder for this codec tag
        raise UnsupportedMedia("the audio track uses a codec that cannot be decoded")
    channels = stream.codec_context.channels or 1
    rows = 2 if keep_channels and channels >= 2 else 1
    resampler = av.AudioResampler(
        format="fltp", layout="stereo" if rows == 2 else "mono", rate=SAMPLE_RATE
    )
    return AudioTrack(container, stream, declared, channels, rows, resampler)


def _frames(container: Any, stream: Any) -> Iterator[Any]:
    import av

    try:
        yield from container.decode(stream)
    except av.error.EOFError:
        return


def _declared_seconds(container: object, stream: object) -> float | None:
    duration, time_base = getattr(stream, "duration", None), getattr(stream, "time_base", None)
    if duration and time_base:
        return float(duration * time_base)
    if getattr(container, "duration", None):
        return float(container.duration) / 1_000_000  # type: ignore[attr-defined]  # AV_TIME_BASE
    return None


def _append(
    buffer: np.ndarray, filled: int, chunk: np.ndarray, limit: int, max_seconds: float
) -> tuple[int, np.ndarray]:
    n = chunk.shape[1]
    if filled + n > limit:
        raise AudioTooLong(f"the audio lasts longer than the limit of {max_seconds:.0f} s")
    if filled + n > buffer.shape[1]:
        size = min(max(2 * buffer.shape[1], filled + n), limit)
        grown = np.empty((buffer.shape[0], size), np.float32)
        grown[:, :filled] = buffer[:, :filled]
        buffer = grown
    buffer[:, filled : filled + n] = chunk
    return filled + n, buffer

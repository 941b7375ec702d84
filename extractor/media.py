"""What an uploaded file is, decided from its bytes, and decoding it into pages or samples.

The file name and the part's Content-Type are never trusted: the magic numbers pick the kind,
and the decoder (Pillow, PDFium, FFmpeg through PyAV) has the last word. Every decoder error is
translated here into ``UnsupportedMedia`` (415) or a ``PayloadTooLarge`` (413).
"""

from __future__ import annotations

import logging
import math
import struct
import threading
import time
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image, ImageOps, UnidentifiedImageError

from .errors import (
    AudioTooLong,
    EngineTimeout,
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


# PDFium is not thread-safe: every call into it goes through this lock, held for at most one
# slice of rendering at a time so a long page cannot starve the other requests' pages.
_PDFIUM_LOCK = threading.Lock()
RENDER_SLICE = 0.05  # seconds of progressive rendering before the lock is offered to others
CLOSE_WAIT = 5.0  # seconds to wait for the lock to close a document before leaving it open


@contextmanager
def _pdfium(deadline: float | None, what: str) -> Iterator[None]:
    """Hold the PDFium lock, waiting no later than ``deadline`` for it (504 after that).

    A PDFium call that never returns keeps the lock for good; bounding the wait is what keeps
    every other request's PDF from hanging with it.
    """
    wait = -1.0 if deadline is None else max(deadline - time.monotonic(), 0.0)
    if not _PDFIUM_LOCK.acquire(timeout=wait):
        raise EngineTimeout(f"{what}: PDF rendering stayed busy past the time allowed")
    try:
        yield
    finally:
        _PDFIUM_LOCK.release()


class PdfPages:
    """A PDF opened for rendering page by page; ``render(i)`` may be called from any thread.

    Pages render progressively (PDFium's pause callback) in slices of ``RENDER_SLICE``, the
    lock released between slices, and stop at ``page_timeout`` seconds per page or the request
    deadline, whichever comes first, with a 504.
    """

    def __init__(
        self, path: Path, workdir: Path, dpi: int, max_pages: int, *,
        page_timeout: float | None = None, deadline: float | None = None,
    ) -> None:  # fmt: skip
        import pypdfium2 as pdfium

        self._workdir, self._scale = workdir, dpi / 72  # PDF user space is 72 units per inch
        self._page_timeout = page_timeout
        with _pdfium(deadline, "opening the PDF"):
            try:
                self._pdf = pdfium.PdfDocument(str(path))
            except pdfium.PdfiumError as exc:
                raise UnsupportedMedia(f"the PDF could not be opened: {exc}") from exc
            self.count = len(self._pdf)
        if self.count == 0:
            self.close()
            raise UnsupportedMedia("the PDF has no pages")
        if self.count > max_pages:
            self.close()
            raise TooManyPages(f"the PDF has {self.count} pages; the limit is {max_pages}")

    def render(self, index: int, deadline: float | None = None) -> PageImage:
        """Render page ``index`` in grey at the document's dpi into a file Tesseract reads."""
        import pypdfium2 as pdfium
        import pypdfium2.internal as pdfium_i
        import pypdfium2.raw as pdfium_c

        stop = deadline
        if self._page_timeout is not None:
            page_stop = time.monotonic() + self._page_timeout
            stop = page_stop if stop is None else min(stop, page_stop)
        what = f"PDF page {index + 1}"
        slice_started = time.monotonic()

        def pause_now(_pause: object) -> bool:
            now = time.monotonic()
            return now - slice_started > RENDER_SLICE or (stop is not None and now > stop)

        pause = pdfium_c.IFSDK_PAUSE(version=1)
        pdfium_i.set_callback(pause, "NeedToPauseNow", pause_now)
        with _pdfium(stop, what):
            try:
                page = self._pdf[index]
            except pdfium.PdfiumError as exc:
                raise UnsupportedMedia(f"{what} could not be rendered: {exc}") from exc
        bitmap = None
        try:
            with _pdfium(stop, what):
                width, height = page.get_size()
                check_pixels(width * self._scale, height * self._scale, what)
                size = math.ceil(width * self._scale), math.ceil(height * self._scale)
                bitmap = pdfium.PdfBitmap.new_native(*size, format=pdfium_c.FPDFBitmap_Gray)
                bitmap.fill_rect((255, 255, 255, 255), 0, 0, *size)
                slice_started = time.monotonic()
                flags = pdfium_c.FPDF_GRAYSCALE | pdfium_c.FPDF_ANNOT  # as page.render(grayscale)
                status = pdfium_c.FPDF_RenderPageBitmap_Start(
                    bitmap, page, 0, 0, *size, 0, flags, pause
                )
            while status == pdfium_c.FPDF_RENDER_TOBECONTINUED:
                if stop is not None and time.monotonic() > stop:
                    raise EngineTimeout(f"{what} took longer to render than allowed")
                with _pdfium(stop, what):
                    slice_started = time.monotonic()
                    status = pdfium_c.FPDF_RenderPage_Continue(page, pause)
            if status != pdfium_c.FPDF_RENDER_DONE:
                raise UnsupportedMedia(f"{what} could not be rendered")
            return _save_for_tesseract(bitmap.to_pil(), self._workdir / f"page-{index}.pnm", index)
        finally:
            with _pdfium(time.monotonic() + CLOSE_WAIT, what):
                if bitmap is not None:
                    pdfium_c.FPDF_RenderPage_Close(page)
                    bitmap.close()
                page.close()

    def close(self) -> None:
        try:
            with _pdfium(time.monotonic() + CLOSE_WAIT, "closing the PDF"):
                self._pdf.close()
        except EngineTimeout:  # only if a PDFium call hangs: keep the document, not the worker
            log.warning("PDFium stayed busy; a PDF document was left open")


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
def _av_errors() -> Iterator[None]:
    import av

    try:
        yield
    except (av.FFmpegError, ValueError, IndexError, OSError) as exc:
        raise UnsupportedMedia(f"the audio could not be decoded: {exc}") from exc


def decode_audio(path: Path, *, max_seconds: float, keep_channels: bool = False) -> Audio:
    """Decode the first audio track to 16 kHz float32, mono or one row per channel.

    Samples go straight into one growing buffer (no list of chunks to concatenate), so a long
    recording is never held twice; the duration limit is checked from the container first and
    enforced while decoding for files that do not declare it.
    """
    import av

    with _av_errors(), av.open(str(path), metadata_errors="ignore") as container:
        if not container.streams.audio:
            raise UnsupportedMedia("the file has no audio track")
        stream = container.streams.audio[0]
        declared = _declared_seconds(container, stream)
        if declared is not None and declared > max_seconds + 1:
            raise AudioTooLong(
                f"the audio lasts {declared:.0f} s; the limit is {max_seconds:.0f} s"
            )
        if stream.codec_context is None:  # FFmpeg knows no decoder for this codec tag
            raise UnsupportedMedia("the audio track uses a codec that cannot be decoded")
        channels = stream.codec_context.channels or 1
        rows = 2 if keep_channels and channels >= 2 else 1
        resampler = av.AudioResampler(
            format="fltp", layout="stereo" if rows == 2 else "mono", rate=SAMPLE_RATE
        )
        # The buffer never outgrows the longest accepted audio: a file that declares its length
        # gets exactly that, one that does not starts at 30 s and doubles up to the limit.
        limit = int((max_seconds + 1) * SAMPLE_RATE)
        first = min(int(((declared or 30) + 1) * SAMPLE_RATE), limit)
        buffer = np.empty((rows, first), dtype=np.float32)
        filled = 0
        for frame in _frames(container, stream):
            for out in resampler.resample(frame):
                filled, buffer = _append(buffer, filled, out.to_ndarray(), limit, max_seconds)
        for out in resampler.resample(None):
            filled, buffer = _append(buffer, filled, out.to_ndarray(), limit, max_seconds)
    if filled == 0:
        raise UnsupportedMedia("the audio track holds no samples")
    return Audio(buffer[:, :filled], channels)


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

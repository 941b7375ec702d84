"""What an uploaded file is, decided from its bytes, and decoding it into pages or samples.

The file name and the part's Content-Type are never trusted: the magic numbers pick the kind,
and the decoder (Pillow, PDFium, FFmpeg through PyAV) has the last word. Every decoder error is
translated here into ``UnsupportedMedia`` (415) or a ``PayloadTooLarge`` (413).
"""

from __future__ import annotations

import logging
import struct
import threading
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image, ImageOps, UnidentifiedImageError

from .errors import AudioTooLong, PayloadTooLarge, TooManyPages, UnsupportedMedia

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
    with warnings.catch_warnings():
        # Past MAX_IMAGE_PIXELS Pillow only warns; a server treats that as a bomb too.
        warnings.simplefilter("error", Image.DecompressionBombWarning)
        try:
            yield
        except (Image.DecompressionBombError, Image.DecompressionBombWarning) as exc:
            raise PayloadTooLarge(f"{what} has too many pixels to decode safely: {exc}") from exc
        except (
            UnidentifiedImageError, OSError, ValueError, SyntaxError, EOFError,
            # Pillow's parsers also surface corrupt headers as these (fuzzing found a TIFF frame
            # without dimensions raising TypeError); inside this block they mean a bad file.
            TypeError, KeyError, IndexError, ZeroDivisionError, struct.error,
        ) as exc:  # fmt: skip
            raise UnsupportedMedia(f"{what} could not be decoded: {exc}") from exc


def image_pages(path: Path, workdir: Path, max_pages: int) -> list[PageImage]:
    """Split an image into pages (every TIFF frame is one), re-encoding only what Tesseract
    cannot read as it is (GIF, WebP, rotated JPEGs, unusual modes)."""
    with _pillow_errors("the image"), Image.open(path) as image:
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


# PDFium is not thread-safe: every call into it goes through this lock.
_PDFIUM_LOCK = threading.Lock()


class PdfPages:
    """A PDF opened for rendering page by page; ``render(i)`` may be called from any thread."""

    def __init__(self, path: Path, workdir: Path, dpi: int, max_pages: int) -> None:
        import pypdfium2 as pdfium

        self._workdir, self._scale = workdir, dpi / 72  # PDF user space is 72 units per inch
        with _PDFIUM_LOCK:
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

    def render(self, index: int) -> PageImage:
        import pypdfium2 as pdfium

        with _PDFIUM_LOCK:
            try:
                page = self._pdf[index]
                width, height = page.get_size()
                pixels = width * self._scale * height * self._scale
                if Image.MAX_IMAGE_PIXELS and pixels > Image.MAX_IMAGE_PIXELS:
                    raise PayloadTooLarge(
                        f"PDF page {index + 1} would render to {pixels:.0f} pixels"
                    )
                bitmap = page.render(scale=self._scale, grayscale=True)
                image = bitmap.to_pil()
            except pdfium.PdfiumError as exc:
                raise UnsupportedMedia(
                    f"PDF page {index + 1} could not be rendered: {exc}"
                ) from exc
        return _save_for_tesseract(image, self._workdir / f"page-{index}.pnm", index)

    def close(self) -> None:
        with _PDFIUM_LOCK:
            self._pdf.close()


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

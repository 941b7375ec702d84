"""Image uploads into pages for Tesseract, with every Pillow error translated into a client error."""

from __future__ import annotations

import logging
import math
import struct
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from PIL import Image, ImageOps, UnidentifiedImageError

from extractor.errors import (
    PayloadTooLarge,
    TooManyPages,
    UnsupportedMedia,
)

log = logging.getLogger(__name__)

# Formats Tesseract (Leptonica) reads straight from the uploaded file, skipping a re-encode.
TESSERACT_NATIVE = {"PNG", "JPEG", "BMP", "TIFF"}
TESSERACT_NATIVE_MODES = {"1", "L", "P", "RGB", "RGBA", "LA"}

# -- images and PDFs ----------------------------------------------------------------------


@dataclass(frozen=True)
class PageImage:
    """One page ready for Tesseract: a file it can read, and the page's size in pixels."""

    index: int
    path: Path
    width: int
    height: int
    derived: bool = False  # a file made for Tesseract (not the upload): delete once read
    # The page's size in the upload's pixels where it is known: when ``path`` holds it scaled
    # down (past EXTRACTOR_OCR_MAX_PIXELS), the boxes Tesseract finds are scaled back to it.
    upload_size: tuple[int, int] | None = None
    # Pixels per inch where known (a PDF page's rendering): Tesseract is told it, since a
    # Netpbm file cannot say, and on its own estimate (320 for a 300 dpi table) it read a
    # ruled table column by column instead of row by row.
    dpi: int | None = None

    @property
    def shown_size(self) -> tuple[int, int]:
        """The page's size in the upload's pixels (what its boxes are given in)."""
        return self.upload_size or (self.width, self.height)


@contextmanager
def pillow_errors(what: str) -> Iterator[None]:
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


def check_pixels(width: float, height: float, what: str, weight: int = 1) -> None:
    """Refuse (413) a page past ``Image.MAX_IMAGE_PIXELS`` (``EXTRACTOR_MAX_PAGE_PIXELS``)
    before it is decoded or rendered, each pixel counting ``weight`` times (see ``weight``).

    Pillow itself only warns between that limit and twice it, and turning its warning into an
    error takes ``warnings.catch_warnings``, which swaps process-wide state and is not safe
    while other pages decode in other threads; an explicit count needs no shared state, and
    also covers every TIFF frame (Pillow checks only the first) and rendered PDF pages.
    """
    limit = Image.MAX_IMAGE_PIXELS
    if limit and width * height * weight > limit:
        counted = f", which count {weight} times (decoded whole in {weight} bytes each)"
        raise PayloadTooLarge(
            f"{what} has {width * height:.0f} pixels{counted if weight > 1 else ''}; the limit"
            f" is {limit} (too many to decode safely: EXTRACTOR_MAX_PAGE_PIXELS)"
        )


def weight(image: Image.Image) -> int:
    """How many times each pixel of ``image`` counts against the pixel limit: the bytes a
    pixel takes decoded. A JPEG is decoded in grey, and scaled down by libjpeg when larger
    than Tesseract is given (``_scaled``); other formats are decoded whole in their own mode
    (Pillow: 1 byte a pixel grey, bilevel or palette, 4 colour), then made grey."""
    if image.format == "JPEG" or image.mode == "L":
        return 1
    return 2 if image.mode in ("1", "P") else 4


def image_pages(
    path: Path, workdir: Path, max_pages: int, ocr_pixels: int = 0, *, memory_mb: int = 1024,
    deadline: float | None = None,
) -> list[PageImage]:  # fmt: skip
    """Split an image into pages (every TIFF frame is one), re-encoding only what Tesseract
    cannot read as it is (GIF, WebP, rotated JPEGs, unusual modes). A page with more than
    ``ocr_pixels`` (0: never) is scaled down to that many in a process of its own
    (``media.shrink``, its address space capped at ``memory_mb``, killed at ``deadline``), so
    its pixels decoded whole never stand in the worker."""
    with pillow_errors("the image"), Image.open(path) as image:
        check_pixels(image.width, image.height, "the image", weight(image))
        frames = getattr(image, "n_frames", 1) if image.format == "TIFF" else 1
        if frames > max_pages:
            raise TooManyPages(f"the image has {frames} pages; the limit is {max_pages}")
        orientation = _orientation(image)
        if (
            frames == 1
            and image.format in TESSERACT_NATIVE
            and image.mode in TESSERACT_NATIVE_MODES
            and orientation == 1
            and not _over(image.size, ocr_pixels)
        ):
            image.load()  # decode fully once: a truncated file is a 415 here, not in Tesseract
            return [PageImage(0, path, image.width, image.height)]
        pages, large = [], []
        for index in range(frames):
            image.seek(index)
            check_pixels(image.width, image.height, f"page {index + 1} of the image", weight(image))
            if _over(image.size, ocr_pixels):
                large.append(index)
                continue
            frame = ImageOps.exif_transpose(image) if orientation != 1 else image
            target = workdir / f"page-{index}.pnm"
            pages.append(_save_for_tesseract(frame, target, index, dpi=_dpi(image)))
    if large:
        from extractor.media.shrink import shrunk

        pages += shrunk(path, workdir, large, ocr_pixels, memory_mb, deadline)
    return sorted(pages, key=lambda page: page.index)


def scale_frame(path: Path, workdir: Path, index: int, ocr_pixels: int) -> PageImage:
    """Page ``index`` of the image at ``path`` in grey, scaled to ``ocr_pixels`` (``_scaled``)
    into ``workdir``: what ``media.shrink`` runs, in its own process."""
    with pillow_errors(f"page {index + 1} of the image"), Image.open(path) as image:
        image.seek(index)
        orientation = _orientation(image)
        upload = image.size[::-1] if orientation in (5, 6, 7, 8) else image.size
        image.draft("L", _fit(image.size, ocr_pixels))  # a JPEG: decoded at 1/2-1/8, in grey
        frame = ImageOps.exif_transpose(image) if orientation != 1 else image
        frame = _scaled(frame, _fit(upload, ocr_pixels))
        return _save_for_tesseract(frame, workdir / f"page-{index}.pnm", index, upload)


def _orientation(image: Image.Image) -> int:
    """A JPEG's EXIF orientation (1: as stored); other formats are read as stored."""
    return image.getexif().get(0x0112, 1) if image.format == "JPEG" else 1


def _over(size: tuple[int, int], pixels: int) -> bool:
    return bool(pixels) and size[0] * size[1] > pixels


def _fit(size: tuple[int, int], pixels: int) -> tuple[int, int]:
    """``size`` scaled down, its sides in proportion, to at most ``pixels`` pixels."""
    factor = math.sqrt(pixels / (size[0] * size[1]))
    return max(1, int(size[0] * factor)), max(1, int(size[1] * factor))


def _scaled(image: Image.Image, size: tuple[int, int]) -> Image.Image:
    """``image`` in grey resized to ``size`` (Lanczos, after an integer box reduction): grey
    first, which also holds fewer bytes while resizing, and Tesseract reads a grey page in
    less than half the memory of a colour one.

    Tesseract holds ~4 bytes per pixel of a grey page while it reads it and ~9 of a colour
    one (the page, its grey copy, thresholds: a 70-megapixel colour PNG took a worker from
    142 to 798 MB, bench/memory.md), so the pixels it is given bound a worker's peak whatever
    the upload's size (``EXTRACTOR_OCR_MAX_PIXELS``; PDF pages: ``media.pdfrender``)."""
    return grey(image).resize(size, Image.Resampling.LANCZOS, reducing_gap=2.0)


def grey(image: Image.Image) -> Image.Image:
    """``image`` in grey, transparency flattened onto white first."""
    if image.mode == "L":
        return image
    if "A" in image.mode or image.mode in ("P", "PA"):
        rgba = image.convert("RGBA")
        flat = Image.new("RGBA", rgba.size, (255, 255, 255, 255))
        flat.alpha_composite(rgba)
        return flat.convert("L")
    return image.convert("L")


def _dpi(image: Image.Image) -> int | None:
    """The resolution an image file declares (PNG, JPEG, TIFF), which its Netpbm copy for
    Tesseract cannot carry; None when absent or implausible (72 or less: a screen default)."""
    declared = image.info.get("dpi")
    try:
        dpi = round(float(declared[0])) if declared else 0
    except (TypeError, ValueError, IndexError):
        return None
    return dpi if 72 < dpi <= 2400 else None


def _save_for_tesseract(
    image: Image.Image, target: Path, index: int, upload: tuple[int, int] | None = None,
    dpi: int | None = None,
) -> PageImage:  # fmt: skip
    if image.mode not in ("1", "L", "RGB"):
        image = image.convert("RGBA").convert("RGB") if "A" in image.mode else image.convert("RGB")
    # Netpbm (PGM/PPM): written in ~5 ms where even the fastest PNG takes ~90 ms for a 300 dpi
    # page, and Tesseract reads it as fast; the file is removed as soon as its page is read.
    image.save(target, format="PPM")
    return PageImage(
        index, target, image.width, image.height, derived=True, upload_size=upload, dpi=dpi
    )

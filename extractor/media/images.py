"""Image uploads into pages for Tesseract, with every Pillow error translated into a client error."""

from __future__ import annotations

import logging
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

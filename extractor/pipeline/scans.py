"""An upload's pages as JPEGs for the searchable PDF reply (``replies.pdf``), one at a time.

The Document holds the words, not the pixels: the reply draws each page again from the upload
while it is still in the request's work directory. A PDF's pages are rendered by its own PDFium
process (``media.PdfPages``, grey, at ``EXTRACTOR_PDF_DPI``) as for reading them; an image's
frames are decoded by Pillow as they were for Tesseract, a page past ``EXTRACTOR_OCR_MAX_PIXELS``
scaled in a process of its own (``media.shrink``). Each page is encoded and its pixels dropped
before the next is made, so a long document holds one page image at a time.
"""

from __future__ import annotations

import io
import time
from collections.abc import Generator, Iterator
from contextlib import closing
from pathlib import Path

from PIL import Image, ImageOps

from extractor.config import Settings
from extractor.media.images import pillow_errors
from extractor.media.pdf import PdfPages
from extractor.media.sniff import MediaKind, Sniffed
from extractor.replies.importable import Document
from extractor.replies.pdf import PageScan, write_searchable_pdf

JPEG_QUALITY = 75  # a 150 dpi grey text page: ~100 KB; a 300 dpi one ~250 KB
DEFAULT_DPI = 300.0  # an image that does not say its resolution: a scan's usual one
DPI_RANGE = (50.0, 2400.0)  # a stated resolution outside it is taken as unstated


def page_scans(
    path: Path, sniffed: Sniffed, workdir: Path, settings: Settings, deadline: float | None = None
) -> Generator[PageScan]:
    """The pages of the upload at ``path``, in order, each encoded as a JPEG."""
    if deadline is None:
        deadline = time.monotonic() + settings.request_timeout
    if sniffed.kind is MediaKind.PDF:
        yield from _pdf_scans(path, workdir, settings, deadline)
    else:
        yield from _image_scans(path, workdir, settings, deadline)


def encode_scan(image: Image.Image, dpi: float) -> PageScan:
    """``image`` as a page of the PDF: a JPEG in grey or RGB, its pixels ``dpi`` to the inch."""
    if image.mode not in ("L", "RGB"):
        grey = image.mode in ("1", "L", "LA", "I", "I;16", "F")
        image = image.convert("L" if grey else "RGB")
    buffer = io.BytesIO()
    image.save(buffer, format="JPEG", quality=JPEG_QUALITY, optimize=True)
    components = 1 if image.mode == "L" else 3
    return PageScan(buffer.getvalue(), image.width, image.height, components, dpi)


def open_pdf(path: Path, workdir: Path, settings: Settings, deadline: float) -> PdfPages:
    """A PDF's renderer process as the deployment's settings bound it (dpi, pages, time,
    memory, pixels): for OCR (``extraction``) and for a searchable PDF's page images alike."""
    return PdfPages(
        path, workdir, settings.pdf_dpi, settings.max_pages,
        page_timeout=settings.pdf_page_timeout, deadline=deadline,
        memory_mb=settings.pdf_render_memory_mb, fit_pixels=settings.ocr_max_pixels,
    )  # fmt: skip


def _pdf_scans(
    path: Path, workdir: Path, settings: Settings, deadline: float
) -> Iterator[PageScan]:
    pdf = open_pdf(path, workdir, settings, deadline)
    try:
        for index in range(pdf.count):
            page = pdf.render(index, deadline)
            try:
                with pillow_errors(f"page {index + 1}"), Image.open(page.path) as image:
                    scan = encode_scan(image, settings.pdf_dpi)
            finally:
                page.path.unlink(missing_ok=True)
            yield scan
    finally:
        pdf.close()


def _dpi(image: Image.Image) -> float:
    """The image's own resolution where it states a plausible one, else ``DEFAULT_DPI``."""
    stated = image.info.get("dpi")
    try:
        dpi = float(stated[0]) if stated else 0.0
    except (TypeError, ValueError, IndexError):
        dpi = 0.0
    return dpi if DPI_RANGE[0] <= dpi <= DPI_RANGE[1] else DEFAULT_DPI


def _image_scans(
    path: Path, workdir: Path, settings: Settings, deadline: float
) -> Iterator[PageScan]:
    with pillow_errors("the image"), Image.open(path) as image:
        frames = getattr(image, "n_frames", 1) if image.format == "TIFF" else 1
        for index in range(frames):
            with pillow_errors(f"page {index + 1} of the image"):
                image.seek(index)
                dpi = _dpi(image)
                limit = settings.ocr_max_pixels
                if limit and image.width * image.height > limit:
                    yield _shrunk(path, workdir, index, settings, deadline, dpi)
                    continue
                yield encode_scan(ImageOps.exif_transpose(image), dpi)


def _shrunk(
    path: Path, workdir: Path, index: int, settings: Settings, deadline: float, dpi: float
) -> PageScan:
    """A page past the pixel limit, scaled in its own process as it was for Tesseract: drawn
    to the page's full size all the same (its resolution is the upload's)."""
    from extractor.media.shrink import shrunk

    (page,) = shrunk(path, workdir, [index], settings.ocr_max_pixels,
                     settings.pdf_render_memory_mb, deadline)  # fmt: skip
    try:
        with pillow_errors(f"page {index + 1} of the image"), Image.open(page.path) as image:
            return encode_scan(image, dpi)
    finally:
        page.path.unlink(missing_ok=True)


def write_pdf_reply(
    document: Document, path: Path, sniffed: Sniffed, workdir: Path, settings: Settings,
    out: Path, deadline: float | None = None,
) -> None:  # fmt: skip
    """The searchable PDF of ``document`` into the file ``out``, drawn over the pages of the
    upload at ``path`` (the one ``document`` was read from) by ``deadline`` (monotonic; the
    request timeout from now if None)."""
    scans = page_scans(path, sniffed, workdir, settings, deadline)
    with closing(scans), out.open("wb") as file:
        write_searchable_pdf(document, scans, file)

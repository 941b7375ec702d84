"""Render one PDF's pages into PGM or PPM files, in a short-lived process of its own.

``media.PdfPages`` starts this module once per document (``python -m extractor.media.pdfrender``)
so that PDFium's memory (the decoded scans, the page bitmap) lives and dies in this process,
not in the worker, and a page that hangs or crashes PDFium takes only this process with it.

    python -m extractor.media.pdfrender PDF DPI MAX_PAGES MAX_PIXELS OUTDIR MEMORY_MB FIT_PIXELS

One JSON object per line on stdout. The first answers the opening: ``{"pages": N}`` or an
error. Then each request line ``{"render": i}`` on stdin is answered with
``{"page": i, "path": ..., "width": W, "height": H, "page_width": PW, "page_height": PH}``
once page ``i`` (0-based) is written into OUTDIR (a binary PGM, or PPM for a page in colour),
or with an error: PW x PH
is the page's size at DPI, W x H what was drawn, the same unless the page has more than
FIT_PIXELS pixels (EXTRACTOR_OCR_MAX_PIXELS; 0: no such limit), when it is drawn scaled down
to that many, never allocated whole. Errors are ``{"error": KIND, "message": ...}``, KIND
one of ``unsupported``, ``too_large``, ``too_many_pages``. EOF on stdin ends the process.

Imports stay few on purpose (json, os, sys, resource, pypdfium2; never numpy, Pillow or the
rest of the extractor): the process starts for every PDF, and its start-up time and memory
are paid per document. ``MAX_PIXELS`` 0 means no pixel limit; ``MEMORY_MB`` caps this
process's address space (``RLIMIT_AS``), set here at start rather than by the parent, whose
threads make a ``preexec_fn`` unsafe.
"""

from __future__ import annotations

import json
import math
import os
import sys
from typing import Any, BinaryIO

USAGE = "usage: python -m extractor.media.pdfrender PDF DPI MAX_PAGES MAX_PIXELS OUTDIR MEMORY_MB FIT_PIXELS"
WRITE_BUFFER = 1 << 20  # bytes: rows of a bitmap with padded stride are written through this


class Refused(Exception):
    """A page or document this process will not render: answered as ``{"error": kind}``."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind, self.message = kind, message


def limit_memory(megabytes: int) -> None:
    """Cap this process's address space, so a page that needs more fails here, not the host."""
    import resource

    if megabytes > 0:
        limit = megabytes * 1024 * 1024
        _soft, hard = resource.getrlimit(resource.RLIMIT_AS)
        if hard != resource.RLIM_INFINITY:
            limit = min(limit, hard)
        resource.setrlimit(resource.RLIMIT_AS, (limit, hard))


def die_with_parent() -> None:
    """Have the kernel SIGKILL this process when the thread that started it exits (Linux).

    EOF on stdin already ends a process waiting for requests; this also ends one stuck inside
    PDFium when its worker is killed. ctypes is loaded by pypdfium2 anyway.
    """
    if not sys.platform.startswith("linux"):
        return
    import ctypes
    import signal

    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, int(signal.SIGKILL), 0, 0, 0)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        return


def answer(out: BinaryIO, message: dict[str, Any]) -> None:
    out.write(json.dumps(message).encode() + b"\n")
    out.flush()


def memory_message(index: int, megabytes: int) -> str:
    return (
        f"PDF page {index + 1} needs more memory to render than EXTRACTOR_PDF_RENDER_MEMORY_MB"
        f" allows ({megabytes} MB)"
    )


class Renderer:
    """One open document and the settings every page is rendered with."""

    def __init__(
        self, path: str, dpi: int, max_pages: int, max_pixels: int, outdir: str, memory_mb: int,
        fit_pixels: int = 0,
    ) -> None:  # fmt: skip
        import pypdfium2 as pdfium

        self.scale = dpi / 72  # PDF user space is 72 units per inch
        self.max_pixels, self.outdir, self.memory_mb = max_pixels, outdir, memory_mb
        self.fit_pixels = fit_pixels
        try:
            self.pdf = pdfium.PdfDocument(path)
        except pdfium.PdfiumError as exc:
            raise Refused("unsupported", f"the PDF could not be opened: {exc}") from exc
        self.count = len(self.pdf)
        if self.count == 0:
            raise Refused("unsupported", "the PDF has no pages")
        if self.count > max_pages:
            raise Refused(
                "too_many_pages", f"the PDF has {self.count} pages; the limit is {max_pages}"
            )

    def render(self, index: int) -> dict[str, Any]:
        """Render page ``index`` and write it as ``page-<index>.pnm`` (grey or colour)."""
        import pypdfium2 as pdfium
        import pypdfium2.raw as pdfium_c

        what = f"PDF page {index + 1}"
        if not 0 <= index < self.count:
            raise Refused("unsupported", f"{what} does not exist")
        try:
            page = self.pdf[index]
        except pdfium.PdfiumError as exc:
            raise Refused("unsupported", f"{what} could not be rendered: {exc}") from exc
        bitmap = None
        try:
            width, height = page.get_size()
            exact = width * self.scale, height * self.scale
            try:
                size = math.ceil(exact[0]), math.ceil(exact[1])
            except (OverflowError, ValueError) as exc:  # an infinite or NaN page box
                raise Refused("unsupported", f"{what} has no usable size") from exc
            if min(size) < 1:
                raise Refused("unsupported", f"{what} has no usable size ({width} x {height})")
            drawn = size
            if self.fit_pixels and size[0] * size[1] > self.fit_pixels:
                factor = math.sqrt(self.fit_pixels / (size[0] * size[1]))
                drawn = max(1, int(size[0] * factor)), max(1, int(size[1] * factor))
            # As media.check_pixels: counted before any pixel is allocated. A page drawn scaled
            # (an A0 plan at 300 dpi) has only the pixels it is drawn in.
            if self.max_pixels and drawn[0] * drawn[1] > self.max_pixels:
                raise Refused(
                    "too_large",
                    f"{what} has {drawn[0] * drawn[1]} pixels; the limit is {self.max_pixels}"
                    " (too many to decode safely: EXTRACTOR_MAX_PAGE_PIXELS)",
                )
            # PDFium skips an embedded image it cannot allocate without a word, leaving a blank
            # where the text was: refuse the page when its largest image cannot fit instead.
            if self.memory_mb > 0:
                room = self.memory_mb * 1024 * 1024 - address_space()
                room -= drawn[0] * drawn[1] * RENDER_BYTES_PER_PIXEL
                if largest_image(page.raw, pdfium_c) > room:
                    raise Refused("too_large", memory_message(index, self.memory_mb))
            # In colour, so that Tesseract thresholds each ink on its own channel: drawn in
            # grey, yellow on white is ~226 on 255 and vanished ("Pure Yellow" unread), where
            # the bare CLI reads it on pdftoppm's colour rendering. A page with no colour is
            # written grey (its three channels are one), as small for Tesseract as before.
            bitmap = pdfium_c.FPDFBitmap_CreateEx(*drawn, pdfium_c.FPDFBitmap_BGR, None, 0)
            if not bitmap:  # PDFium could not allocate it: under our address-space cap
                raise Refused("too_large", memory_message(index, self.memory_mb))
            pdfium_c.FPDFBitmap_FillRect(bitmap, 0, 0, *drawn, 0xFFFFFFFF)  # white
            flags = pdfium_c.FPDF_ANNOT
            pdfium_c.FPDF_RenderPageBitmap(bitmap, page.raw, 0, 0, *drawn, 0, flags)
            target = os.path.join(self.outdir, f"page-{index}.pnm")
            write_pnm(target, bitmap, *drawn)
            return {
                "page": index, "path": target, "width": drawn[0], "height": drawn[1],
                "page_width": size[0], "page_height": size[1],
            }  # fmt: skip
        finally:
            if bitmap:
                pdfium_c.FPDFBitmap_Destroy(bitmap)
            page.close()

    def close(self) -> None:
        self.pdf.close()


IMAGE_BYTES_PER_PIXEL = 4  # what PDFium's decoded images take at most (CMYK, BGRA)
# The page drawn in BGR (3 bytes a pixel), its copy, and the RGB and grey ones write_pnm makes.
RENDER_BYTES_PER_PIXEL = 10
FORM_DEPTH = 16  # nesting of form XObjects followed when looking for images


def largest_image(page: Any, pdfium_c: Any) -> int:
    """Bytes the largest image on ``page`` takes once decoded, from its declared pixel size
    (nothing is decoded), form XObjects included."""
    import ctypes

    width, height = ctypes.c_uint(), ctypes.c_uint()
    largest = 0
    pending = [(pdfium_c.FPDFPage_GetObject(page, i), 0)
               for i in range(pdfium_c.FPDFPage_CountObjects(page))]  # fmt: skip
    while pending:
        obj, depth = pending.pop()
        kind = pdfium_c.FPDFPageObj_GetType(obj)
        if kind == pdfium_c.FPDF_PAGEOBJ_IMAGE:
            if pdfium_c.FPDFImageObj_GetImagePixelSize(obj, width, height):
                largest = max(largest, width.value * height.value * IMAGE_BYTES_PER_PIXEL)
        elif kind == pdfium_c.FPDF_PAGEOBJ_FORM and depth < FORM_DEPTH:
            count = pdfium_c.FPDFFormObj_CountObjects(obj)
            pending += [(pdfium_c.FPDFFormObj_GetObject(obj, i), depth + 1) for i in range(count)]
    return largest


def address_space() -> int:
    """Bytes of address space this process uses now (VmSize), 0 where /proc cannot tell."""
    try:
        with open("/proc/self/status", "rb") as status:
            for line in status:
                if line.startswith(b"VmSize:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return 0


def write_pnm(target: str, bitmap: Any, width: int, height: int) -> None:
    """Write a BGR PDFium bitmap as binary PGM when it has no colour (P5, its blue channel:
    all three are the same), else as binary PPM (P6, RGB). Rows are ``stride`` bytes apart
    in PDFium's buffer, of which ``width * 3`` count; the channels are picked by slicing,
    which runs in C (~30 ms for a 300 dpi A4 page)."""
    import ctypes

    import pypdfium2.raw as pdfium_c

    stride = pdfium_c.FPDFBitmap_GetStride(bitmap)
    address = pdfium_c.FPDFBitmap_GetBuffer(bitmap)
    buffer = memoryview((ctypes.c_ubyte * (stride * height)).from_address(address)).cast("B")
    row = width * 3
    if stride == row:
        bgr = bytes(buffer)
    else:
        bgr = b"".join(buffer[y * stride : y * stride + row] for y in range(height))
    blue = bgr[0::3]
    with open(target, "wb", buffering=WRITE_BUFFER) as out:
        if blue == bgr[1::3] == bgr[2::3]:
            out.write(b"P5\n%d %d\n255\n" % (width, height))
            out.write(blue)
            return
        del blue
        rgb = bytearray(len(bgr))
        rgb[0::3], rgb[1::3], rgb[2::3] = bgr[2::3], bgr[1::3], bgr[0::3]
        out.write(b"P6\n%d %d\n255\n" % (width, height))
        out.write(rgb)


def parse(argv: list[str]) -> tuple[str, int, int, int, str, int, int]:
    if len(argv) != 7:
        raise SystemExit(USAGE)
    path, dpi, max_pages, max_pixels, outdir, memory_mb, fit_pixels = argv
    try:
        return (
            path, int(dpi), int(max_pages), int(max_pixels), outdir, int(memory_mb),
            int(fit_pixels),
        )  # fmt: skip
    except ValueError:
        raise SystemExit(USAGE) from None


def serve(
    args: tuple[str, int, int, int, str, int, int], requests: BinaryIO, out: BinaryIO
) -> None:
    """Open the document, then answer render requests until EOF."""
    memory_mb = args[5]
    try:
        renderer = Renderer(*args)
    except Refused as refused:
        answer(out, {"error": refused.kind, "message": refused.message})
        return
    except MemoryError:
        answer(out, {"error": "too_large", "message": "the PDF needs more memory to open than"
                     f" EXTRACTOR_PDF_RENDER_MEMORY_MB allows ({memory_mb} MB)"})  # fmt: skip
        return
    answer(out, {"pages": renderer.count})
    for line in iter(requests.readline, b""):
        index = -1
        try:
            index = int(json.loads(line)["render"])
            answer(out, renderer.render(index))
        except Refused as refused:
            answer(out, {"error": refused.kind, "message": refused.message})
        except MemoryError:
            answer(out, {"error": "too_large", "message": memory_message(index, memory_mb)})
        except (ValueError, KeyError, TypeError) as exc:  # a request this protocol lacks
            answer(out, {"error": "unsupported", "message": f"bad request {line!r}: {exc}"})
        except Exception as exc:  # PDFium's errors on a damaged page, answered as such
            answer(out, {"error": "unsupported", "message": f"PDF page {index + 1} could not"
                         f" be rendered: {type(exc).__name__}: {exc}"})  # fmt: skip
    renderer.close()


def main(argv: list[str] | None = None) -> int:
    args = parse(sys.argv[1:] if argv is None else argv)
    limit_memory(args[5])
    die_with_parent()
    # Answers go to a private copy of stdout; whatever native code prints goes to stderr, so
    # nothing can slip into the protocol.
    out = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)
    try:
        serve(args, sys.stdin.buffer, out)
    except (BrokenPipeError, KeyboardInterrupt):  # the parent went away: nobody to answer
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""An image's pages past ``EXTRACTOR_OCR_MAX_PIXELS``, scaled down in a short-lived process.

A large page is decoded whole before it can be scaled (only a JPEG decodes smaller, by
libjpeg): a 20-million-pixel colour PNG holds 80 MB decoded, its grey copy 20 MB and the
resize's rows ~15 MB more. In the worker those stood on top of its model and heap, and took
it past 300 MB on an Intel host (328 MB for a 20 MP colour TIFF, bench/results.md, session
28). ``image_pages`` hands such pages to this module instead, once per upload, so their
pixels live and die in a process of their own, capped like the PDF renderer's
(``EXTRACTOR_PDF_RENDER_MEMORY_MB``, ``RLIMIT_AS``), and the worker only ever holds the
scaled grey page Tesseract reads:

    python -m extractor.media.shrink IMAGE OUTDIR FIT_PIXELS MAX_PIXELS MEMORY_MB INDEX...

MAX_PIXELS is the worker's ``EXTRACTOR_MAX_PAGE_PIXELS`` (Pillow's bomb guard here; 0: none),
which the worker has already counted every page against.

One JSON object per line on stdout, per page INDEX in order: ``{"page": i, "path": ...,
"width": W, "height": H, "upload": [UW, UH]}`` once page ``i`` is written into OUTDIR in
grey, scaled from UW x UH to W x H (at most FIT_PIXELS), or ``{"error": KIND, "message":
...}`` (KIND: ``unsupported`` or ``too_large``) and no more lines.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import site
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, NoReturn

from PIL import Image

from extractor.errors import (
    EngineTimeout,
    EngineUnavailable,
    ExtractorError,
    PayloadTooLarge,
    TooManyPages,
    UnsupportedMedia,
)
from extractor.media import pdfrender
from extractor.media.images import PageImage, scale_frame

log = logging.getLogger(__name__)

USAGE = (
    "usage: python -m extractor.media.shrink IMAGE OUTDIR FIT_PIXELS MAX_PIXELS MEMORY_MB INDEX..."
)
# The error kinds a child process (this module, the PDF renderer) answers with.
CHILD_ERRORS: dict[str, type[ExtractorError]] = {
    "unsupported": UnsupportedMedia,
    "too_large": PayloadTooLarge,
    "too_many_pages": TooManyPages,
}


def shrunk(
    path: Path, workdir: Path, indices: list[int], fit_pixels: int, memory_mb: int,
    deadline: float | None,
) -> list[PageImage]:  # fmt: skip
    """Pages ``indices`` of the image at ``path``, scaled to ``fit_pixels`` by this module
    run as a process of its own; at ``deadline`` it is killed (a 504)."""
    command = [sys.executable, "-m", __name__, str(path), str(workdir), str(fit_pixels)]
    command += [str(Image.MAX_IMAGE_PIXELS or 0), str(memory_mb), *map(str, indices)]
    timeout = None if deadline is None else max(deadline - time.monotonic(), 0.1)
    try:
        done = subprocess.run(
            command, capture_output=True, timeout=timeout, env=child_environ(), check=False
        )
    except subprocess.TimeoutExpired as exc:  # run() has killed and reaped it
        raise EngineTimeout("scaling the image's large pages ran past the deadline") from exc
    except OSError as exc:
        raise EngineUnavailable(f"the process scaling large pages could not start: {exc}") from exc
    pages = []
    for line in done.stdout.splitlines():
        reply: dict[str, Any] = json.loads(line)
        if "error" in reply:
            raise CHILD_ERRORS[reply["error"]](reply["message"])
        upload = int(reply["upload"][0]), int(reply["upload"][1])
        size = int(reply["width"]), int(reply["height"])
        pages.append(PageImage(int(reply["page"]), Path(reply["path"]), *size, True, upload))
    if len(pages) != len(indices):
        _died(done, memory_mb)
    return pages


def child_environ() -> dict[str, str]:
    """This environment, with the directory holding this ``extractor`` package first on
    PYTHONPATH, so a child process (this module's, the PDF renderer) runs the same code (a
    source tree, not an installed copy)."""
    env = dict(os.environ)
    root = str(Path(__file__).resolve().parent.parent.parent)
    installed = {str(Path(p).resolve()) for p in site.getsitepackages()}
    if root not in installed:  # a site-packages dir first on the path would shadow the stdlib
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [root, env.get("PYTHONPATH")]))
    return env


def _died(done: subprocess.CompletedProcess[bytes], memory_mb: int) -> NoReturn:
    """What a scaling process that ended without answering for every page means (as
    ``PdfPages._death`` reads the PDF renderer's): ``signalled``, or out of memory a 413."""
    status, tail = done.returncode, done.stderr[-2000:].decode(errors="replace")
    log.warning("the process scaling large pages died", extra={"status": status, "stderr": tail})
    if status < 0:
        who = "the process scaling large pages"
        kind, message = signalled(status, who, _memory(memory_mb), "the image could not be scaled")
        raise kind(message)
    if "MemoryError" in tail:
        raise PayloadTooLarge(_memory(memory_mb))
    # Its stderr (a traceback naming the server's paths) goes to the log, not to the client.
    raise EngineUnavailable(f"the process scaling large pages failed (exit status {status})")


def signalled(status: int, who: str, memory: str, crashed: str) -> tuple[type[ExtractorError], str]:
    """What a child process (``who``: this module's, the PDF renderer) killed by signal
    ``-status`` means for the request, given what to say if it ran out of ``memory`` or
    ``crashed``.

    Our own SIGKILL at a timeout never gets here (that is a 504). SIGKILL from elsewhere is
    the OOM killer (kernel or cgroup), the only other party that kills a busy child on its
    own: the file needed too much memory, a 413. A crash (SIGSEGV, SIGABRT, ...): the decoder
    failed on this file, a 415. Any other signal (SIGTERM, SIGINT) stopped it from outside,
    nothing to do with the file: a 503, to retry.
    """
    number = -status
    name = signal.Signals(number).name if number in _SIGNALS else f"signal {number}"
    if number == signal.SIGKILL:
        return PayloadTooLarge, f"{memory}: {who} was killed (SIGKILL)"
    if number in _CRASHES:
        return UnsupportedMedia, f"{crashed}: it crashed ({name})"
    return EngineUnavailable, f"{who} was stopped by {name}; retry"


_SIGNALS = {s.value for s in signal.Signals}
_CRASHES = {signal.SIGSEGV, signal.SIGBUS, signal.SIGABRT, signal.SIGILL, signal.SIGFPE,
            signal.SIGTRAP}  # fmt: skip


def _memory(megabytes: int) -> str:
    return (
        "the image needs more memory to scale than EXTRACTOR_PDF_RENDER_MEMORY_MB allows"
        f" ({megabytes} MB)"
    )


def main(argv: list[str]) -> int:
    if len(argv) < 6:
        print(USAGE, file=sys.stderr)
        return 2
    path, outdir, fit, max_pixels, memory, *indices = argv
    Image.MAX_IMAGE_PIXELS = int(max_pixels) or None
    pdfrender.limit_memory(int(memory))
    pdfrender.die_with_parent()
    out = sys.stdout.buffer
    try:
        for index in map(int, indices):
            page = scale_frame(Path(path), Path(outdir), index, int(fit))
            pdfrender.answer(
                out,
                {"page": page.index, "path": str(page.path), "width": page.width,
                 "height": page.height, "upload": list(page.shown_size)},
            )  # fmt: skip
    except MemoryError:
        pdfrender.answer(out, {"error": "too_large", "message": _memory(int(memory))})
    except (UnsupportedMedia, PayloadTooLarge) as exc:
        kind = next(kind for kind, error in CHILD_ERRORS.items() if isinstance(exc, error))
        pdfrender.answer(out, {"error": kind, "message": str(exc)})
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

"""Peak memory of storing a long job's Document, and of reading it back for its result.

One dense 300 dpi A4 page (``bench.flat``'s) is read by Tesseract once; its lines, repeated with
each page's index, make a spooled Document of ``--pages`` pages, as a job's extraction leaves it
in its workspace. Each step then runs in a fresh process (its VmHWM reset first), printed above
that process's RSS before it:

- ``whole``: what a job stored before: every line in memory (``tuple(lines)``), the whole JSON
  tree, its text, deflated at once;
- ``streamed``: ``documents.packed_document``, a line at a time from the spool;
- ``result``: what ``GET /v1/jobs/{id}/result`` did before: the stored JSON read back whole and
  rendered as Importable JSON in memory;
- ``spooled``: what it does now: ``documents.read_document`` into a spool, the reply written
  into a file from it (``pipeline.reply.document_reply``)::

    python -m bench.stored_documents --pages 100
"""

from __future__ import annotations

import argparse
import json
import pickle
import subprocess
import sys
import tempfile
import time
import zlib
from dataclasses import replace
from pathlib import Path

STEPS = ("whole", "streamed", "result", "spooled")


def status_mb(field: str) -> float:
    for row in Path("/proc/self/status").read_text().splitlines():
        if row.startswith(field + ":"):
            return int(row.split()[1]) / 1024
    raise LookupError(field)


def make_spool(folder: Path, pages: int) -> Path:
    """The spooled lines of ``pages`` dense pages and the document's pickled shell."""
    from extractor.media.images import image_pages
    from extractor.ocr.tesseract import OcrOptions, TesseractEngine
    from extractor.replies.importable import Document, DocumentKind, Page
    from extractor.replies.spool import PageSpool

    from .flat import dense_page

    path = folder / "page.png"
    dense_page(0).image.save(path)
    (image,) = image_pages(path, folder, max_pages=1)
    lines = TesseractEngine(OcrOptions()).recognise(image, time.monotonic() + 600)
    spool = PageSpool(folder / "lines.spool")
    for index in range(pages):
        spool.add([replace(line, page_index=index) for line in lines])
    shell = Document(
        name="dense.pdf", kind=DocumentKind.OCR, lines=spool.close(),
        pages=tuple(Page(i, image.width, image.height, 0, 0.0) for i in range(pages)),
    )  # fmt: skip
    (folder / "document.pickle").write_bytes(pickle.dumps(shell))
    print(f"{pages} pages of {len(lines)} lines, {sum(len(li.words) for li in lines)} words each")
    return folder


def run_step(step: str, folder: Path) -> None:
    """One step in this process: its peak above the RSS it started from."""
    from extractor.async_jobs.documents import (
        _dump_line,
        load_document,
        packed_document,
        read_document,
    )  # fmt: skip
    from extractor.async_jobs.store import unpack
    from extractor.pipeline.negotiate import choose_format
    from extractor.pipeline.reply import document_reply, render

    document = pickle.loads((folder / "document.pickle").read_bytes())  # our own file
    stored = folder / "stored.deflate"
    before = status_mb("VmRSS")
    Path("/proc/self/clear_refs").write_text("5")
    if step == "whole":
        whole = replace(document, lines=tuple(document.lines))
        tree = {
            "name": whole.name, "kind": whole.kind.value,
            "lines": [_dump_line(line) for line in whole.lines],
            "pages": [[p.index, p.width, p.height, p.rotation, p.skew] for p in whole.pages],
            "language": None, "duration_ms": None, "extra": {},
        }  # fmt: skip
        text = json.dumps(tree, ensure_ascii=False, separators=(",", ":")).encode()
        out = len(zlib.compress(text, 6))
    elif step == "streamed":
        packed = packed_document(document)
        stored.write_bytes(packed)
        out = len(packed)
    elif step == "spooled":
        from extractor.config import Settings

        back = read_document(stored.read_bytes(), folder / "read.spool")
        reply = document_reply(back, choose_format(None, "json", "json", audio=False), folder,
                               Settings(validate_replies=False))  # fmt: skip
        out = reply.size
    else:
        back = load_document(unpack(stored.read_bytes()))
        reply_format = choose_format(None, "json", "json", audio=False)
        body = render(back, reply_format, validate=False, json_indent=None)
        out = len(body.encode())
    peak = status_mb("VmHWM")
    print(f"  {step:9s} peak {peak:6.1f} MB, +{peak - before:5.1f} MB above its start"
          f" ({out / 1e6:.1f} MB out)")  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.stored_documents", description=__doc__)
    parser.add_argument("--pages", type=int, default=100)
    parser.add_argument("--step", choices=STEPS, help=argparse.SUPPRESS)  # one fresh process's
    parser.add_argument("--folder", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.step:
        run_step(args.step, args.folder)
        return 0
    with tempfile.TemporaryDirectory(prefix="extractor-bench-") as tmp:
        folder = make_spool(Path(tmp), args.pages)
        for step in STEPS:
            command = [sys.executable, "-m", "bench.stored_documents", "--step", step]
            subprocess.run([*command, "--folder", str(folder)], check=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

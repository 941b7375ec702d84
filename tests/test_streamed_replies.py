"""A long document's reply is streamed, and byte for byte the reply it always was.

A document of more than one page has its lines spooled to the request's work directory as its
pages are read (``replies.spool``); its JSON and text replies are rendered a piece at a time into
a file there (``replies.streamed``) and sent from it (issue 19: 100 pages within 300 MB). These
tests compare the pieces with the whole renderings on made-up documents, then the replies of real
multi-page uploads (real Tesseract) through the Flask app and through a real gunicorn, and check
that a client leaving mid-reply leaves no work directory behind.
"""

from __future__ import annotations

import io
import json
import re
import socket
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
from flask import Flask
from support import post_file, start_server, stop_server

from extractor import samples
from extractor.config import Settings
from extractor.media.sniff import sniff
from extractor.pipeline.extraction import Extractor
from extractor.pipeline.reply import render
from extractor.replies.formats import FORMATS
from extractor.replies.importable import (
    BoundingBox,
    Document,
    DocumentKind,
    Line,
    Page,
    Word,
    to_text,
)
from extractor.replies.schemas import importable_validator
from extractor.replies.spool import PageSpool, SpooledLines
from extractor.replies.streamed import PIECE_LINES, WRITERS, write_importable, write_text


def ocr_lines(page: int, count: int) -> list[Line]:
    """``count`` lines of boxed words on ``page``, some not ASCII (escaped in the JSON)."""
    lines = []
    for n in range(count):
        words = tuple(
            Word(text, BoundingBox(10 * k, 20 * n, 10 * k + 8, 20 * n + 15), confidence=91.5)
            for k, text in enumerate(("Straße", f"p{page}", f"l{n}", "naïve€"))
        )
        lines.append(Line(words, page_index=page, block=1 + n // 7, paragraph=1))
    return lines


def spooled(tmp_path: Path, pages: list[list[Line]]) -> SpooledLines:
    spool = PageSpool(tmp_path / f"lines-{len(list(tmp_path.iterdir()))}.spool")
    for lines in pages:
        spool.add(lines)
    return spool.close()


def streamed(document: Document, tmp_path: Path, writer: Any, checked: list[Any]) -> str:
    out = io.StringIO(newline="")
    writer(document, out, tmp_path / "labels.spool", checked.append)
    assert not (tmp_path / "labels.spool").exists()
    return out.getvalue()


@pytest.mark.slow  # seconds of Tesseract: make test runs it, make test-fast does not
def test_the_pieces_join_into_the_whole_renderings(tmp_path: Path, validator: Any) -> None:
    by_page = [ocr_lines(0, PIECE_LINES + 3), [], ocr_lines(2, 5)]
    pages = (Page(0, 400, 300, 90, 0.4), Page(1, 400, 300), Page(2, 400, 300, 0, -1.2))
    lines = spooled(tmp_path, by_page)
    assert len(lines) == PIECE_LINES + 8 and list(lines) == [x for p in by_page for x in p]
    assert lines[PIECE_LINES + 7] == by_page[2][4] and lines == tuple(lines)
    talk = tuple(
        Line(
            (Word("hé", start_ms=n, end_ms=n + 5), Word("you", start_ms=n + 5, end_ms=n + 9)),
            start_ms=n,
            end_ms=n + 9,
            speaker=f"Speaker {n % 2 + 1}",
            word_timings=bool(n % 3),
        )
        for n in range(2 * PIECE_LINES + 1)
    )
    documents = [
        Document("scan ü.pdf", DocumentKind.OCR, lines, pages),
        Document("blank.tiff", DocumentKind.OCR, spooled(tmp_path, [[], []]), pages[:2]),
        Document("talk.wav", DocumentKind.AUDIO, talk, language="en", duration_ms=9000),
    ]
    for document in documents:
        checked: list[Any] = []
        whole = render(document, FORMATS["json"], validate=True, json_indent=None)
        assert streamed(document, tmp_path, write_importable, checked) == whole
        assert checked, "every piece is checked against the schema"
        for piece in checked:
            assert not list(validator.iter_errors(piece))
        assert streamed(document, tmp_path, write_text, []) == to_text(document)
        if document.kind is DocumentKind.OCR:  # the page layouts, from the spool page by page
            pages_again = tuple(document.lines)
            in_memory = Document(document.name, document.kind, pages_again, document.pages)
            for name in ("hocr", "alto", "tsv"):
                whole = FORMATS[name].render(in_memory)
                assert streamed(document, tmp_path, WRITERS[name], []) == whole, name


def multipage(pages: int) -> bytes:
    return samples.multipage_tiff(
        [samples.text_page(samples.a4_page_lines(12 + n, 8), page=n) for n in range(pages)]
    )


def in_memory_reply(data: bytes, tmp_path: Path, format_name: str) -> bytes:
    """The reply as it was rendered before streaming: the whole document in memory."""
    path = tmp_path / "scan.tiff"
    path.write_bytes(data)
    workdir = tmp_path / "work"
    workdir.mkdir()
    extractor = Extractor(Settings())
    try:
        document = extractor.extract(path, "scan.tiff", sniff(data[:2048]), workdir)
    finally:
        extractor.close()
    assert isinstance(document.lines, SpooledLines)
    whole = Document(document.name, document.kind, tuple(document.lines), document.pages)
    return render(whole, FORMATS[format_name], validate=True, json_indent=None).encode()


@pytest.fixture(scope="module")
def three_pages() -> bytes:
    return multipage(3)


@pytest.mark.slow  # seconds of Tesseract: make test runs it, make test-fast does not
@pytest.mark.parametrize("format_name", ["json", "text", "hocr"])
def test_a_multipage_reply_is_streamed_and_unchanged(
    make_app: Callable[..., Flask], three_pages: bytes, tmp_path: Path, format_name: str
) -> None:
    client = make_app().test_client()
    reply = post_file(client, three_pages, "scan.tiff", query=f"?format={format_name}")
    assert reply.status_code == 200 and reply.is_streamed
    body = reply.get_data()
    reply.close()  # as a server does: the workspace goes (make_app checks it is gone)
    assert int(reply.headers["Content-Length"]) == len(body)
    assert body == in_memory_reply(three_pages, tmp_path, format_name)
    if format_name == "json":
        assert [p["pageIndex"] for p in json.loads(body)["pages"]] == [0, 1, 2]


def leftover_workdirs(scratch: Path) -> list[Path]:
    """Request directories under the server processes' directories in ``scratch``."""
    processes = [p for p in scratch.iterdir() if re.fullmatch(r"extractor-\d+-\d+", p.name)]
    found = []
    for process in processes:
        try:
            found += list(process.iterdir())
        except FileNotFoundError:  # its last request ended meanwhile and took the empty folder
            continue
    return found


@pytest.mark.slow  # a server or CLI process: make test runs it, make test-fast does not
def test_over_gunicorn_the_stream_is_whole_and_a_client_leaving_leaks_nothing(
    tmp_path: Path, three_pages: bytes
) -> None:
    scratch = tmp_path / "requests"
    scratch.mkdir()
    url, server = start_server("--workers", "1", env={"EXTRACTOR_TMP_DIR": str(scratch)})
    try:
        files = {"upload": ("scan.tiff", three_pages, "image/tiff")}
        reply = httpx.post(url + "/extract", files=files, timeout=300)
        assert reply.status_code == 200 and "chunked" not in reply.headers.get(
            "Transfer-Encoding", ""
        )
        assert reply.content == in_memory_reply(three_pages, tmp_path, "json")
        assert leftover_workdirs(scratch) == []

        # A client that reads the head of its reply and goes away (a reset, mid-body).
        request = httpx.Request("POST", url + "/extract", files=files)
        head = b"".join(f"{k}: {v}\r\n".encode() for k, v in request.headers.items() if k != "host")
        leaving = socket.socket()
        leaving.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        leaving.connect(server_address(url))
        leaving.sendall(b"POST /extract HTTP/1.1\r\nHost: s\r\n" + head + b"\r\n")
        leaving.sendall(request.read())
        leaving.settimeout(300)
        assert leaving.recv(12).startswith(b"HTTP/1.1 200")
        leaving.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
        leaving.close()
        deadline = time.monotonic() + 30
        while leftover_workdirs(scratch) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert leftover_workdirs(scratch) == []
        assert httpx.get(url + "/healthz", timeout=10).status_code == 200
    finally:
        stop_server(server)


def server_address(url: str) -> tuple[str, int]:
    host, port = url.removeprefix("http://").split(":")
    return host, int(port)


def dense_page(page: int) -> list[Line]:
    """A dense 300 dpi page's worth of results: 64 lines of 12 boxed words (~770 words)."""
    return [
        Line(
            tuple(
                Word(
                    f"w{page}x{n}y{k}",
                    BoundingBox(150 + 40 * k, 150 + 40 * n, 185 + 40 * k, 180 + 40 * n),
                    confidence=90.0 + k / 7,
                )
                for k in range(12)
            ),
            page_index=page,
            block=1,
            paragraph=1 + n // 8,
        )
        for n in range(64)
    ]


def reply_peak(tmp_path: Path, pages: int) -> tuple[float, int]:
    """Python's peak allocation (MB) while a ``pages``-page document's lines are spooled a page
    at a time and its JSON reply is written from them, and the reply's size."""
    import tracemalloc

    folder = tmp_path / f"{pages}"
    folder.mkdir()
    validate = importable_validator().validate
    tracemalloc.start()
    try:
        spool = PageSpool(folder / "lines.spool")
        for page in range(pages):
            spool.add(dense_page(page))
        size = (2480, 3508)
        document = Document(
            "dense.pdf", DocumentKind.OCR, spool.close(),
            tuple(Page(n, *size) for n in range(pages)),
        )  # fmt: skip
        with (folder / "reply").open("w", encoding="utf-8", newline="") as out:
            write_importable(document, out, folder / "labels.spool", validate)
        _now, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    return peak / 2**20, (folder / "reply").stat().st_size


@pytest.mark.slow  # seconds of Tesseract: make test runs it, make test-fast does not
def test_the_reply_of_a_long_document_takes_memory_flat_in_its_pages(tmp_path: Path) -> None:
    """6 and 18 dense pages: the same peak within 1.5 MB (a piece of ``PIECE_LINES`` lines is
    at most ~1 MB), while the reply grows threefold; the whole rendering held ~1 MB more per
    such page (``python -m bench.flat``: a 100-page PDF took a worker to 386 MB that way)."""
    few, few_bytes = reply_peak(tmp_path, 6)
    many, many_bytes = reply_peak(tmp_path, 18)
    assert many_bytes > 2.5 * few_bytes
    assert many - few < 1.5, f"{few:.1f} MB at 6 pages, {many:.1f} MB at 18"
    assert many < 8, f"{many:.1f} MB"

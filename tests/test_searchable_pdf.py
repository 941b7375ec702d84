"""The searchable PDF reply (``format=pdf``): real Tesseract runs through ``POST /extract``, a
real server, and the command line, read back with poppler's ``pdftotext`` and ``pdfinfo``.

The PDF's text must be the text/plain reply's lines; its pages the upload's, at their size.
"""

from __future__ import annotations

import io
import re
import subprocess
import sys
import time
import tracemalloc
from pathlib import Path
from typing import Any

import httpx
import pytest
from flask.testing import FlaskClient
from PIL import Image
from support import PAGE_ONE, PAGE_TWO, have, post_file, start_server, stop_server

from extractor import samples
from extractor.pipeline.scans import encode_scan
from extractor.replies.importable import BoundingBox, Document, DocumentKind, Line, Page, Word
from extractor.replies.pdf import write_searchable_pdf
from extractor.samples.prose import turned

pytestmark = pytest.mark.skipif(not have("pdftotext"), reason="poppler-utils is not installed")


def normalised(text: str) -> list[str]:
    """The non-blank lines of ``text``, each with its runs of whitespace made one space."""
    return [" ".join(line.split()) for line in text.splitlines() if line.strip()]


def pdf_text(data: bytes, tmp_path: Path, *args: str) -> str:
    path = tmp_path / "reply.pdf"
    path.write_bytes(data)
    return subprocess.run(
        ["pdftotext", *args, str(path), "-"], capture_output=True, text=True, check=True
    ).stdout


def page_sizes(data: bytes, tmp_path: Path) -> list[tuple[float, float]]:
    """Each page's size in points, as ``pdfinfo`` reads it."""
    path = tmp_path / "sizes.pdf"
    path.write_bytes(data)
    info = subprocess.run(
        ["pdfinfo", "-f", "1", "-l", "999", str(path)], capture_output=True, text=True, check=True
    ).stdout
    found = re.findall(r"Page +\d+ size: +([\d.]+) x ([\d.]+) pts", info)
    return [(float(w), float(h)) for w, h in found]


@pytest.fixture(scope="module")
def png() -> bytes:
    page = samples.text_page([*PAGE_ONE, "Order (18) & <tools> 100%"], size=(1240, 600))
    return samples.encode_image(page.image, "PNG")


@pytest.fixture(scope="module")
def three_page_pdf() -> bytes:
    pages = [samples.text_page([PAGE_ONE, PAGE_TWO][i % 2], page=i) for i in range(3)]
    return samples.pdf(pages, dpi=150)


def test_an_image_answers_a_pdf_whose_text_is_the_text_reply(
    client: FlaskClient, png: bytes, tmp_path: Path
) -> None:
    reply = post_file(client, png, "page.png", query="?format=pdf")
    assert (reply.status_code, reply.mimetype) == (200, "application/pdf"), reply.get_data()
    data = reply.get_data()
    assert data.startswith(b"%PDF-1.7\n") and data.endswith(b"%%EOF\n")
    text = post_file(client, png, "page.png", query="?format=text").get_data(as_text=True)
    assert normalised(pdf_text(data, tmp_path)) == normalised(text)
    assert normalised(pdf_text(data, tmp_path, "-layout")) == normalised(text)
    # A PNG that states no resolution is drawn at 300 dpi: 1240 x 600 pixels.
    assert page_sizes(data, tmp_path) == [(297.6, 144.0)]


def test_a_pdf_answers_its_pages_at_their_size_with_their_text(
    client: FlaskClient, three_page_pdf: bytes, tmp_path: Path
) -> None:
    reply = post_file(client, three_page_pdf, "three.pdf", accept="application/pdf")
    assert (reply.status_code, reply.mimetype) == (200, "application/pdf"), reply.get_data()
    data = reply.get_data()
    text = post_file(client, three_page_pdf, "three.pdf", accept="text/plain")
    assert normalised(pdf_text(data, tmp_path)) == normalised(text.get_data(as_text=True))
    # The upload's A4 pages (1240 x 1754 pixels at 150 dpi), each with its own lines.
    # (within a pixel at EXTRACTOR_PDF_DPI: they are rendered to whole pixels and back)
    assert page_sizes(data, tmp_path) == [pytest.approx((595.2, 841.92), abs=0.5)] * 3
    for number, lines in enumerate([PAGE_ONE, PAGE_TWO, PAGE_ONE], start=1):
        page = pdf_text(data, tmp_path, "-f", str(number), "-l", str(number))
        assert normalised(page) == lines


@pytest.mark.parametrize("degrees", [90, 180, 270])
def test_a_page_scanned_turned_has_its_text_along_its_lines(
    client: FlaskClient, degrees: int, tmp_path: Path
) -> None:
    page = turned(samples.text_page(PAGE_ONE, size=(1240, 600)), degrees)
    png = samples.encode_image(page.image, "PNG")
    reply = post_file(client, png, "turned.png", query="?format=pdf")
    assert reply.status_code == 200
    text = post_file(client, png, "turned.png", query="?format=text").get_data(as_text=True)
    assert normalised(text) == PAGE_ONE
    # -layout: without it, poppler orders the blocks of text set at 90 degrees last first.
    assert normalised(pdf_text(reply.get_data(), tmp_path, "-layout")) == PAGE_ONE


@pytest.mark.parametrize(
    ("query", "accept", "status", "param"),
    [
        ("?format=pdf", None, 400, "format"),
        ("?format=PDF", "application/pdf", 400, "format"),
        ("", "application/pdf", 406, None),
    ],
)
def test_audio_cannot_be_answered_in_pdf(
    client: FlaskClient, query: str, accept: str | None, status: int, param: str | None
) -> None:
    wav = samples.silence_and_noise(1.0)
    reply = post_file(client, wav, "noise.wav", query=query, accept=accept)
    assert reply.status_code == status
    error = reply.get_json()["error"]
    assert error.get("param") == param
    if param:
        assert "pdf" in error["message"] and "audio" in error["message"]


def _line(words: list[str], top: int) -> Line:
    placed, left = [], 100
    for text in words:
        width = 24 * len(text)
        placed.append(Word(text, BoundingBox(left, top, left + width, top + 40)))
        left += width + 30
    return Line(tuple(placed), page_index=0)


def test_any_script_and_pdf_syntax_survive_in_the_text_layer(tmp_path: Path) -> None:
    """Words Helvetica cannot spell go through the Type0 font and come back as they were;
    parentheses and backslashes are escaped; the file says it is PDF/A-2b."""
    rows = [["Prix", "(net)", "d\\ü"], ["Ελληνικά", "日本語", "ﬁne", "😀"], ["a", "b"]]
    document = Document(
        "scan (1).png", DocumentKind.OCR,
        tuple(_line(words, 100 + 100 * n) for n, words in enumerate(rows)), (Page(0, 1240, 600),),
    )  # fmt: skip
    out = io.BytesIO()
    write_searchable_pdf(document, iter([encode_scan(Image.new("L", (620, 300), 255), 150)]), out)
    data = out.getvalue()
    assert normalised(pdf_text(data, tmp_path)) == [" ".join(words) for words in rows]
    assert b"<pdfaid:part>2</pdfaid:part>" in data and b"/S /GTS_PDFA1" in data
    # Every cross-reference entry points at its object.
    start = int(data.rsplit(b"startxref\n", 1)[1].split()[0])
    offsets = re.findall(rb"(\d{10}) 00000 n ", data[start:])
    for number, offset in enumerate(offsets, start=1):
        assert data[int(offset) :].startswith(b"%d 0 obj\n" % number)


def test_the_command_line_writes_the_pdf_to_stdout(png: bytes, tmp_path: Path) -> None:
    image = tmp_path / "page.png"
    image.write_bytes(png)
    done = subprocess.run(
        [sys.executable, "-m", "extractor.cli", "extract", str(image), "--format", "pdf"],
        capture_output=True, timeout=300, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(b"%PDF-") and done.stdout.endswith(b"%%EOF\n")
    assert normalised(pdf_text(done.stdout, tmp_path))[:2] == PAGE_ONE


def wait_for_job(url: str, job_id: str, timeout: float = 300) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while True:
        job: dict[str, Any] = httpx.get(f"{url}/v1/jobs/{job_id}", timeout=30).json()
        if job["status"] in ("succeeded", "failed", "cancelled"):
            return job
        assert time.monotonic() < deadline, f"job still {job['status']}"
        time.sleep(0.3)


@pytest.mark.slow  # a server or CLI process: make test runs it, make test-fast does not
def test_over_gunicorn_extract_and_a_job_answer_the_same_pdf(
    tmp_path: Path, three_page_pdf: bytes
) -> None:
    """/extract sends the PDF from its file whole; a job submitted with format=pdf draws it
    while its upload is at hand and its result has the same pages and text; one submitted without cannot
    answer in pdf (its upload is gone)."""
    url, server = start_server("--workers", "1")
    try:
        files = {"upload": ("three.pdf", three_page_pdf, "application/pdf")}
        reply = httpx.post(url + "/extract", params={"format": "pdf"}, files=files, timeout=300)
        assert reply.status_code == 200 and reply.headers["Content-Type"] == "application/pdf"
        assert reply.headers["Content-Length"] == str(len(reply.content))
        assert len(page_sizes(reply.content, tmp_path)) == 3
        assert normalised(pdf_text(reply.content, tmp_path)) == [*PAGE_ONE, *PAGE_TWO, *PAGE_ONE]

        drawn = httpx.post(url + "/v1/jobs", params={"format": "pdf"}, files=files, timeout=60)
        plain = httpx.post(url + "/v1/jobs", files=files, timeout=60)
        assert drawn.status_code == plain.status_code == 202
        for job in (drawn.json(), plain.json()):
            assert wait_for_job(url, job["id"])["status"] == "succeeded"
        result = httpx.get(f"{url}/v1/jobs/{drawn.json()['id']}/result", timeout=60)
        assert result.status_code == 200 and result.headers["Content-Type"] == "application/pdf"
        assert result.headers["Content-Length"] == str(len(result.content))
        # The job reads its pages through another Tesseract (pipeline.turns): the same text.
        assert pdf_text(result.content, tmp_path) == pdf_text(reply.content, tmp_path)
        assert page_sizes(result.content, tmp_path) == page_sizes(reply.content, tmp_path)
        as_text = httpx.get(
            f"{url}/v1/jobs/{drawn.json()['id']}/result", params={"format": "text"}, timeout=60
        )
        assert normalised(as_text.text) == normalised(pdf_text(result.content, tmp_path))

        refused = httpx.get(
            f"{url}/v1/jobs/{plain.json()['id']}/result", params={"format": "pdf"}, timeout=60
        )
        assert refused.status_code == 400 and refused.json()["error"]["param"] == "format"
        only = httpx.get(
            f"{url}/v1/jobs/{plain.json()['id']}/result",
            headers={"Accept": "application/pdf"}, timeout=60,
        )  # fmt: skip
        assert only.status_code == 406
    finally:
        stop_server(server)


def _dense_document(pages: int) -> Document:
    lines = tuple(
        Line(
            tuple(
                Word(
                    f"w{p}.{k}.{j}",
                    BoundingBox(150 + 220 * j, 200 + 70 * k, 350 + 220 * j, 250 + 70 * k),
                )
                for j in range(10)
            ),
            page_index=p,
        )
        for p in range(pages)
        for k in range(45)
    )
    return Document(
        "long.pdf", DocumentKind.OCR, lines, tuple(Page(p, 2480, 3508) for p in range(pages))
    )


def test_the_writer_holds_one_page_at_a_time(tmp_path: Path) -> None:
    """What the writer allocates does not grow with the pages: each page's image and text go
    to the file before the next is asked for (the scans come from a generator)."""
    scan = encode_scan(Image.new("L", (2480, 3508), 255), 300)
    peaks = []
    for pages in (4, 40):
        document = _dense_document(pages)
        with (tmp_path / f"{pages}.pdf").open("wb") as out:
            tracemalloc.start()
            write_searchable_pdf(document, (scan for _ in range(pages)), out)
            peaks.append(tracemalloc.get_traced_memory()[1])
            tracemalloc.stop()
    assert peaks[1] < peaks[0] + 256 * 1024, peaks  # ~0.37 MB at 4 pages and at 40
    assert len(page_sizes((tmp_path / "40.pdf").read_bytes(), tmp_path)) == 40

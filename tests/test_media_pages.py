"""Decoding images and PDFs into pages: the pixel limit under threads, bounded PDF rendering."""

from __future__ import annotations

import io
import threading
import time
import warnings
from collections.abc import Callable
from pathlib import Path

import pytest
from flask import Flask
from PIL import Image
from support import PAGE_ONE, post_file

from extractor import media, samples
from extractor.errors import EngineTimeout, PayloadTooLarge
from extractor.media import PdfPages, image_pages

LIMIT = 1_000_000  # pixels, patched in for these tests: small images, the same rules
# Pillow's own warning for sizes between the limit and twice it is expected here.
pytestmark = pytest.mark.filterwarnings("ignore::PIL.Image.DecompressionBombWarning")


@pytest.fixture
def small_limit(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(Image, "MAX_IMAGE_PIXELS", LIMIT)


def png(width: int, height: int) -> bytes:
    out = io.BytesIO()
    Image.new("L", (width, height), 255).save(out, format="PNG")
    return out.getvalue()


def test_the_pixel_limit_holds_while_pages_decode_in_threads(
    small_limit: None, tmp_path: Path
) -> None:
    """Past the limit but under twice it, Pillow only warns: the refusal must not depend on
    warning filters, which another thread may be swapping at that moment."""
    over = tmp_path / "over.png"
    over.write_bytes(png(1200, 1000))  # 1.2 megapixels: Pillow warns, we refuse
    under = tmp_path / "under.png"
    under.write_bytes(png(800, 600))
    filters_before = list(warnings.filters)
    outcomes: list[tuple[str, str]] = []
    start = threading.Barrier(8)

    def decode(path: Path, rounds: int) -> None:
        start.wait(10)
        for i in range(rounds):
            workdir = tmp_path / f"{threading.get_ident()}-{i}"
            workdir.mkdir()
            try:
                image_pages(path, workdir, max_pages=1)
                outcomes.append((path.name, "decoded"))
            except PayloadTooLarge:
                outcomes.append((path.name, "refused"))

    threads = [threading.Thread(target=decode, args=(p, 25)) for p in [over, under] * 4]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert sorted(set(outcomes)) == [("over.png", "refused"), ("under.png", "decoded")]
    assert len(outcomes) == 200
    assert warnings.filters == filters_before


def test_every_frame_of_a_tiff_is_checked(small_limit: None, tmp_path: Path) -> None:
    """Pillow checks the size of the first frame only."""
    path = tmp_path / "scan.tiff"
    first, second = Image.new("L", (400, 300), 255), Image.new("L", (1200, 1000), 255)
    first.save(path, format="TIFF", save_all=True, append_images=[second])
    with pytest.raises(PayloadTooLarge, match="page 2 of the image"):
        image_pages(path, tmp_path, max_pages=5)


def test_twice_the_limit_is_refused_by_pillow_itself(small_limit: None, tmp_path: Path) -> None:
    path = tmp_path / "bomb.png"
    path.write_bytes(png(2100, 1000))
    with pytest.raises(PayloadTooLarge, match="too many pixels"):
        image_pages(path, tmp_path, max_pages=1)


def test_no_limit_when_pillow_has_none(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(Image, "MAX_IMAGE_PIXELS", None)
    media.check_pixels(10**6, 10**6, "a page")  # no error
    path = tmp_path / "wide.png"
    path.write_bytes(png(4000, 300))
    assert image_pages(path, tmp_path, max_pages=1)[0].width == 4000


# -- PDF rendering: bounded per page, never behind one stuck page -------------------------


def vector_heavy_pdf(strokes: int) -> bytes:
    """One Letter page of ``strokes`` stroked lines: seconds of PDFium work at 300 dpi."""
    ops = "".join(
        f"{i % 600} {i * 7 % 780} m {i * 13 % 600} {i * 3 % 780} l S\n" for i in range(strokes)
    ).encode()
    objects = [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
        b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents 4 0 R >>",
        b"<< /Length %d >>\nstream\n" % len(ops) + ops + b"\nendstream",
    ]
    out, offsets = b"%PDF-1.4\n", []
    for number, body in enumerate(objects, 1):
        offsets.append(len(out))
        out += b"%d 0 obj\n" % number + body + b"\nendobj\n"
    xref = len(out)
    out += b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1)
    out += b"".join(b"%010d 00000 n \n" % offset for offset in offsets)
    out += b"trailer\n<< /Size %d /Root 1 0 R >>\n" % (len(objects) + 1)
    return out + b"startxref\n%d\n%%%%EOF\n" % xref


@pytest.fixture(scope="module")
def heavy_pdf(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("pdf") / "heavy.pdf"
    path.write_bytes(vector_heavy_pdf(20_000))  # ~3-5 s to render at 300 dpi on this machine
    return path


@pytest.fixture(scope="module")
def text_pdf(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("pdf") / "text.pdf"
    path.write_bytes(samples.pdf([samples.text_page(PAGE_ONE)], dpi=150))
    return path


def test_a_slow_page_stops_at_the_page_timeout(heavy_pdf: Path, tmp_path: Path) -> None:
    pdf = PdfPages(heavy_pdf, tmp_path, 300, 1, page_timeout=0.3)
    started = time.monotonic()
    try:
        with pytest.raises(EngineTimeout, match="PDF page 1"):
            pdf.render(0)
    finally:
        pdf.close()
    assert time.monotonic() - started < 2  # PDFium pauses every ~100 objects
    assert list(tmp_path.iterdir()) == []


def test_a_slow_page_does_not_hold_up_other_pages(
    heavy_pdf: Path, text_pdf: Path, tmp_path: Path
) -> None:
    """The lock is released between slices of rendering, so a quick page started while a slow
    one renders finishes first; under one lock per page it would wait for the slow one."""
    finished: dict[str, float] = {}

    def render(name: str, path: Path) -> None:
        workdir = tmp_path / name
        workdir.mkdir()
        pdf = PdfPages(path, workdir, 300, 1, page_timeout=60)
        try:
            page = pdf.render(0)
            assert page.path.stat().st_size > 0
        finally:
            pdf.close()
        finished[name] = time.monotonic()

    slow = threading.Thread(target=render, args=("slow", heavy_pdf))
    slow.start()
    time.sleep(0.3)
    started = time.monotonic()
    render("quick", text_pdf)
    slow.join(120)
    assert finished["quick"] < finished["slow"]
    assert finished["quick"] - started < 3


def test_a_hung_pdfium_call_times_out_other_requests_instead_of_blocking_them(
    text_pdf: Path, tmp_path: Path
) -> None:
    """A PDFium call that never returns (faked: the real one cannot be made to hang) keeps the
    lock; other documents wait for it only until their own deadline."""
    hung, release = threading.Event(), threading.Event()

    def stuck_call() -> None:
        with media._PDFIUM_LOCK:
            hung.set()
            release.wait(30)

    holder = threading.Thread(target=stuck_call)
    holder.start()
    hung.wait(10)
    try:
        started = time.monotonic()
        with pytest.raises(EngineTimeout):
            PdfPages(text_pdf, tmp_path, 150, 1, deadline=time.monotonic() + 0.3)
        assert time.monotonic() - started < 2
    finally:
        release.set()
        holder.join(10)
    pdf = PdfPages(text_pdf, tmp_path, 150, 1, deadline=time.monotonic() + 30)
    try:
        assert abs(pdf.render(0, time.monotonic() + 30).width - 1240) <= 1  # PDFium rounds up
    finally:
        pdf.close()


def test_a_slow_page_is_a_504_and_leaves_no_files(
    make_app: Callable[..., Flask], heavy_pdf: Path
) -> None:
    client = make_app(pdf_page_timeout=0.3).test_client()
    reply = post_file(client, heavy_pdf.read_bytes(), "drawing.pdf")
    assert reply.status_code == 504
    assert reply.get_json()["error"]["code"] == "engine_timeout"
    assert "PDF page 1" in reply.get_json()["error"]["message"]

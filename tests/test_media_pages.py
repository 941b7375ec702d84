"""Decoding images and PDFs into pages: the pixel limit under threads, PDF rendering in a
process of its own per document, bounded in time and memory."""

from __future__ import annotations

import io
import json
import os
import signal
import subprocess
import sys
import threading
import time
import warnings
import zlib
from collections.abc import Callable
from pathlib import Path

import pytest
from flask import Flask
from PIL import Image
from support import PAGE_ONE, post_file

from extractor import samples
from extractor.errors import EngineTimeout, PayloadTooLarge, TooManyPages
from extractor.media import images
from extractor.media.images import image_pages
from extractor.media.pdf import PdfPages

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
    images.check_pixels(10**6, 10**6, "a page")  # no error
    path = tmp_path / "wide.png"
    path.write_bytes(png(4000, 300))
    assert image_pages(path, tmp_path, max_pages=1)[0].width == 4000


# -- PDF rendering: one renderer process per document, bounded in time and memory ---------


def pdf_file(objects: list[bytes]) -> bytes:
    """A PDF of these numbered objects (1 is the catalog), with a correct xref table."""
    out, offsets = b"%PDF-1.4\n", []
    for number, body in enumerate(objects, 1):
        offsets.append(len(out))
        out += b"%d 0 obj\n" % number + body + b"\nendobj\n"
    xref = len(out)
    out += b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1)
    out += b"".join(b"%010d 00000 n \n" % offset for offset in offsets)
    out += b"trailer\n<< /Size %d /Root 1 0 R >>\n" % (len(objects) + 1)
    return out + b"startxref\n%d\n%%%%EOF\n" % xref


def stream(head: bytes, data: bytes) -> bytes:
    return head[:-2] + b" /Length %d >>\nstream\n" % len(data) + data + b"\nendstream"


def one_page_pdf(page: bytes, contents: bytes, *extra: bytes) -> bytes:
    """``page``: the page dictionary's own entries; object 4 holds ``contents``."""
    return pdf_file([
        b"<< /Type /Catalog /Pages 2 0 R >>",
        b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
        b"<< /Type /Page /Parent 2 0 R " + page + b" /Contents 4 0 R >>",
        stream(b"<< >>", contents),
        *extra,
    ])  # fmt: skip


def vector_heavy_pdf(strokes: int, pages: int = 1) -> bytes:
    """Letter pages of ``strokes`` stroked lines each: seconds of PDFium work at 300 dpi."""
    ops = "".join(
        f"{i % 600} {i * 7 % 780} m {i * 13 % 600} {i * 3 % 780} l S\n" for i in range(strokes)
    ).encode()
    kids = " ".join(f"{3 + n} 0 R" for n in range(pages)).encode()
    page = b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents %d 0 R >>"
    return pdf_file([
        b"<< /Type /Catalog /Pages 2 0 R >>",
        b"<< /Type /Pages /Kids [%s] /Count %d >>" % (kids, pages),
        *[page % (3 + pages) for _ in range(pages)],
        stream(b"<< >>", ops),
    ])  # fmt: skip


def image_bomb_pdf(side: int) -> bytes:
    """A Letter page showing one ``side`` x ``side`` RGB image: ~100 KB of Flate that PDFium
    decodes into ``3 * side**2`` bytes."""
    pixels = zlib.compress(b"\x80" * (side * side * 3), 9)
    image = b"<< /Type /XObject /Subtype /Image /Width %d /Height %d /ColorSpace /DeviceRGB"
    image += b" /BitsPerComponent 8 /Filter /FlateDecode >>"
    return one_page_pdf(
        b"/MediaBox [0 0 612 792] /Resources << /XObject << /Im0 5 0 R >> >>",
        b"q 612 0 0 792 0 0 cm /Im0 Do Q",
        stream(image % (side, side), pixels),
    )


# The page timeout the slow-page tests set. The same timeout bounds opening the PDF (starting
# the renderer, importing PDFium), which took 0.2 s alone and 0.3 s at a load average of 7: a
# timeout of 0.3 s failed the open instead of the page. 3 s is ten times that.
SLOW_PAGE_TIMEOUT = 3.0


@pytest.fixture(scope="module")
def heavy_pdf(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A page far slower to render than ``SLOW_PAGE_TIMEOUT`` on any machine: 100,000 strokes
    took 50 s at 300 dpi at a load average of 7 (20,000 took 3-5 s alone)."""
    path = tmp_path_factory.mktemp("pdf") / "heavy.pdf"
    path.write_bytes(vector_heavy_pdf(100_000))
    return path


@pytest.fixture(scope="module")
def text_pdf(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("pdf") / "text.pdf"
    path.write_bytes(samples.pdf([samples.text_page(PAGE_ONE)], dpi=150))
    return path


def renderers(module: bytes = b"extractor.media.pdfrender") -> list[int]:
    """Pids of this process's children running ``module`` (by default the PDF renderer),
    still running or not yet reaped."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            cmdline = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        parent = int(stat[stat.rindex(")") + 2 :].split()[1])
        if parent == os.getpid() and module in cmdline:
            found.append(int(entry.name))
    return found


def open_fds() -> set[str]:
    return set(os.listdir("/proc/self/fd"))


def wait_for_renderer(timeout: float = 30, module: bytes = b"extractor.media.pdfrender") -> int:
    stop = time.monotonic() + timeout
    while time.monotonic() < stop:
        if found := renderers(module):
            return found[0]
        time.sleep(0.01)
    raise AssertionError("no renderer process appeared")


def test_pages_render_as_pdfium_renders_them_in_process(text_pdf: Path, tmp_path: Path) -> None:
    """The same pixels as pypdfium2's own grey rendering, so OCR results do not change."""
    import pypdfium2 as pdfium

    fds = open_fds()
    pdf = PdfPages(text_pdf, tmp_path, 150, 1, page_timeout=30)
    try:
        assert pdf.count == 1
        page = pdf.render(0, time.monotonic() + 30)
    finally:
        pdf.close()
    pdf.close()  # twice is fine
    assert renderers() == [] and open_fds() == fds
    with pdfium.PdfDocument(str(text_pdf)) as document:
        expected = document[0].render(scale=150 / 72, grayscale=True).to_pil()
    with Image.open(page.path) as rendered:
        assert rendered.format == "PPM" and rendered.mode == "L"
        assert (rendered.width, rendered.height) == (page.width, page.height) == expected.size
        assert rendered.tobytes() == expected.convert("L").tobytes()
    assert page.derived and page.path.parent == tmp_path
    assert pdf.peak_rss_mb is not None and pdf.peak_rss_mb > 10


def test_the_renderer_imports_only_what_it_needs(text_pdf: Path, tmp_path: Path) -> None:
    """It starts for every PDF: no numpy, Pillow, Flask or the rest of the extractor."""
    env = {**os.environ, "PYTHONPATH": str(Path(images.__file__).parents[2])}
    run = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "extractor.media.pdfrender", str(text_pdf), "150",
         "5", "0", str(tmp_path), "1024", "0"],
        input=b'{"render": 0}\n', capture_output=True, timeout=60, env=env,
    )  # fmt: skip
    answers = [json.loads(line) for line in run.stdout.splitlines()]
    assert answers[0] == {"pages": 1} and answers[1]["page"] == 0, run.stderr[-2000:]
    imported = {
        line.split("|")[-1].strip()
        for line in run.stderr.decode().splitlines()
        if line.startswith("import time:") and "|" in line
    }
    assert {"pypdfium2", "extractor"} <= imported  # the renderer itself runs as __main__
    heavy = {name for name in imported if name.split(".")[0] in ("numpy", "PIL", "flask", "av")}
    # extractor.media is the renderer's package: a docstring, it imports nothing itself.
    ours = {name for name in imported if name.startswith("extractor.")} - {"extractor.media"}
    assert heavy == set() and ours == set()


@pytest.mark.serial  # a bound on the wall time: run alone (make test's second pass)
def test_a_slow_page_stops_at_the_page_timeout(heavy_pdf: Path, tmp_path: Path) -> None:
    fds = open_fds()
    pdf = PdfPages(heavy_pdf, tmp_path, 300, 1, page_timeout=SLOW_PAGE_TIMEOUT)
    try:
        started = time.monotonic()
        with pytest.raises(EngineTimeout, match="PDF page 1"):
            pdf.render(0)
        with pytest.raises(EngineTimeout, match="PDF page 1"):  # the document stays failed
            pdf.render(0)
        waited = time.monotonic() - started
    finally:
        pdf.close()
    # The timeout, then a SIGKILL and a reap: nowhere near the page's tens of seconds.
    assert SLOW_PAGE_TIMEOUT <= waited < SLOW_PAGE_TIMEOUT + 3
    assert list(tmp_path.iterdir()) == []
    assert renderers() == [] and open_fds() == fds


@pytest.mark.serial  # a page timeout: run alone (make test's second pass)
def test_a_slow_page_is_a_504_and_leaves_no_files_nor_process(
    make_app: Callable[..., Flask], heavy_pdf: Path
) -> None:
    client = make_app(pdf_page_timeout=SLOW_PAGE_TIMEOUT).test_client()
    reply = post_file(client, heavy_pdf.read_bytes(), "drawing.pdf")
    assert reply.status_code == 504
    assert reply.get_json()["error"]["code"] == "engine_timeout"
    assert "PDF page 1" in reply.get_json()["error"]["message"]
    assert renderers() == []  # make_app checks the files


def test_a_hung_renderer_does_not_block_another_documents_pages(
    text_pdf: Path, tmp_path: Path
) -> None:
    """A renderer stopped dead (SIGSTOP: as hung as a process gets) holds up its own document
    until the page timeout, and nobody else's."""
    (tmp_path / "hung").mkdir()
    (tmp_path / "other").mkdir()
    hung = PdfPages(text_pdf, tmp_path / "hung", 150, 1, page_timeout=3)
    outcome: list[BaseException] = []

    def render_hung() -> None:
        try:
            hung.render(0)
        except BaseException as exc:  # checked below
            outcome.append(exc)

    os.kill(hung._process.pid, signal.SIGSTOP)
    try:
        waiting = threading.Thread(target=render_hung)
        started = time.monotonic()
        waiting.start()
        time.sleep(0.2)
        other = PdfPages(text_pdf, tmp_path / "other", 150, 1, page_timeout=30)
        try:
            assert abs(other.render(0).width - 1240) <= 1  # PDFium rounds up
        finally:
            other.close()
        assert time.monotonic() - started < 2.5 and waiting.is_alive()
        waiting.join(30)
    finally:
        hung.close()  # kills a stopped process too
    assert time.monotonic() - started < 10
    assert len(outcome) == 1 and isinstance(outcome[0], EngineTimeout)
    assert renderers() == []
    assert not (tmp_path / "hung" / "page-0.pnm").exists()


@pytest.mark.parametrize(
    "data",
    [
        # A 2000 x 2000 pt page: a 69 MB bitmap at 300 dpi (under Pillow's pixel limit).
        one_page_pdf(b"/MediaBox [0 0 2000 2000]", b"BT /F1 24 Tf 72 72 Td (Hi) Tj ET"),
        # A 6000 x 6000 RGB image in 100 KB: PDFium would skip it and answer a blank page.
        image_bomb_pdf(6000),
    ],
    ids=["bitmap", "embedded-image"],
)
def test_a_page_past_the_memory_cap_is_a_413(make_app: Callable[..., Flask], data: bytes) -> None:
    # Pages drawn at their own size (by default the bitmap is at most EXTRACTOR_OCR_MAX_PIXELS).
    client = make_app(pdf_render_memory_mb=64, ocr_max_pixels=0).test_client()
    reply = post_file(client, data, "big.pdf")
    assert reply.status_code == 413, reply.get_json()
    assert reply.get_json()["error"]["message"].startswith(
        "PDF page 1 needs more memory to render than EXTRACTOR_PDF_RENDER_MEMORY_MB allows"
    )
    assert renderers() == []


def test_a_renderer_killed_mid_document_is_a_413_not_a_hang(
    make_app: Callable[..., Flask],
) -> None:
    """SIGKILL from anyone but us is, in production, the OOM killer: the page needed more
    memory than there was, so 413 as for the cap, with the signal named; not a 500 (nothing
    of ours failed) and not a hang."""
    client = make_app(pdf_page_timeout=60).test_client()
    killed: list[int] = []

    def kill_renderer() -> None:
        pid = wait_for_renderer()
        time.sleep(0.3)  # mid-page: each page takes seconds
        os.kill(pid, signal.SIGKILL)
        killed.append(pid)

    killer = threading.Thread(target=kill_renderer)
    killer.start()
    started = time.monotonic()
    reply = post_file(client, vector_heavy_pdf(20_000, pages=3), "drawing.pdf")
    killer.join(30)
    assert killed and time.monotonic() - started < 30
    assert reply.status_code == 413
    error = reply.get_json()["error"]
    assert error["code"] == "payload_too_large" and "SIGKILL" in error["message"]
    assert renderers() == []


def test_a_renderer_killed_between_pages_fails_the_rest_cleanly(
    text_pdf: Path, tmp_path: Path
) -> None:
    data = samples.pdf([samples.text_page(PAGE_ONE)] * 3, dpi=150)
    (tmp_path / "three.pdf").write_bytes(data)
    fds = open_fds()
    pdf = PdfPages(tmp_path / "three.pdf", tmp_path, 150, 3, page_timeout=30)
    try:
        pdf.render(0).path.unlink()
        os.kill(pdf._process.pid, signal.SIGKILL)
        for index in (1, 2):
            with pytest.raises(PayloadTooLarge, match="SIGKILL"):
                pdf.render(index)
    finally:
        pdf.close()
    pdf.close()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["three.pdf"]
    assert renderers() == [] and open_fds() == fds


def test_a_corrupt_pdf_is_a_415(make_app: Callable[..., Flask]) -> None:
    client = make_app().test_client()
    reply = post_file(client, b"%PDF-1.7\n" + bytes(range(256)) * 8, "broken.pdf")
    assert reply.status_code == 415
    assert reply.get_json()["error"]["code"] == "unsupported_media_type"
    assert renderers() == []


def test_too_many_pages_is_refused_before_rendering(text_pdf: Path, tmp_path: Path) -> None:
    (tmp_path / "two.pdf").write_bytes(samples.pdf([samples.text_page(PAGE_ONE)] * 2))
    with pytest.raises(TooManyPages, match="the PDF has 2 pages; the limit is 1"):
        PdfPages(tmp_path / "two.pdf", tmp_path, 150, 1)
    assert renderers() == [] and [p.name for p in tmp_path.iterdir()] == ["two.pdf"]


def test_a_pdf_page_past_the_pixel_limit_is_refused_before_rendering(
    small_limit: None, text_pdf: Path, tmp_path: Path
) -> None:
    """The renderer gets Pillow's limit and counts before it allocates the bitmap."""
    pdf = PdfPages(text_pdf, tmp_path, 300, 1)  # 2480 x 3508: past the 1 MP limit
    try:
        with pytest.raises(PayloadTooLarge, match=r"PDF page 1 has \d+ pixels; the limit is"):
            pdf.render(0)
        assert Path(f"/proc/{pdf._process.pid}").exists()  # it answered, and serves on
    finally:
        pdf.close()
    assert list(tmp_path.iterdir()) == []

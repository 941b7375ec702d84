"""Pages larger than Tesseract is given (EXTRACTOR_OCR_MAX_PIXELS) are read scaled down, their
boxes still on their words in the upload's pixels; pages past EXTRACTOR_MAX_PAGE_PIXELS (colour
pages other than JPEGs counting 4 bytes a pixel) are refused before they are decoded. Real
Tesseract and PDFium, on small limits so that ordinary pages are "large"."""

from __future__ import annotations

import io
import os
import re
import signal
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from flask import Flask
from PIL import Image
from support import PAGE_ONE, post_file
from test_media_pages import renderers, wait_for_renderer
from test_ocr import assert_boxes_where_drawn
from test_ocr_rotation import share_of_words_on_their_ink

from extractor import samples
from extractor.media.images import image_pages
from extractor.samples.prose import prose_page, turned

SMALL = 1_000_000  # pixels Tesseract is given here: page_one (1240 x 1754) is 2.2 million


def encoded(image: Image.Image, fmt: str, **options: Any) -> bytes:
    out = io.BytesIO()
    image.save(out, format=fmt, **options)
    return out.getvalue()


def read(make_app: Callable[..., Flask], data: bytes, name: str, **settings: Any) -> Any:
    reply = post_file(make_app(**settings).test_client(), data, name)
    assert reply.status_code == 200, reply.get_data(as_text=True)
    return reply.get_json()


@pytest.mark.parametrize(
    ("name", "encode"),
    [
        ("photo.jpg", lambda image: encoded(image.convert("RGB"), "JPEG", quality=90)),
        ("scan.png", lambda image: encoded(image, "PNG")),
        ("colour.png", lambda image: encoded(image.convert("RGB"), "PNG")),
        ("fax.tiff", lambda image: encoded(image.convert("1"), "TIFF", compression="group4")),
        ("scan.pdf", lambda image: encoded(image, "PDF", resolution=150)),
    ],
)
def test_a_page_past_the_ocr_pixels_is_read_scaled_with_boxes_in_upload_pixels(
    make_app: Callable[..., Flask], page_one: samples.TextPage, validator: Any, name: str,
    encode: Callable[[Image.Image], bytes],
) -> None:  # fmt: skip
    body = read(make_app, encode(page_one.image), name, ocr_max_pixels=SMALL, pdf_dpi=150)
    validator.validate(body)
    assert [c["content"] for c in body["cells"]] == PAGE_ONE
    [page] = body["pages"]  # a PDF page's pixels are its size at 150 dpi, rounded up
    assert abs(page["pageWidth"] - 1240) <= 1 and abs(page["pageHeight"] - 1754) <= 1
    assert_boxes_where_drawn(body, page_one.words)


def test_a_sideways_photo_past_the_ocr_pixels_keeps_its_upright_size(
    make_app: Callable[..., Flask], page_one: samples.TextPage
) -> None:
    """A JPEG whose EXIF says "turn me 90°" is scaled after it is turned: its size and boxes
    are those of the page as a viewer shows it."""
    stored = page_one.image.convert("RGB").transpose(Image.Transpose.ROTATE_90)
    exif = Image.Exif()
    exif[0x0112] = 6  # shown turned 90° clockwise: upright again
    body = read(make_app, encoded(stored, "JPEG", exif=exif), "phone.jpg", ocr_max_pixels=SMALL)
    assert [c["content"] for c in body["cells"]] == PAGE_ONE
    assert body["pages"] == [{"pageIndex": 0, "pageWidth": 1240, "pageHeight": 1754}]
    assert_boxes_where_drawn(body, page_one.words)


def test_a_sideways_scan_past_the_ocr_pixels_is_read_turned_upright(
    make_app: Callable[..., Flask],
) -> None:
    """An A4 page of prose at 300 dpi (8.7 million pixels) turned 90° as scanned, read in 4
    million: turned upright on the scaled copy, its boxes back on its words in the upload."""
    page, _text = prose_page(dpi=300)
    upload = turned(page, 90)
    data = encoded(upload.image, "PNG")
    body = read(make_app, data, "scan.png", ocr_max_pixels=4_000_000)
    width, height = upload.image.size
    assert body["pages"] == [{"pageIndex": 0, "pageWidth": width, "pageHeight": height}]
    assert {"key": "rotation", "value": "90"} in body["cells"][0]["metadata"]
    assert share_of_words_on_their_ink(body, upload.words) > 0.9


def test_every_frame_of_a_large_tiff_is_scaled_on_its_own(
    make_app: Callable[..., Flask], page_one: samples.TextPage, page_two: samples.TextPage
) -> None:
    """The second frame is within the limit and is read at its own size."""
    small_two = page_two.image.resize((620, 877))
    data = encoded(page_one.image, "TIFF", save_all=True, append_images=[small_two])
    body = read(make_app, data, "two.tiff", ocr_max_pixels=SMALL)
    assert body["pages"] == [
        {"pageIndex": 0, "pageWidth": 1240, "pageHeight": 1754},
        {"pageIndex": 1, "pageWidth": 620, "pageHeight": 877},
    ]
    assert [c["content"] for c in body["cells"]][: len(PAGE_ONE)] == PAGE_ONE


def test_a_page_within_the_ocr_pixels_is_read_as_it_is(
    make_app: Callable[..., Flask], page_one: samples.TextPage, tmp_path: Any
) -> None:
    """No copy, no scaling: the upload itself goes to Tesseract."""
    path = tmp_path / "page.png"
    path.write_bytes(encoded(page_one.image, "PNG"))
    [page] = image_pages(path, tmp_path, 1, ocr_pixels=1240 * 1754)
    assert (page.path, page.upload_size, page.derived) == (path, None, False)
    [scaled] = image_pages(path, tmp_path, 1, ocr_pixels=SMALL)
    assert scaled.derived and scaled.upload_size == (1240, 1754)
    assert scaled.width * scaled.height <= SMALL
    assert abs(scaled.width / scaled.height - 1240 / 1754) < 0.002


@pytest.mark.parametrize(
    ("mode", "fmt", "status"),
    [("L", "PNG", 200), ("RGB", "JPEG", 200), ("RGB", "PNG", 413), ("P", "PNG", 413)],
)
def test_the_page_pixel_limit_counts_the_bytes_a_page_takes_decoded(
    make_app: Callable[..., Flask], page_one: samples.TextPage, mode: str, fmt: str, status: int
) -> None:
    """page_one has 2.2 million pixels, under a 4 million limit in grey and as a JPEG (decoded
    in grey), over it in colour (4 bytes a pixel) and with a palette (2)."""
    app = make_app(max_page_pixels=4_000_000, ocr_max_pixels=SMALL)
    reply = post_file(app.test_client(), encoded(page_one.image.convert(mode), fmt), "p")
    assert reply.status_code == status
    if status == 413:
        error = reply.get_json()["error"]
        assert error["code"] == "payload_too_large"
        assert "EXTRACTOR_MAX_PAGE_PIXELS" in error["message"]
        assert "2174960 pixels" in error["message"]


def test_a_pdf_page_past_the_ocr_pixels_is_drawn_scaled_by_the_renderer(
    make_app: Callable[..., Flask], page_one: samples.TextPage
) -> None:
    """At 600 dpi page_one's PDF page is 8.7 million pixels: the renderer draws it in at most
    EXTRACTOR_OCR_MAX_PIXELS, and its boxes come back in 600 dpi pixels."""
    data = encoded(page_one.image, "PDF", resolution=150)
    body = read(make_app, data, "scan.pdf", ocr_max_pixels=SMALL, pdf_dpi=600)
    [page] = body["pages"]
    assert abs(page["pageWidth"] - 4960) <= 1 and abs(page["pageHeight"] - 7016) <= 1
    assert [c["content"] for c in body["cells"]] == PAGE_ONE
    assert_boxes_where_drawn(body, page_one.words, scale=4.0)


def test_a_pdf_page_past_the_page_pixels_is_read_when_drawn_within_them(
    make_app: Callable[..., Flask], page_one: samples.TextPage
) -> None:
    """A PDF page is drawn in at most EXTRACTOR_OCR_MAX_PIXELS, so its size at the dpi (an A0
    plan at 300 dpi: 139 million pixels) is no reason to refuse it; drawn whole, it is."""
    data = encoded(page_one.image, "PDF", resolution=150)  # 8.7 million pixels at 300 dpi
    limits = {"max_page_pixels": 4_000_000, "pdf_dpi": 300}
    body = read(make_app, data, "plan.pdf", ocr_max_pixels=SMALL, **limits)
    assert [c["content"] for c in body["cells"]] == PAGE_ONE
    assert_boxes_where_drawn(body, page_one.words, scale=2.0)
    whole = post_file(make_app(ocr_max_pixels=0, **limits).test_client(), data, "plan.pdf")
    assert whole.status_code == 413
    assert "EXTRACTOR_MAX_PAGE_PIXELS" in whole.get_json()["error"]["message"]


def _large_colour_png(page: Image.Image, path: Any) -> None:
    """A 4000 x 4000 colour PNG (16 million pixels, 64 MB decoded) holding ``page``."""
    canvas = Image.new("RGB", (4000, 4000), "white")
    canvas.paste(page.convert("RGB"), (0, 0))
    canvas.save(path, format="PNG", compress_level=1)


def _kib(field: str) -> int:
    status = Path("/proc/self/status").read_text()
    return int(re.search(rf"^{field}:\s+(\d+) kB", status, re.M).group(1))  # type: ignore[union-attr]


def test_a_large_page_is_decoded_and_scaled_outside_the_worker(
    page_one: samples.TextPage, tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Decoded whole, the page holds 64 MB (Pillow: 4 bytes a colour pixel), its grey copy 16
    more: a process of its own (media.shrink) holds them, the calling one only its header."""
    monkeypatch.setattr(Image, "MAX_IMAGE_PIXELS", 80_000_000)  # the default (an app sets it)
    path = tmp_path / "large.png"
    _large_colour_png(page_one.image, path)
    Path("/proc/self/clear_refs").write_text("5")  # VmHWM from here on
    before = _kib("VmRSS")
    [page] = image_pages(path, tmp_path, 1, ocr_pixels=SMALL)
    grew_mb = (_kib("VmHWM") - before) / 1024
    assert grew_mb < 16, f"the calling process grew {grew_mb:.0f} MB"
    assert page.derived and page.upload_size == (4000, 4000)
    assert (page.width, page.height) == (1000, 1000)
    with Image.open(page.path) as scaled:
        assert scaled.mode == "L" and scaled.size == (1000, 1000)


def test_a_large_page_past_the_scaling_memory_is_refused(
    make_app: Callable[..., Flask], page_one: samples.TextPage, tmp_path: Any
) -> None:
    """The scaling process's address space is capped as the PDF renderer's: past it, a 413
    naming the setting, and the worker carries on."""
    path = tmp_path / "large.png"
    _large_colour_png(page_one.image, path)
    client = make_app(ocr_max_pixels=SMALL, pdf_render_memory_mb=100).test_client()
    reply = post_file(client, path.read_bytes(), "large.png")
    assert reply.status_code == 413, reply.get_data(as_text=True)
    assert "EXTRACTOR_PDF_RENDER_MEMORY_MB" in reply.get_json()["error"]["message"]
    again = post_file(client, encoded(page_one.image, "PNG"), "page.png")
    assert [c["content"] for c in again.get_json()["cells"]] == PAGE_ONE


def test_a_truncated_large_page_is_a_415_from_the_scaling_process(
    make_app: Callable[..., Flask], page_one: samples.TextPage, tmp_path: Any
) -> None:
    """Its header reads (the worker counts its pixels), its pixels do not: the scaling process
    says so, and the client gets a 415 naming the page."""
    path = tmp_path / "large.png"
    _large_colour_png(page_one.image, path)
    data = path.read_bytes()
    app = make_app(ocr_max_pixels=SMALL)
    reply = post_file(app.test_client(), data[: len(data) // 2], "large.png")
    assert reply.status_code == 415, reply.get_data(as_text=True)
    assert "page 1 of the image could not be decoded" in reply.get_json()["error"]["message"]


@pytest.mark.parametrize(
    ("sent", "status", "said"),
    [
        # Stopped from outside (a shutdown, an operator): nothing to do with the file, retry.
        (signal.SIGTERM, 503, "the process scaling large pages was stopped by SIGTERM; retry"),
        # In production only the OOM killer kills a busy child: the page needed the memory.
        (signal.SIGKILL, 413, "EXTRACTOR_PDF_RENDER_MEMORY_MB"),
    ],
    ids=["SIGTERM", "SIGKILL"],
)
def test_a_scaling_process_killed_by_a_signal_is_read_as_the_pdf_renderer_is(
    make_app: Callable[..., Flask], page_one: samples.TextPage, tmp_path: Any,
    sent: signal.Signals, status: int, said: str,
) -> None:  # fmt: skip
    path = tmp_path / "large.png"
    _large_colour_png(page_one.image, path)
    client = make_app(ocr_max_pixels=SMALL).test_client()
    module = b"extractor.media.shrink"
    killed: list[int] = []

    def kill() -> None:  # as soon as it appears: it takes a second to decode and scale
        pid = wait_for_renderer(module=module)
        os.kill(pid, sent)
        killed.append(pid)

    killer = threading.Thread(target=kill)
    killer.start()
    reply = post_file(client, path.read_bytes(), "large.png")
    killer.join(30)
    assert killed, "no scaling process appeared"
    assert reply.status_code == status, reply.get_data(as_text=True)
    message = reply.get_json()["error"]["message"]
    assert said in message and "Traceback" not in message
    assert renderers(module) == []
    again = post_file(client, encoded(page_one.image, "PNG"), "page.png")
    assert [c["content"] for c in again.get_json()["cells"]] == PAGE_ONE

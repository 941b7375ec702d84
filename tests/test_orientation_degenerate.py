"""Pages of every degenerate shape get a normal reading from the rotation step, never an
exception: 1xN and Nx1 strips, tiny pages (read as they are, no rotation looked for), huge
aspect ratios, all-white, all-black, noise with no words, and ink OSD cannot place (it fails
with "Too few characters"). Real Tesseract throughout, both called directly and through
``POST /extract``; a fake only for OSD replies real Tesseract does not give (empty, garbled).

Found by the API fuzz test: a 1x1 JPEG asked Pillow's JPEG draft for a 0x0 copy (a
ZeroDivisionError, a 500), and OSD's "Too few characters" was re-raised instead of read as
"cannot tell".
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import pytest
from flask import Flask
from PIL import Image
from support import post_file

from extractor import samples
from extractor.media.images import PageImage
from extractor.ocr import orientation
from extractor.ocr.orientation import (
    ROTATE_MIN_SIDE,
    Reading,
    Turn,
    ink_angle,
    osd_quarter,
    read_upright,
    turn_from_ink,
)
from extractor.web.app import create_app

DEADLINE_S = 60.0  # generous: the machine is shared; none of these pages takes a second


def _flat(value: int) -> Callable[[int, int], Image.Image]:
    return lambda width, height: Image.new("L", (width, height), value)


def _noise(width: int, height: int) -> Image.Image:
    pixels = np.random.default_rng(1).integers(0, 256, (height, width), dtype=np.uint8)
    return Image.fromarray(pixels)


def _rules(step: int, *, across: bool) -> Callable[[int, int], Image.Image]:
    """Black rules every ``step`` pixels, across the page or (``across=False``) up and down
    it: ink with sharp lines and no letters (up and down, the ink's lines send it to OSD)."""

    def draw(width: int, height: int) -> Image.Image:
        pixels = np.full((height, width), 255, dtype=np.uint8)
        if across:
            pixels[::step] = 0
        else:
            pixels[:, ::step] = 0
        return Image.fromarray(pixels)

    return draw


# (name, width, height, how the pixels look)
PAGES = [
    ("1x1 white", 1, 1, _flat(255)),
    ("1x1 black", 1, 1, _flat(0)),
    ("1x500 rules", 1, 500, _rules(4, across=True)),
    ("500x1 rules", 500, 1, _rules(4, across=False)),
    ("2x3000 noise", 2, 3000, _noise),
    ("3000x2 noise", 3000, 2, _noise),
    ("15x15 noise", 15, 15, _noise),
    ("16x16 black", ROTATE_MIN_SIDE, ROTATE_MIN_SIDE, _flat(0)),
    ("5000x20 rules", 5000, 20, _rules(4, across=False)),
    ("20x5000 rules", 20, 5000, _rules(4, across=True)),
    ("600x800 white", 600, 800, _flat(255)),
    ("600x800 black", 600, 800, _flat(0)),
    ("300x300 noise", 300, 300, _noise),
    ("600x800 rules across", 600, 800, _rules(6, across=True)),
    ("600x800 rules up and down", 600, 800, _rules(6, across=False)),
]
FORMATS = ["JPEG", "PNG"]
CASES = [
    pytest.param(width, height, draw, fmt, id=f"{name} {fmt}")
    for name, width, height, draw in PAGES
    for fmt in FORMATS
]


@pytest.fixture(scope="module")
def app(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Flask]:
    """One app for the module (an app per test reloads Tesseract)."""
    scratch = tmp_path_factory.mktemp("requests")
    app = create_app({"tmp_dir": str(scratch)})
    app.testing = True
    yield app
    app.extensions["extractor"].close()
    assert list(Path(scratch).iterdir()) == [], "a request left temporary files behind"


def _page(
    tmp_path: Path, width: int, height: int, draw: Callable[..., Image.Image], fmt: str
) -> PageImage:
    path = tmp_path / f"page.{fmt.lower()}"
    path.write_bytes(samples.encode_image(draw(width, height), fmt))
    return PageImage(0, path, width, height)


@pytest.mark.parametrize(("width", "height", "draw", "fmt"), CASES)
def test_each_rotation_step_gives_a_normal_answer(
    app: Flask, tmp_path: Path, width: int, height: int, draw: Callable[..., Image.Image],
    fmt: str,
) -> None:  # fmt: skip
    page = _page(tmp_path, width, height, draw, fmt)
    deadline = time.monotonic() + DEADLINE_S

    angle = ink_angle(page)
    assert angle is None or -90 <= angle < 90
    assert osd_quarter(page.path, deadline) in range(4)
    for upside_down in (False, True):
        turn = turn_from_ink(page, deadline, upside_down=upside_down)
        assert turn is None or isinstance(turn, Turn)

    ocr = app.extensions["extractor"].ocr
    reading = read_upright(lambda p: ocr.recognise(p, deadline), page, deadline)
    assert isinstance(reading, Reading)
    if min(width, height) < ROTATE_MIN_SIDE:
        assert reading.turn == Turn(), "a tiny page is read as it is"
    assert list(tmp_path.iterdir()) == [page.path], "a turned copy was left behind"


@pytest.mark.parametrize(("width", "height", "draw", "fmt"), CASES)
def test_extract_replies_normally(
    app: Flask, width: int, height: int, draw: Callable[..., Image.Image], fmt: str
) -> None:
    data = samples.encode_image(draw(width, height), fmt)
    reply = post_file(app.test_client(), data, f"page.{fmt.lower()}")
    assert reply.status_code == 200 or (400 <= reply.status_code < 500 and reply.is_json), (
        reply.status_code,
        reply.get_data(as_text=True)[:300],
    )
    if reply.status_code == 200 and min(width, height) < ROTATE_MIN_SIDE:
        assert all(cell["metadata"] == [] for cell in reply.get_json()["cells"])


@pytest.mark.parametrize(
    "reply", ["", "garbage without colons", "Rotate: ninety\nOrientation confidence: 5"]
)
def test_an_osd_reply_without_an_answer_keeps_the_page_as_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, reply: str
) -> None:
    """Replies real Tesseract does not give; the module must not trust it never will."""
    page = _page(tmp_path, 600, 800, _rules(6, across=False), "PNG")
    monkeypatch.setattr(orientation, "run_tesseract", lambda *args, **kwargs: reply)
    assert osd_quarter(page.path, time.monotonic() + DEADLINE_S) == 0

"""Decoding images and PDFs into pages: the pixel limit under threads, bounded PDF rendering."""

from __future__ import annotations

import io
import threading
import warnings
from pathlib import Path

import pytest
from PIL import Image

from extractor import media
from extractor.errors import PayloadTooLarge
from extractor.media import image_pages

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

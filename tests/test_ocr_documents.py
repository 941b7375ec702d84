"""OCR on what real documents hold (issue 67): table rules are not returned as words, coloured
ink on a PDF page is read, a PDF page is read at the resolution it was drawn at, and a page is
turned by quarters only when the turned reading is clearly better. Real Tesseract and the real
PDF renderer on small pages drawn here."""

from __future__ import annotations

import re
import time
from pathlib import Path

import pytest
from PIL import Image, ImageDraw

from extractor import samples
from extractor.media.images import PageImage, image_pages
from extractor.media.pdf import PdfPages
from extractor.ocr.orientation import Reading, Turn, keeps_turn
from extractor.ocr.tesseract import OcrOptions, TesseractEngine, rule_line, without_rules
from extractor.replies.importable import BoundingBox, Line, Word

RULE_ONLY = re.compile(r"[|¦‖_\-—=~\[\]!]+")
CELLS = [
    ["Name", "Colour", "Weight"],
    ["apple", "green", "150"],
    ["cherry", "red", "8"],
    ["plum", "purple", "70"],
]


@pytest.fixture(scope="module")
def engine() -> TesseractEngine:
    return TesseractEngine(OcrOptions())


def ruled_table(path: Path) -> Path:
    """A three-column table with a border and a rule between every row and column, and an
    underlined caption beneath it; 300 dpi."""
    image = Image.new("L", (1500, 900), 255)
    draw = ImageDraw.Draw(image)
    face = samples.font(42)
    left, top, width, height = 150, 120, 400, 110
    for row, cells in enumerate(CELLS):
        for column, text in enumerate(cells):
            draw.text(
                (left + column * width + 30, top + row * height + 30), text, font=face, fill=0
            )
    for row in range(len(CELLS) + 1):
        y = top + row * height
        draw.line([(left, y), (left + 3 * width, y)], fill=0, width=4)
    for column in range(4):
        x = left + column * width
        draw.line([(x, top), (x, top + len(CELLS) * height)], fill=0, width=4)
    caption_y = top + len(CELLS) * height + 80
    draw.text((left, caption_y), "Fruit weighed in grams", font=face, fill=0)
    draw.line([(left, caption_y + 60), (left + 520, caption_y + 60)], fill=0, width=3)
    image.save(path, dpi=(300, 300))
    return path


def test_table_rules_are_not_read_as_words(engine: TesseractEngine, tmp_path: Path) -> None:
    path = ruled_table(tmp_path / "table.png")
    with Image.open(path) as image:
        page = PageImage(0, path, image.width, image.height)
    lines = engine.recognise(page, time.monotonic() + 120)
    tokens = [w.text for line in lines for w in line.words]
    assert not [t for t in tokens if RULE_ONLY.fullmatch(t)], tokens
    assert not [t for t in tokens if "|" in t], tokens
    words = {t.lower() for t in tokens}
    assert {c.lower() for cells in CELLS for c in cells} <= words  # every cell beside a rule
    assert {"fruit", "weighed", "grams"} <= words  # and the underlined caption


@pytest.mark.parametrize(
    ("token", "kept"),
    [("|", ""), ("||", ""), ("__", ""), ("|Mazda", "Mazda"), ("4|", "4"), ("-", "-"),
     ("Name:", "Name:"), ("a|b", "a|b")],
)  # fmt: skip
def test_a_tokens_rules_are_taken_off_its_ends(token: str, kept: str) -> None:
    assert without_rules(token) == kept


def test_a_line_of_rule_strokes_is_dropped_and_a_line_of_dashes_is_not() -> None:
    box = BoundingBox(0, 0, 10, 10)
    assert rule_line([Word("—_——", box), Word("=-", box)])
    assert not rule_line([Word("-", box), Word("-", box)])  # empty cells of a table
    assert not rule_line([Word("—_—", box), Word("x1", box)])


def colour_pdf() -> bytes:
    """Two lines on white, in yellow and in process cyan, at 150 dpi: yellow is ~226 of 255
    in grey, where Tesseract found no text."""
    image = Image.new("RGB", (1240, 500), "white")
    draw = ImageDraw.Draw(image)
    face = samples.font(48)
    draw.text((100, 100), "Bright yellow lemons", font=face, fill=(255, 255, 0))
    draw.text((100, 260), "Deep cyan water", font=face, fill=(0, 174, 239))
    return samples.pdf([samples.TextPage(image, ())], dpi=150)


def test_coloured_ink_on_a_pdf_page_is_read(engine: TesseractEngine, tmp_path: Path) -> None:
    source = tmp_path / "colour.pdf"
    source.write_bytes(colour_pdf())
    pages = PdfPages(source, tmp_path, 300, 1)
    try:
        page = pages.render(0)
        with Image.open(page.path) as drawn:
            assert drawn.mode == "RGB"  # a page with colour stays in colour
        lines = engine.recognise(page, time.monotonic() + 120)
    finally:
        pages.close()
    words = {w.text.lower() for line in lines for w in line.words}
    assert {"yellow", "lemons", "cyan", "water"} <= words


def test_a_grey_pdf_page_is_drawn_grey_at_its_dpi(tmp_path: Path) -> None:
    source = tmp_path / "grey.pdf"
    source.write_bytes(samples.pdf([samples.text_page(["plain black text"])], dpi=150))
    pages = PdfPages(source, tmp_path, 300, 1)
    try:
        page = pages.render(0)
        with Image.open(page.path) as drawn:
            assert drawn.mode == "L"
    finally:
        pages.close()
    assert page.dpi == 300


def test_a_pdf_page_drawn_scaled_down_has_the_dpi_it_was_drawn_at(tmp_path: Path) -> None:
    source = tmp_path / "grey.pdf"
    source.write_bytes(samples.pdf([samples.text_page(["plain black text"])], dpi=150))
    pages = PdfPages(source, tmp_path, 300, 1, fit_pixels=2_000_000)
    try:
        page = pages.render(0)
    finally:
        pages.close()
    assert page.dpi is not None and 140 <= page.dpi < 300
    assert page.upload_size is not None and page.width < page.upload_size[0]


def reading(confidence: float, words: int, turn: Turn | None = None) -> Reading:
    line = Line(
        tuple(Word("word", BoundingBox(0, 0, 10, 10), confidence=confidence) for _ in range(words))
    )
    return Reading([line], turn or Turn())


def test_a_quarter_turn_is_kept_only_when_it_reads_clearly_better() -> None:
    upside_down = reading(40, 50)
    assert keeps_turn(upside_down, reading(93, 50, Turn(2)))
    # A chart turned on its ink's lines: more garbage words, each less sure.
    chart = reading(59, 15)
    assert not keeps_turn(chart, reading(39, 75, Turn(2)))
    # Surer but with fewer words, or more words but barely surer: not turned.
    assert not keeps_turn(reading(60, 40), reading(75, 10, Turn(1)))
    assert not keeps_turn(reading(60, 40), reading(65, 60, Turn(3)))


def test_setting_a_page_level_is_kept_unless_it_reads_clearly_worse() -> None:
    assert keeps_turn(reading(90, 40), reading(89, 38, Turn(0, 2.0)))
    assert not keeps_turn(reading(90, 40), reading(90, 30, Turn(0, 2.0)))


def test_an_image_copied_for_tesseract_keeps_its_declared_dpi(tmp_path: Path) -> None:
    source = tmp_path / "scan.jpg"
    Image.new("CMYK", (600, 400), (0, 0, 0, 0)).save(source, dpi=(300, 300))  # re-encoded
    screen = tmp_path / "screen.jpg"
    Image.new("CMYK", (600, 400), (0, 0, 0, 0)).save(screen, dpi=(72, 72))
    (page,) = image_pages(source, tmp_path, 1)
    (shot,) = image_pages(screen, tmp_path, 1)
    assert page.derived and page.dpi == 300
    assert shot.derived and shot.dpi is None  # a screen's 72 says nothing of the print

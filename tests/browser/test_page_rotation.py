"""A page scanned turned, dropped on the page at GET /: each box lands on its word in the image
as the browser shows it (the upload, not the page turned upright)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

from test_page import (  # noqa: F401  (fixtures used by name)
    box_geometry,
    browser,
    link_content,
    page,
    pytestmark,
    server,
    upload,
)

from extractor.samples import encode_image
from extractor.samples.prose import APACHE_DEFINITIONS, prose_page, turned

if TYPE_CHECKING:  # selenium itself only once test_page has checked it is installed
    from selenium.webdriver.chrome.webdriver import WebDriver


def test_boxes_land_on_the_words_of_a_page_uploaded_sideways(
    page: WebDriver,  # noqa: F811
    server: str,  # noqa: F811
    tmp_path: Path,
) -> None:
    from selenium.webdriver.common.by import By

    first_paragraph = APACHE_DEFINITIONS.split("\n")[0]
    upright, _truth = prose_page(first_paragraph, points=12)
    sideways = turned(upright, 90)  # scanned turned a quarter counterclockwise
    path = tmp_path / "sideways.png"
    path.write_bytes(encode_image(sideways.image, "PNG"))

    assert upload(page, path) == "done", page.find_element(By.ID, "status").text
    reply = json.loads(link_content(page, "download-json"))
    metadata = {m["key"]: m["value"] for m in reply["cells"][0]["metadata"]}
    assert metadata.keys() == {"rotation", "rotationConfidence"}
    assert metadata["rotation"] == "90"
    assert reply["pages"][0]["pageWidth"] == sideways.image.width  # the upload's own size
    img = page.find_element(By.CSS_SELECTOR, ".sheet img")
    natural = page.execute_script(
        "return [arguments[0].naturalWidth, arguments[0].naturalHeight]", img
    )
    assert natural == list(sideways.image.size)  # the browser shows the upload as it is

    tokens = {cell["line"]: cell["tokens"] for cell in reply["cells"]}
    boxes = box_geometry(page)
    assert boxes
    on_their_word = 0
    for box in boxes:
        scale = box["sheetWidth"] / sideways.image.width  # upload pixels -> CSS pixels
        text = tokens[box["line"]][box["token"]]
        tolerance = 6 * scale + 2  # Tesseract's box vs the ink box, plus rounding
        on_their_word += any(
            all(abs(box[edge] - getattr(word, edge) * scale) <= tolerance
                for edge in ("left", "top", "right", "bottom"))
            for word in sideways.words
            if word.text == text
        )  # fmt: skip
    assert on_their_word >= 0.9 * len(boxes), f"{on_their_word} of {len(boxes)} on their word"
    page.save_screenshot(str(tmp_path / "sideways-on-the-page.png"))

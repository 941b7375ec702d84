"""OCR through POST /extract with the real Tesseract: words, boxes, pages, every image format."""

from __future__ import annotations

from typing import Any

import pytest
from flask.testing import FlaskClient
from support import PAGE_ONE, PAGE_TWO, post_file, words_of

from extractor import samples


def overlap(a: tuple[int, int, int, int], b: tuple[int, int, int, int]) -> float:
    """Intersection over the smaller box's area."""
    width = min(a[2], b[2]) - max(a[0], b[0])
    height = min(a[3], b[3]) - max(a[1], b[1])
    if width <= 0 or height <= 0:
        return 0.0
    smaller = min((a[2] - a[0]) * (a[3] - a[1]), (b[2] - b[0]) * (b[3] - b[1]))
    return width * height / smaller


def boxes_by_word(reply: dict[str, Any]) -> dict[str, list[tuple[int, int, int, int, int]]]:
    """Each token's boxes as (page, left, top, right, bottom), from the labels."""
    found: dict[str, list[tuple[int, int, int, int, int]]] = {}
    for label in reply["labels"]:
        cell = reply["cells"][label["startCellLine"]]
        token = cell["tokens"][label["startTokenIndex"]].strip(".,").casefold()
        found.setdefault(token, []).append(
            (label["pageIndex"], label["x0"], label["y0"], label["x2"], label["y2"])
        )
    return found


def assert_boxes_where_drawn(
    reply: dict[str, Any], drawn: tuple[samples.DrawnWord, ...], scale: float = 1.0
) -> None:
    found = boxes_by_word(reply)
    for word in drawn:
        candidates = found.get(word.text.casefold(), [])
        assert candidates, f"{word.text!r} did not come back"
        ink = tuple(round(v * scale) for v in (word.left, word.top, word.right, word.bottom))
        best = max(overlap(ink, box[1:]) for box in candidates if box[0] == word.page)
        assert best > 0.7, f"{word.text!r} box is not where it was drawn: {candidates} vs {ink}"


def test_words_come_back_with_boxes_where_drawn(
    client: FlaskClient, page_one: samples.TextPage, validator: Any
) -> None:
    reply = post_file(client, samples.encode_image(page_one.image, "PNG"), "invoice.png")
    assert reply.status_code == 200
    assert reply.mimetype == "application/json"
    body = reply.get_json()
    validator.validate(body)
    assert body["type"] == "BOUNDING_BOX"
    assert body["name"] == "invoice.png"
    assert [c["content"] for c in body["cells"]] == PAGE_ONE
    assert body["pages"] == [{"pageIndex": 0, "pageWidth": 1240, "pageHeight": 1754}]
    assert_boxes_where_drawn(body, page_one.words)


def test_labels_follow_the_published_example(
    client: FlaskClient, page_one: samples.TextPage
) -> None:
    body = post_file(client, samples.encode_image(page_one.image, "PNG")).get_json()
    assert len(body["labels"]) == sum(len(c["tokens"]) for c in body["cells"])
    for label in body["labels"]:
        cell = body["cells"][label["startCellLine"]]
        token = cell["tokens"][label["startTokenIndex"]]
        assert cell["index"] == 0 and cell["metadata"] == []
        assert cell["content"] == " ".join(cell["tokens"])
        assert label["startCellLine"] == label["endCellLine"]
        assert label["startTokenIndex"] == label["endTokenIndex"]
        assert label["startCharIndex"] == 0
        assert label["endCharIndex"] == len(token) - 1  # inclusive
        assert (label["layer"], label["counter"], label["nodeCount"]) == (0, 0, 4)
        # clockwise from the top-left
        assert label["x0"] == label["x3"] < label["x1"] == label["x2"]
        assert label["y0"] == label["y1"] < label["y2"] == label["y3"]


def test_text_plain_has_one_line_per_text_line(
    client: FlaskClient, page_one: samples.TextPage
) -> None:
    reply = post_file(client, samples.encode_image(page_one.image, "PNG"), accept="text/plain")
    assert reply.status_code == 200
    assert reply.headers["Content-Type"] == "text/plain; charset=utf-8"
    assert reply.get_data(as_text=True) == "\n".join(PAGE_ONE) + "\n"


def test_multipage_tiff_gives_one_page_per_frame(
    client: FlaskClient, page_one: samples.TextPage, page_two: samples.TextPage, validator: Any
) -> None:
    body = post_file(client, samples.multipage_tiff([page_one, page_two]), "scan.tiff").get_json()
    validator.validate(body)
    assert [p["pageIndex"] for p in body["pages"]] == [0, 1]
    assert [c["content"] for c in body["cells"]] == PAGE_ONE + PAGE_TWO
    assert [c["line"] for c in body["cells"]] == [0, 1, 2, 3]  # counted over the whole document
    assert {label["pageIndex"] for label in body["labels"]} == {0, 1}
    assert_boxes_where_drawn(body, page_one.words + page_two.words)


def test_pdf_pages_are_rendered_and_read_in_order(
    make_app: Any, page_one: samples.TextPage, page_two: samples.TextPage, validator: Any
) -> None:
    client = make_app(pdf_dpi=300).test_client()
    body = post_file(client, samples.pdf([page_one, page_two], dpi=150), "doc.pdf").get_json()
    validator.validate(body)
    # 150 dpi pages rendered at 300 dpi: twice the pixels (PDFium may round up one), boxes alike.
    assert [p["pageIndex"] for p in body["pages"]] == [0, 1]
    for page in body["pages"]:
        assert abs(page["pageWidth"] - 2480) <= 1 and abs(page["pageHeight"] - 3508) <= 1
    assert [c["content"] for c in body["cells"]] == PAGE_ONE + PAGE_TWO
    assert_boxes_where_drawn(body, page_one.words + page_two.words, scale=2.0)


@pytest.mark.parametrize("fmt", ["JPEG", "BMP", "GIF", "WEBP", "TIFF"])
def test_every_image_format_is_read(
    client: FlaskClient, page_one: samples.TextPage, fmt: str
) -> None:
    data = samples.encode_image(page_one.image.convert("RGB"), fmt)
    body = post_file(client, data, "no-extension").get_json()
    assert words_of(" ".join(c["content"] for c in body["cells"])) >= words_of(PAGE_ONE[0])


def test_kind_comes_from_bytes_not_name_or_part_type(
    client: FlaskClient, page_one: samples.TextPage
) -> None:
    import io

    reply = client.post(
        "/extract",
        data={
            "upload": (
                io.BytesIO(samples.encode_image(page_one.image, "PNG")),
                "song.mp3",
                "audio/mpeg",
            )
        },
        headers={"Accept": "text/plain"},
    )
    assert reply.status_code == 200
    assert reply.get_data(as_text=True).startswith(PAGE_ONE[0])


def test_rgba_and_palette_images(client: FlaskClient, page_one: samples.TextPage) -> None:
    for mode in ("RGBA", "P", "1"):
        data = samples.encode_image(page_one.image.convert(mode), "PNG")
        text = post_file(client, data, accept="text/plain").get_data(as_text=True)
        assert "Harbor" in text, mode


def test_blank_image_has_no_cells(client: FlaskClient, validator: Any) -> None:
    from PIL import Image

    body = post_file(
        client, samples.encode_image(Image.new("L", (400, 300), 255), "PNG")
    ).get_json()
    validator.validate(body)
    assert body["cells"] == [] and body["labels"] == []
    assert body["pages"] == [{"pageIndex": 0, "pageWidth": 400, "pageHeight": 300}]


def test_more_languages_are_one_setting_away(make_app: Any) -> None:
    import pytesseract
    from support import have

    if "deu" not in pytesseract.get_languages(config=""):
        pytest.skip("tesseract-ocr-deu is not installed")
    page = samples.text_page(["Größe Straße Übung"], font_size=48)
    client = make_app(ocr_languages="deu").test_client()
    text = post_file(client, samples.encode_image(page.image, "PNG"), accept="text/plain")
    assert "Straße" in text.get_data(as_text=True)
    assert have("tesseract")

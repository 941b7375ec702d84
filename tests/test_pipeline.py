"""The one request path: reply names, per-request OCR languages, and the CLI without the web.

Requests go through the real app and the real Tesseract; the CLI runs as a real process.
"""

from __future__ import annotations

import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from flask import Flask
from flask.testing import FlaskClient
from support import PAGE_ONE, post_file

from extractor import samples
from extractor.errors import InvalidParameter
from extractor.pipeline.reply import UPLOAD_NAME, reply_name
from extractor.pipeline.request import parse_ocr_languages
from extractor.web.openapi import load_openapi

GERMAN = ["Grüße aus München über große Straßen", "Äpfel schmecken süß"]
INSTALLED = frozenset({"eng", "deu", "fra", "osd"})


@pytest.fixture(scope="module")
def png() -> bytes:
    return samples.encode_image(samples.text_page(PAGE_ONE, size=(1240, 400)).image, "PNG")


@pytest.fixture(scope="module")
def german_png() -> bytes:
    return samples.encode_image(samples.text_page(GERMAN, size=(1240, 400)).image, "PNG")


# -- the reply's name is the upload's base name --------------------------------------------


@pytest.mark.parametrize(
    ("sent", "name"),
    [
        ("scan.png", "scan.png"),
        ("../../etc/passwd.png", "passwd.png"),
        ("/abs/dir/page.png", "page.png"),
        ("C:\\Users\\me\\scan.png", "scan.png"),
        ("..\\..\\windows\\win.ini", "win.ini"),
        ("mixed/dirs\\both.png", "both.png"),
        ("C:relative.png", "relative.png"),
        ("", UPLOAD_NAME),
        (None, UPLOAD_NAME),
        ("../", UPLOAD_NAME),
        ("dir/..", UPLOAD_NAME),
        ("  ", UPLOAD_NAME),
    ],
)
def test_reply_name_is_the_base_name(sent: str | None, name: str) -> None:
    assert reply_name(sent) == name


@pytest.mark.parametrize(
    ("sent", "name"), [("../../etc/passwd.png", "passwd.png"), ("scans/..", "upload")]
)
def test_extract_answers_with_the_base_name(
    client: FlaskClient, png: bytes, sent: str, name: str
) -> None:
    reply = post_file(client, png, sent, accept="application/json")
    assert reply.status_code == 200
    assert reply.get_json()["name"] == name


# -- ?ocr_languages= ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (None, None),
        ("", None),
        ("deu", "deu"),
        ("deu+eng", "deu+eng"),
        ("eng+eng", "eng"),
        ("deu eng", "deu+eng"),
    ],
)
def test_ocr_languages_accepted(value: str | None, expected: str | None) -> None:
    assert parse_ocr_languages(value, INSTALLED, 3) == expected


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("deu+xyz+abc", "not installed: xyz, abc"),
        ("eng+deu+fra+osd", "names 4 languages; the limit is 3"),
        ("../eng", "Tesseract codes"),
        ("eng+", "Tesseract codes"),
        ("e", "Tesseract codes"),
        ("x" * 33, "Tesseract codes"),
        ("eng,deu", "Tesseract codes"),
        ("+".join(["eng"] * 10_000), "names 10000 languages"),  # counted before anything else
    ],
)
def test_ocr_languages_refused(value: str, message: str) -> None:
    with pytest.raises(InvalidParameter, match=message.replace("+", r"\+")):
        parse_ocr_languages(value, INSTALLED, 3)


def test_ocr_languages_choose_what_tesseract_reads(client: FlaskClient, german_png: bytes) -> None:
    """English data misreads umlauts and ß; asking for German per request reads them."""
    default = post_file(client, german_png, "de.png", accept="text/plain")
    german = post_file(
        client, german_png, "de.png", accept="text/plain", query="?ocr_languages=deu+eng"
    )
    assert default.status_code == german.status_code == 200
    assert "Grüße" not in default.get_data(as_text=True)
    assert german.get_data(as_text=True).split() == " ".join(GERMAN).split()


def test_missing_ocr_language_is_a_400_naming_it(client: FlaskClient, png: bytes) -> None:
    reply = post_file(client, png, "scan.png", query="?ocr_languages=eng+klingon")
    assert reply.status_code == 400
    error = reply.get_json()["error"]
    assert error["code"] == "invalid_parameter"
    assert "not installed: klingon" in error["message"]


def test_ocr_language_count_is_bounded_by_the_setting(
    make_app: Callable[..., Flask], png: bytes
) -> None:
    client = make_app(max_ocr_languages=1).test_client()
    reply = post_file(client, png, "scan.png", query="?ocr_languages=deu+eng")
    assert reply.status_code == 400
    assert "the limit is 1" in reply.get_json()["error"]["message"]


def test_readiness_lists_the_installed_ocr_languages_and_the_rotation_default(
    make_app: Callable[..., Flask],
) -> None:
    app: Flask = make_app()
    app.extensions["extractor"].load()
    ready = app.test_client().get("/readyz").get_json()
    installed = ready["tesseract"]["installed_languages"]
    assert {"eng", "deu"} <= set(installed)
    assert installed == sorted(installed)
    assert ready["tesseract"]["rotate"] is True  # ?ocr_rotate='s default, for the page


# -- the CLI takes the same path without the web layer ---------------------------------------


def test_cli_extract_takes_the_pipeline_without_importing_the_web_layer(
    tmp_path: Path, png: bytes
) -> None:
    image = tmp_path / "scan.png"
    image.write_bytes(png)
    script = (
        "import sys\n"
        "from extractor.cli import main\n"
        f"code = main(['extract', {str(image)!r}, '--format', 'tsv', '--tmp-dir', {str(tmp_path)!r}])\n"
        "web = sorted(m for m in sys.modules if m == 'flask' or m.startswith(('flask.', 'werkzeug', 'extractor.web.views', 'extractor.web.app')))\n"
        "print('WEB', web, file=sys.stderr)\n"
        "sys.exit(code)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr
    assert "WEB []" in done.stderr
    assert done.stdout.startswith("level\tpage_num\t")
    assert "Invoice" in done.stdout
    assert sorted(p.name for p in tmp_path.iterdir()) == ["scan.png"]  # its workspace is gone


@pytest.mark.parametrize(
    "value", ["deu", "deu+eng", "deu eng", "chi_sim+eng", "../eng", "eng+", "e"]
)
def test_openapi_pattern_for_ocr_languages_agrees_with_the_parser(value: str) -> None:
    (param,) = [
        p
        for p in load_openapi()["paths"]["/extract"]["post"]["parameters"]
        if p.get("name") == "ocr_languages"
    ]
    documented = re.search(param["schema"]["pattern"], value) is not None
    try:
        parse_ocr_languages(value, INSTALLED | {"chi_sim"}, 3)
        parsed = True
    except InvalidParameter:
        parsed = False
    assert documented == parsed

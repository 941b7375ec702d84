"""The page's options for images and its subtitle downloads, in headless Chromium against a real
server: the OCR languages offered are those installed on the server, a choice of languages and
the rotation switch go out as ``ocr_languages`` and ``ocr_rotate``, and audio's VTT and SRT
buttons save the server's own ``format=vtt`` and ``format=srt`` replies.

Where the page claims something about a reply, the test asks the server for the same thing and
compares; it never judges words Whisper or Tesseract read.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import httpx
import pytest
from selenium.webdriver.chrome.webdriver import WebDriver
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import WebDriverWait
from test_page import (  # noqa: F401  (fixtures used by name)
    FIRST_SPEAKER,
    WAIT_S,
    ask_server,
    assert_only_local_requests,
    browser,
    link_content,
    page,
    pytestmark,
    requests_made,
    server,
    upload,
)

from extractor.samples import encode_image, speech
from extractor.samples.prose import APACHE_DEFINITIONS, prose_page, turned


def readiness(url: str) -> dict[str, Any]:
    tesseract = httpx.get(f"{url}/readyz", timeout=WAIT_S).json()["tesseract"]
    assert isinstance(tesseract, dict), tesseract
    return tesseract


def offered_languages(driver: WebDriver) -> list[tuple[str, bool]]:
    """The page's language checkboxes once it has loaded them: (code, checked), in order."""
    boxes = WebDriverWait(driver, WAIT_S).until(
        lambda d: d.find_elements(By.CSS_SELECTOR, "#opt-ocr-languages input[type=checkbox]")
    )
    return [(str(box.get_attribute("value")), box.is_selected()) for box in boxes]


def extract_queries(driver: WebDriver) -> list[dict[str, list[str]]]:
    """The query of every request the page sent to /extract since the log was last read."""
    return [parse_qs(urlsplit(url).query) for url in requests_made(driver) if "/extract" in url]


def saved_download(folder: Path, name: str) -> str:
    """The text of the file Chromium saved as ``name``, once it is complete."""
    path = folder / name

    def complete() -> bool:
        # Chromium writes into a ``.crdownload`` file and renames it when the last byte is in.
        return path.exists() and not any(folder.glob("*.crdownload"))

    deadline = time.monotonic() + WAIT_S  # a bound on a busy machine, not an expectation
    while not complete() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert complete(), sorted(p.name for p in folder.iterdir())
    return path.read_text(encoding="utf-8")


@pytest.fixture
def downloads(page: WebDriver, tmp_path: Path) -> Path:  # noqa: F811
    """A folder Chromium saves this test's downloads into, without asking."""
    folder = tmp_path / "downloads"
    folder.mkdir()
    page.execute_cdp_cmd(
        "Browser.setDownloadBehavior", {"behavior": "allow", "downloadPath": str(folder)}
    )
    return folder


def test_the_languages_offered_are_those_installed_on_the_server(
    page: WebDriver,  # noqa: F811
    server: str,  # noqa: F811
) -> None:
    tesseract = readiness(server)
    offered = offered_languages(page)
    # osd tells a page's orientation and script; it reads no text, so the page leaves it out.
    installed = [code for code in tesseract["installed_languages"] if code != "osd"]
    assert sorted(code for code, _checked in offered) == installed
    configured = tesseract["languages"]
    assert [code for code, checked in offered if checked] == configured
    assert page.find_element(By.ID, "opt-rotate").is_selected() is tesseract["rotate"]


def test_chosen_languages_and_the_rotation_switch_go_out_with_the_upload(
    page: WebDriver,  # noqa: F811
    server: str,  # noqa: F811
    tmp_path: Path,
) -> None:
    offered = offered_languages(page)
    chosen = [code for code, checked in offered if checked]
    extra = next(code for code, checked in offered if not checked)  # deu, fra, ...
    page.find_element(By.CSS_SELECTOR, f"#opt-ocr-languages input[value={extra}]").click()
    page.find_element(By.ID, "opt-rotate").click()  # off: the server's default is on
    upright, _truth = prose_page(APACHE_DEFINITIONS.split("\n")[0], points=12)
    path = tmp_path / "sideways.png"
    path.write_bytes(encode_image(turned(upright, 90).image, "PNG"))

    assert upload(page, path) == "done", page.find_element(By.ID, "status").text
    languages = "+".join([*chosen, extra])
    sent = extract_queries(page)
    assert sent == [{"ocr_languages": [languages], "ocr_rotate": ["off"]}]
    reply = json.loads(link_content(page, "download-json"))
    asked = f"?ocr_languages={languages.replace('+', '%2B')}&ocr_rotate=off"
    assert reply == ask_server(server, path, "application/json", asked).json()
    assert not any(m["key"] == "rotation" for c in reply["cells"] for m in c["metadata"])
    assert_only_local_requests(page, server)


def test_the_default_choices_send_no_options(
    page: WebDriver,  # noqa: F811
    server: str,  # noqa: F811
    tmp_path: Path,
) -> None:
    offered_languages(page)  # loaded: the page knows the server's defaults
    path = tmp_path / "sideways.png"
    upright, _truth = prose_page(APACHE_DEFINITIONS.split("\n")[0], points=12)
    path.write_bytes(encode_image(turned(upright, 90).image, "PNG"))
    assert upload(page, path) == "done", page.find_element(By.ID, "status").text
    assert extract_queries(page) == [{}]


def test_subtitles_of_a_job_are_the_servers_vtt_and_srt_of_the_result_shown(
    page: WebDriver,  # noqa: F811
    server: str,  # noqa: F811
    tmp_path: Path,
    downloads: Path,
) -> None:
    path = tmp_path / "greeting.wav"
    path.write_bytes(speech(FIRST_SPEAKER))
    page.find_element(By.ID, "opt-async").click()
    assert upload(page, path) == "done", page.find_element(By.ID, "status").text
    assert not page.find_element(By.ID, "download-pdf").is_displayed()
    results = [url for url in requests_made(page) if url.endswith("/result")]
    assert len(results) == 1  # the job whose Document the page shows

    for fmt in ("vtt", "srt"):
        page.find_element(By.ID, f"download-{fmt}").click()
        saved = saved_download(downloads, f"greeting.{fmt}")
        server_reply = httpx.get(f"{results[0]}?format={fmt}", timeout=WAIT_S)
        assert server_reply.status_code == 200
        assert saved == server_reply.text
        WebDriverWait(page, WAIT_S).until(
            lambda d, fmt=fmt: (
                f"{fmt.upper()} subtitles saved" in d.find_element(By.ID, "status").text
            )
        )
    assert_only_local_requests(page, server)


def test_subtitles_of_an_upload_are_asked_of_the_server_with_its_options(
    page: WebDriver,  # noqa: F811
    server: str,  # noqa: F811
    tmp_path: Path,
    downloads: Path,
) -> None:
    path = tmp_path / "greeting.wav"
    path.write_bytes(speech(FIRST_SPEAKER))
    page.find_element(By.ID, "opt-language").send_keys("en")
    assert upload(page, path) == "done", page.find_element(By.ID, "status").text
    assert extract_queries(page) == [{"language": ["en"]}]

    # Read again by Whisper: one upload gives one transcript on one machine (docs/accuracy.md),
    # so the saved files are the server's own replies to the same file and options.
    page.find_element(By.ID, "download-vtt").click()
    vtt = saved_download(downloads, "greeting.vtt")
    page.find_element(By.ID, "download-srt").click()
    srt = saved_download(downloads, "greeting.srt")
    assert extract_queries(page) == [
        {"language": ["en"], "format": ["vtt"]},
        {"language": ["en"], "format": ["srt"]},
    ]
    assert vtt.startswith("WEBVTT\n") and " --> " in vtt
    assert srt.startswith("1\n") and " --> " in srt
    for fmt, saved in (("vtt", vtt), ("srt", srt)):
        reply = httpx.post(
            f"{server}/extract",
            params={"language": "en", "format": fmt},
            files={"upload": ("greeting.wav", path.read_bytes(), "audio/wav")},
            timeout=WAIT_S,
        )
        assert reply.status_code == 200, reply.text
        assert saved == reply.text, fmt


def test_more_languages_than_the_server_allows_are_explained(
    page: WebDriver,  # noqa: F811
    tmp_path: Path,
) -> None:
    offered = offered_languages(page)
    if len(offered) <= 3:  # EXTRACTOR_MAX_OCR_LANGUAGES' default
        pytest.skip(f"needs more than 3 Tesseract languages installed, not {len(offered)}")
    for code, checked in offered:
        if not checked:
            page.find_element(By.CSS_SELECTOR, f"#opt-ocr-languages input[value={code}]").click()
    upright, _truth = prose_page(APACHE_DEFINITIONS.split("\n")[0], points=12)
    path = tmp_path / "upright.png"
    path.write_bytes(encode_image(upright.image, "PNG"))
    assert upload(page, path) == "error"
    error = page.find_element(By.ID, "error").text
    assert "ocr_languages" in error and "invalid_parameter" in error, error

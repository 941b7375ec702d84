"""The page's "tell voices apart" option sends speakers=auto and shows each line's speaker."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from test_page import (  # noqa: F401  (fixtures used by name)
    assert_only_local_requests,
    browser,
    link_content,
    page,
    pytestmark,
    requests_made,
    server,
    upload,
)

from extractor.asr.speakers import speakers_available
from extractor.samples.conversations import VOICES, conversation

pytestmark = [
    *pytestmark,
    pytest.mark.skipif(not speakers_available(), reason="needs the extractor[speakers] extra"),
]

from selenium.webdriver.chrome.webdriver import WebDriver  # noqa: E402
from selenium.webdriver.common.by import By  # noqa: E402


def test_tell_voices_apart_labels_the_lines_of_a_mono_talk(
    page: WebDriver,  # noqa: F811
    server: str,  # noqa: F811
    tmp_path: Path,
) -> None:
    path = tmp_path / "talk.wav"
    path.write_bytes(conversation(VOICES[:2], turns=4, seed=2).wav())
    page.find_element(By.ID, "opt-speakers-auto").click()

    assert upload(page, path) == "done", page.find_element(By.ID, "status").text
    reply = json.loads(link_content(page, "download-json"))
    speakers = [{m["key"]: m["value"] for m in c["metadata"]}["speaker"] for c in reply["cells"]]
    assert speakers[0] == "Speaker 1" and set(speakers) == {"Speaker 1", "Speaker 2"}
    lines = page.find_elements(By.CSS_SELECTOR, ".timed-line")
    assert len(lines) == len(speakers)
    for line, speaker, cell in zip(lines, speakers, reply["cells"], strict=True):
        assert line.text.endswith(f"{speaker}: {cell['content']}")
    assert_only_local_requests(page, server)


def test_how_many_speakers_goes_with_the_upload_and_a_bad_one_shows_the_servers_message(
    page: WebDriver,  # noqa: F811
    server: str,  # noqa: F811
    tmp_path: Path,
) -> None:
    path = tmp_path / "talk.wav"
    path.write_bytes(conversation(VOICES, turns=4, seed=2).wav())
    count = page.find_element(By.ID, "opt-speaker-count")
    count.send_keys("0")  # not a count: the server's 400 is shown, nothing is guessed
    assert upload(page, path) == "error"
    assert "num_speakers" in page.find_element(By.ID, "error").text
    assert any("num_speakers=0" in url for url in requests_made(page))

    count.clear()
    count.send_keys("1-2")  # a range: min_speakers and max_speakers, speaker labels on
    assert upload(page, path) == "done", page.find_element(By.ID, "status").text
    assert any("min_speakers=1&max_speakers=2&speakers=auto" in u for u in requests_made(page))
    reply = json.loads(link_content(page, "download-json"))
    speakers = {{m["key"]: m["value"] for m in c["metadata"]}["speaker"] for c in reply["cells"]}
    assert speakers == {"Speaker 1", "Speaker 2"}  # three voices, at most two labels
    assert_only_local_requests(page, server)

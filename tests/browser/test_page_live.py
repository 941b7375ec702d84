"""The page's microphone button in headless Chromium, its fake microphone fed from a file of
real speech (--use-file-for-fake-audio-capture): words appear as they are spoken."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import numpy as np
import pytest
from selenium.webdriver.chrome.webdriver import WebDriver
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import WebDriverWait
from support import ALIKE, likeness, transcript_words
from test_page import pytestmark, server, start_chromium  # noqa: F401  (fixtures used by name)

from extractor import samples

# A sentence tiny.en streams alike whenever the decodes fall (heard at 24 phases in-process);
# its words are still held only to what the server's /extract hears in the same speech.
SPOKEN = "We will meet at the station at nine tomorrow morning."


@pytest.fixture(scope="module")
def browser(tmp_path_factory: pytest.TempPathFactory) -> Iterator[WebDriver]:
    folder = tmp_path_factory.mktemp("live")
    speech, rate = samples.decode_wav(samples.speech_wav(SPOKEN))
    pause = np.zeros((1, rate), np.float32)
    microphone = folder / "microphone.wav"  # played in a loop: speech, then a pause
    microphone.write_bytes(
        samples.encode_audio(np.concatenate([pause, speech[:1], pause, pause], axis=1), rate, "wav")
    )
    driver = start_chromium(
        folder / "profile",
        "--use-fake-ui-for-media-stream", "--use-fake-device-for-media-stream",
        f"--use-file-for-fake-audio-capture={microphone}",
    )  # fmt: skip
    try:
        yield driver
    finally:
        driver.quit()


def test_the_microphone_button_shows_words_as_they_are_spoken(
    browser: WebDriver,
    server: str,  # noqa: F811
) -> None:
    browser.get(server + "/")
    browser.get_log("browser")
    # Every text the turns' revisable tails (greyed, after the words sent) show.
    browser.execute_script(
        """window.tails = [];
        new MutationObserver(() => {
          for (const tail of document.querySelectorAll("#live-text .tentative")) {
            if (tail.textContent) window.tails.push(tail.textContent);
          }
        }).observe(document.getElementById("live-text"),
                   {subtree: true, childList: true, characterData: true});"""
    )
    button = browser.find_element(By.ID, "live")
    button.click()
    WebDriverWait(browser, 30).until(
        lambda _d: button.get_attribute("aria-pressed") == "true",
        message=browser.find_element(By.ID, "status").text,
    )

    def words(driver: WebDriver) -> list[str]:
        return transcript_words(driver.find_element(By.ID, "live-text").text)

    WebDriverWait(browser, 90).until(lambda d: len(words(d)) >= 2)
    # The words come as deltas while the turn is open; it completes once the speaker has paused
    # (server VAD, 500 ms of silence, then the end's decode): wait for that rather than race it.
    WebDriverWait(browser, 90).until(  # sized for a loaded machine: the decode may lag
        lambda d: d.find_elements(By.CSS_SELECTOR, "#live-text .live-turn.done"),
        message="no turn was completed",
    )
    # The same speech as a file, the engine alone: what the turn's words are held to.
    alone = transcript_words(
        httpx.post(
            server + "/extract",
            files={"upload": ("speech.wav", samples.speech_wav(SPOKEN), "audio/wav")},
            headers={"Accept": "text/plain"},
            timeout=300,
        ).text
    )
    tails = browser.execute_script("return window.tails")
    assert any(set(transcript_words(t)) & set(alone) for t in tails), (tails, alone)
    # A completed turn shows its transcript alone, no tail.
    done = browser.find_element(By.CSS_SELECTOR, "#live-text .live-turn.done")
    assert not done.find_elements(By.CSS_SELECTOR, ".tentative")
    assert likeness(done.text, alone) >= ALIKE, (done.text, alone)
    button.click()
    assert button.get_attribute("aria-pressed") == "false"
    errors = [e["message"] for e in browser.get_log("browser") if e["level"] == "SEVERE"]
    assert errors == []

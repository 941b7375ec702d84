"""The page's microphone button in headless Chromium, its fake microphone fed from a file of
real speech (--use-file-for-fake-audio-capture): words appear as they are spoken."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pytest
from selenium.webdriver.chrome.webdriver import WebDriver
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import WebDriverWait
from test_page import pytestmark, server, start_chromium  # noqa: F401  (fixtures used by name)

from extractor import samples

# A sentence tiny.en streams the same way whenever the decodes fall: heard at 24 phases in-process,
# "meet", "station" and "tomorrow morning" came out right at all of them, where "The quick brown
# fox jumps over the lazy dog." came out as "roundfire"/"round arc" at 23 and, once in a browser,
# "stump sober" for "jumps over" (the test failed on what the decoder may mishear).
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


@pytest.mark.serial  # live speech ends its turn in real time: run alone (make test's second pass)
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

    def words(driver: WebDriver) -> set[str]:
        text = driver.find_element(By.ID, "live-text").text.lower()
        return {w.strip(".,!?") for w in text.split()}

    WebDriverWait(browser, 90).until(lambda d: {"meet", "station"} <= words(d))
    # The words come as deltas while the turn is open; it completes once the speaker has paused
    # (server VAD, 500 ms of silence, then the end's decode): wait for that rather than race it.
    WebDriverWait(browser, 30).until(
        lambda d: d.find_elements(By.CSS_SELECTOR, "#live-text .live-turn.done"),
        message="no turn was completed",
    )
    tails = browser.execute_script("return window.tails")
    assert any({"meet", "station", "tomorrow"} & {w.strip(".,!?") for w in t.lower().split()}
               for t in tails), tails  # fmt: skip
    # A completed turn shows its transcript alone, no tail.
    done = browser.find_element(By.CSS_SELECTOR, "#live-text .live-turn.done")
    assert not done.find_elements(By.CSS_SELECTOR, ".tentative")
    assert {"meet", "station"} <= {w.strip(".,!?") for w in done.text.lower().split()}, done.text
    button.click()
    assert button.get_attribute("aria-pressed") == "false"
    errors = [e["message"] for e in browser.get_log("browser") if e["level"] == "SEVERE"]
    assert errors == []

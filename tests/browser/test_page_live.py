"""The page's microphone button in headless Chromium, its fake microphone fed from a file of
real speech (--use-file-for-fake-audio-capture): words appear as they are spoken."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import support

from extractor import samples

CHROMIUM = Path("/usr/bin/chromium")
CHROMEDRIVER = Path("/usr/bin/chromedriver")
SPOKEN = "The quick brown fox jumps over the lazy dog."

pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(
        not (CHROMIUM.exists() and CHROMEDRIVER.exists()),
        reason="headless Chromium is not installed: needs /usr/bin/chromium and "
        "/usr/bin/chromedriver (Debian packages chromium and chromium-driver)",
    ),
]
webdriver = pytest.importorskip("selenium.webdriver", reason="selenium is not installed")

from selenium.webdriver.chrome.webdriver import WebDriver  # noqa: E402
from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.support.ui import WebDriverWait  # noqa: E402


@pytest.fixture(scope="module")
def server() -> Iterator[str]:
    url, process = support.start_server("--workers", "1", env={"EXTRACTOR_SECRET": ""})
    try:
        yield url
    finally:
        support.stop_server(process)


@pytest.fixture(scope="module")
def browser(tmp_path_factory: pytest.TempPathFactory) -> Iterator[WebDriver]:
    from selenium.webdriver.chrome.service import Service

    folder = tmp_path_factory.mktemp("live")
    speech, rate = samples.decode_wav(samples.speech_wav(SPOKEN))
    pause = np.zeros((1, rate), np.float32)
    microphone = folder / "microphone.wav"  # played in a loop: speech, then a pause
    microphone.write_bytes(
        samples.encode_audio(np.concatenate([pause, speech[:1], pause, pause], axis=1), rate, "wav")
    )
    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM)
    for arg in (
        "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
        "--disable-background-networking", "--disable-component-update", "--disable-sync",
        "--no-first-run", "--disable-quic", "--disable-default-apps", "--mute-audio",
        "--use-fake-ui-for-media-stream", "--use-fake-device-for-media-stream",
        f"--use-file-for-fake-audio-capture={microphone}",
        "--autoplay-policy=no-user-gesture-required",
        f"--user-data-dir={folder / 'profile'}", "--window-size=1280,800",
    ):  # fmt: skip
        options.add_argument(arg)
    with pytest.MonkeyPatch.context() as env:
        env.setenv("SE_OFFLINE", "true")
        driver = webdriver.Chrome(options=options, service=Service(str(CHROMEDRIVER)))
    try:
        yield driver
    finally:
        driver.quit()


def test_the_microphone_button_shows_words_as_they_are_spoken(
    browser: WebDriver, server: str
) -> None:
    browser.get(server + "/")
    browser.get_log("browser")
    button = browser.find_element(By.ID, "live")
    button.click()
    WebDriverWait(browser, 30).until(
        lambda _d: button.get_attribute("aria-pressed") == "true",
        message=browser.find_element(By.ID, "status").text,
    )

    def words(driver: WebDriver) -> set[str]:
        text = driver.find_element(By.ID, "live-text").text.lower()
        return {w.strip(".,!?") for w in text.split()}

    WebDriverWait(browser, 90).until(lambda d: {"quick", "over"} <= words(d))
    completed = browser.find_elements(By.CSS_SELECTOR, "#live-text .live-turn.done")
    assert completed, "a turn was completed"
    button.click()
    assert button.get_attribute("aria-pressed") == "false"
    errors = [e["message"] for e in browser.get_log("browser") if e["level"] == "SEVERE"]
    assert errors == []

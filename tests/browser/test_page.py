"""The page at GET /, in headless Chromium against a real server: boxes on words, text, audio.

Everything goes through the same doors a person uses: the file input, the buttons, the links.
Where the page claims something about the server's reply (box count, JSON, text), the test asks
the server itself for the same file and compares.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import support

from extractor import samples

CHROMIUM = Path("/usr/bin/chromium")
CHROMEDRIVER = Path("/usr/bin/chromedriver")
WAIT_S = 120  # upper bound for one extraction on a busy 2-core machine, not an expectation

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
from selenium.webdriver.common.action_chains import ActionChains  # noqa: E402
from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.support.ui import WebDriverWait  # noqa: E402

PAGE_LINES = ["Invoice number 4417 for garden tools", "Delivered to Harbor Street warehouse"]
PDF_PAGES = [["Quarterly report draft"], ["Second page mentions purple elephants"]]
FIRST_SPEAKER = "Good morning, how are you today?"
SECOND_SPEAKER = "I am fine, thank you very much."


# -- fixtures ------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def server() -> Iterator[str]:
    """The real thing: ``extractor serve`` under gunicorn on a free loopback port."""
    # A secret in the developer's environment would turn every upload into a 401 here.
    url, process = support.start_server("--workers", "1", env={"EXTRACTOR_SECRET": ""})
    try:
        yield url
    finally:
        support.stop_server(process)


def start_chromium(profile: Path, *extra: str, log_requests: bool = False) -> WebDriver:
    """Headless Chromium from Debian, driven by its own chromedriver; nothing is downloaded.
    ``extra`` arguments are added to the common ones (a fake microphone, for instance)."""
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM)
    for arg in (
        "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
        "--disable-background-networking", "--disable-component-update", "--disable-sync",
        "--no-first-run", "--disable-quic", "--disable-default-apps", "--mute-audio",
        "--autoplay-policy=no-user-gesture-required", f"--user-data-dir={profile}",
        "--window-size=1280,800", *extra,
    ):  # fmt: skip
        options.add_argument(arg)
    if log_requests:
        # The performance log lists every request the page makes: the test checks none leaves.
        options.set_capability("goog:loggingPrefs", {"performance": "ALL"})
    with pytest.MonkeyPatch.context() as env:
        env.setenv("SE_OFFLINE", "true")  # Selenium Manager must not look for drivers online
        return webdriver.Chrome(options=options, service=Service(str(CHROMEDRIVER)))


@pytest.fixture(scope="module")
def browser(tmp_path_factory: pytest.TempPathFactory) -> Iterator[WebDriver]:
    driver = start_chromium(tmp_path_factory.mktemp("chromium-profile"), log_requests=True)
    try:
        driver.set_script_timeout(30)
        yield driver
    finally:
        driver.quit()


def set_viewport(driver: WebDriver, width: int, height: int) -> None:
    """Size the window so that the page itself gets ``width`` x ``height`` CSS pixels."""
    driver.set_window_size(width, height)
    inner = driver.execute_script("return [window.innerWidth, window.innerHeight]")
    driver.set_window_size(2 * width - inner[0], 2 * height - inner[1])


@pytest.fixture
def page(browser: WebDriver, server: str) -> Iterator[WebDriver]:
    """The page freshly loaded at 1280x800; afterwards, the console must hold no script error."""
    browser.get(server + "/")
    set_viewport(browser, 1280, 800)
    browser.get_log("performance")
    browser.get_log("browser")
    yield browser
    errors = [
        entry["message"]
        for entry in browser.get_log("browser")
        # A 4xx reply is logged by Chromium itself; the page is expected to explain it.
        if entry["level"] == "SEVERE" and "Failed to load resource" not in entry["message"]
    ]
    assert errors == [], "the page logged script errors"


# -- helpers -------------------------------------------------------------------------------


def upload(driver: WebDriver, path: Path) -> str:
    """Choose ``path`` in the page's file input and wait until the page settles; its state."""
    driver.execute_script("document.getElementById('app').dataset.state = 'sent'")
    driver.find_element(By.ID, "file").send_keys(str(path))
    WebDriverWait(driver, WAIT_S).until(
        lambda d: (
            d.find_element(By.ID, "app").get_attribute("data-state") in ("done", "error", "auth")
        )
    )
    return str(driver.find_element(By.ID, "app").get_attribute("data-state"))


def ask_server(server: str, path: Path, accept: str, query: str = "") -> httpx.Response:
    with path.open("rb") as fh:
        reply = httpx.post(
            f"{server}/extract{query}",
            files={"upload": (path.name, fh)},
            headers={"Accept": accept},
            timeout=WAIT_S,
        )
    reply.raise_for_status()
    return reply


def link_content(driver: WebDriver, element_id: str) -> str:
    """What a download link would save: its blob read back through the page."""
    result = driver.execute_async_script(
        "const done = arguments[arguments.length - 1];"
        "fetch(document.getElementById(arguments[0]).href)"
        "  .then(r => r.text()).then(done, e => done('ERROR ' + e));",
        element_id,
    )
    return str(result)


def box_geometry(driver: WebDriver) -> list[dict[str, Any]]:
    """Every drawn word box, in CSS pixels relative to its page sheet, with the sheet's width."""
    return list(
        driver.execute_script(
            """
            return [...document.querySelectorAll('.word-box')].map(box => {
              const sheet = box.closest('.sheet').getBoundingClientRect();
              const r = box.getBoundingClientRect();
              return {line: +box.dataset.line, token: +box.dataset.token,
                      page: +box.dataset.page, sheetWidth: sheet.width,
                      left: r.left - sheet.left, top: r.top - sheet.top,
                      right: r.right - sheet.left, bottom: r.bottom - sheet.top};
            });
            """
        )
    )


def assert_boxes_on_drawn_words(
    driver: WebDriver, reply: dict[str, Any], drawn: dict[int, samples.TextPage]
) -> None:
    """Each drawn box lies on the ink ``samples.text_page`` put there, scaled to the display."""
    tokens = {cell["line"]: cell["tokens"] for cell in reply["cells"]}
    widths = {page["pageIndex"]: page["pageWidth"] for page in reply["pages"]}
    matched = 0
    for box in box_geometry(driver):
        page = drawn[box["page"]]
        ink = {w.text: w for w in page.words}
        word = ink.get(tokens[box["line"]][box["token"]])
        if word is None:
            continue  # a misread word has no known position; the OCR tests judge reading
        # drawn pixels -> server page pixels (a PDF is rendered at its own dpi) -> CSS pixels
        scale = widths[box["page"]] / page.image.width * box["sheetWidth"] / widths[box["page"]]
        tolerance = 6 * scale + 2  # Tesseract's box vs the ink box, plus rounding
        for edge in ("left", "top", "right", "bottom"):
            expected = getattr(word, edge) * scale
            assert abs(box[edge] - expected) <= tolerance, (word, edge, box[edge], expected)
        matched += 1
    expected_words = sum(len(p.words) for p in drawn.values())
    assert matched >= expected_words - 1, f"only {matched} of {expected_words} boxes on their word"


def requests_made(driver: WebDriver) -> list[str]:
    urls = []
    for entry in driver.get_log("performance"):
        message = json.loads(entry["message"])["message"]
        if message["method"] == "Network.requestWillBeSent":
            urls.append(message["params"]["request"]["url"])
    return urls


def assert_only_local_requests(driver: WebDriver, server: str) -> None:
    outside = [u for u in requests_made(driver) if not u.startswith((server, "blob:", "data:"))]
    assert outside == [], f"the page reached outside its server: {outside}"


def panel_text(driver: WebDriver) -> str:
    return str(driver.find_element(By.ID, "lines").text)


# -- tests ---------------------------------------------------------------------------------


def test_image_words_are_boxed_where_they_were_drawn(
    page: WebDriver, server: str, tmp_path: Path
) -> None:
    drawn = samples.text_page(PAGE_LINES)
    path = tmp_path / "invoice.png"
    path.write_bytes(samples.encode_image(drawn.image, "PNG"))

    assert upload(page, path) == "done", page.find_element(By.ID, "status").text
    reply = ask_server(server, path, "application/json").json()
    labels = [label for label in reply["labels"] if label["type"] == "BOUNDING_BOX"]
    assert len(page.find_elements(By.CSS_SELECTOR, ".sheet img")) == 1
    assert len(page.find_elements(By.CSS_SELECTOR, ".word-box")) == len(labels)
    assert_boxes_on_drawn_words(page, reply, {0: drawn})
    for line in PAGE_LINES:
        assert line in panel_text(page)
    page.save_screenshot(str(tmp_path / "ocr.png"))

    # The boxes are laid out in percent of the page: a narrower window keeps them on their words.
    set_viewport(page, 900, 800)
    assert_boxes_on_drawn_words(page, reply, {0: drawn})
    page.save_screenshot(str(tmp_path / "ocr-narrow.png"))

    # Hovering a box lights up its word in the text, and the other way round.
    first = page.find_element(By.CSS_SELECTOR, '.word-box[data-line="0"][data-token="1"]')
    ActionChains(page).move_to_element(first).perform()
    token = page.find_element(By.CSS_SELECTOR, '.token[data-line="0"][data-token="1"]')
    assert "hot" in str(token.get_attribute("class"))
    other = page.find_element(By.CSS_SELECTOR, '.token[data-line="1"][data-token="2"]')
    ActionChains(page).move_to_element(other).perform()
    box = page.find_element(By.CSS_SELECTOR, '.word-box[data-line="1"][data-token="2"]')
    assert "hot" in str(box.get_attribute("class"))
    assert "hot" not in str(token.get_attribute("class"))
    assert_only_local_requests(page, server)


def drop(driver: WebDriver, path: Path, media_type: str) -> str:
    """Drop ``path`` on the drop zone as a drag from the desktop would; the page's state after."""
    driver.execute_script(
        """
        const [data, name, type] = arguments;
        const bytes = Uint8Array.from(atob(data), c => c.charCodeAt(0));
        const transfer = new DataTransfer();
        transfer.items.add(new File([bytes], name, {type}));
        document.getElementById('app').dataset.state = 'sent';
        const zone = document.getElementById('drop-zone');
        for (const kind of ['dragenter', 'dragover', 'drop']) {
          zone.dispatchEvent(new DragEvent(kind, {bubbles: true, cancelable: true,
                                                  dataTransfer: transfer}));
        }
        """,
        base64.b64encode(path.read_bytes()).decode(),
        path.name,
        media_type,
    )
    WebDriverWait(driver, WAIT_S).until(
        lambda d: d.find_element(By.ID, "app").get_attribute("data-state") in ("done", "error")
    )
    return str(driver.find_element(By.ID, "app").get_attribute("data-state"))


def test_a_dropped_file_copies_and_downloads_as_the_servers_json_and_text(
    page: WebDriver, server: str, tmp_path: Path
) -> None:
    path = tmp_path / "invoice.png"
    path.write_bytes(samples.encode_image(samples.text_page(PAGE_LINES).image, "PNG"))
    assert drop(page, path, "image/png") == "done", page.find_element(By.ID, "status").text
    assert "dragging" not in str(page.find_element(By.ID, "drop-zone").get_attribute("class"))

    reply = ask_server(server, path, "application/json").json()
    assert json.loads(link_content(page, "download-json")) == reply
    text = ask_server(server, path, "text/plain").text
    assert link_content(page, "download-text") == text
    assert page.find_element(By.ID, "download-json").get_attribute("download") == "invoice.json"
    assert page.find_element(By.ID, "download-text").get_attribute("download") == "invoice.txt"

    page.execute_cdp_cmd(
        "Browser.grantPermissions",
        {"origin": server, "permissions": ["clipboardReadWrite", "clipboardSanitizedWrite"]},
    )
    for button, expected in (("copy-text", text), ("copy-json", None)):
        page.find_element(By.ID, button).click()
        WebDriverWait(page, 10).until(lambda d: "Copied" in d.find_element(By.ID, "status").text)
        copied = page.execute_async_script(
            "const done = arguments[arguments.length - 1];"
            "navigator.clipboard.readText().then(done, e => done('ERROR ' + e));"
        )
        if expected is None:
            assert json.loads(copied) == reply
        else:
            assert copied == expected


@pytest.mark.parametrize(
    ("name", "pages"),
    [("report.pdf", PDF_PAGES), ("scan.tiff", PDF_PAGES[:1])],
    ids=["pdf-two-pages", "tiff-one-page"],
)
def test_pages_the_browser_cannot_show_are_sheets_with_the_words_in_their_boxes(
    page: WebDriver, server: str, tmp_path: Path, name: str, pages: list[list[str]]
) -> None:
    drawn = {n: samples.text_page(lines, page=n) for n, lines in enumerate(pages)}
    path = tmp_path / name
    encode = samples.pdf if name.endswith(".pdf") else samples.multipage_tiff
    path.write_bytes(encode(list(drawn.values())))

    assert upload(page, path) == "done", page.find_element(By.ID, "status").text
    reply = ask_server(server, path, "application/json").json()
    assert len(page.find_elements(By.CSS_SELECTOR, ".sheet")) == len(pages)
    assert page.find_elements(By.CSS_SELECTOR, ".sheet img") == []
    assert "cannot display" in page.find_element(By.ID, "viewer").text
    for index in range(len(pages)):
        on_page = [label for label in reply["labels"] if label["pageIndex"] == index]
        boxes = page.find_elements(By.CSS_SELECTOR, f'.sheet .word-box[data-page="{index}"]')
        assert len(boxes) == len(on_page)
        expected_words = [reply["cells"][label["startCellLine"]]["tokens"][label["startTokenIndex"]]
                          for label in on_page]  # fmt: skip
        assert [box.text for box in boxes] == expected_words
    assert_boxes_on_drawn_words(page, reply, drawn)
    if len(pages) > 1:
        assert "page 2" in panel_text(page).casefold()  # shown in small capitals
    page.save_screenshot(str(tmp_path / f"{name}.png"))


@pytest.mark.skipif(not samples.have_espeak(), reason="espeak-ng is not installed")
def test_audio_lines_are_timed_and_play_from_their_start(
    page: WebDriver, server: str, tmp_path: Path
) -> None:
    path = tmp_path / "two-speakers.wav"
    path.write_bytes(samples.two_speaker_stereo(FIRST_SPEAKER, SECOND_SPEAKER))
    page.find_element(By.ID, "opt-speakers").click()

    assert upload(page, path) == "done", page.find_element(By.ID, "status").text
    # Whisper may word a line differently from one run to the next (a comma or a full stop), so
    # the page is checked against the reply it got, not against a second transcription.
    reply = json.loads(link_content(page, "download-json"))
    assert reply["type"] == "TIMESTAMP"
    lines = page.find_elements(By.CSS_SELECTOR, ".timed-line")
    assert len(lines) == len(reply["cells"]) == 2
    cells, labels = reply["cells"], reply["labels"]
    speakers = [{m["key"]: m["value"] for m in cell["metadata"]}["speaker"] for cell in cells]
    assert speakers == ["Speaker 1", "Speaker 2"]
    for line, cell, label, speaker in zip(lines, cells, labels, speakers, strict=True):
        stamp = "[00:{:02d}.{:03d}]".format(*divmod(label["startTimestampMillis"], 1000))  # < 1 min
        assert line.text == f"{stamp} {speaker}: {cell['content']}"
    expected_text = "".join(f"{s}: {c['content']}\n" for s, c in zip(speakers, cells, strict=True))
    assert link_content(page, "download-text") == expected_text

    start = int(str(lines[1].get_attribute("data-start"))) / 1000
    end = int(str(lines[1].get_attribute("data-end"))) / 1000
    lines[1].click()
    position = page.execute_script("return document.querySelector('audio').currentTime")
    assert start - 0.05 <= position <= end, (position, start, end)
    WebDriverWait(page, 10).until(lambda d: lines[1].get_attribute("aria-current") == "true")
    page.execute_script("document.querySelector('audio').pause()")
    page.save_screenshot(str(tmp_path / "audio.png"))
    assert_only_local_requests(page, server)


def test_a_file_the_server_refuses_is_explained(page: WebDriver, tmp_path: Path) -> None:
    path = tmp_path / "notes.txt"
    path.write_text("just some text, not a document image\n")
    assert upload(page, path) == "error"
    error = page.find_element(By.ID, "error")
    assert error.is_displayed()
    assert "unsupported_media_type" in error.text
    assert "not a supported file" in error.text
    assert page.find_element(By.ID, "result").is_displayed() is False


def test_a_server_with_a_secret_asks_for_the_token_and_retries(
    browser: WebDriver, tmp_path: Path
) -> None:
    url, process = support.start_server("--workers", "1", "--secret", "open-sesame")
    try:
        browser.get(url + "/")
        path = tmp_path / "invoice.png"
        path.write_bytes(samples.encode_image(samples.text_page(PAGE_LINES[:1]).image, "PNG"))
        assert upload(browser, path) == "auth"
        token = browser.find_element(By.ID, "token")
        assert token.is_displayed()

        token.send_keys("wrong")
        browser.find_element(By.CSS_SELECTOR, "#auth button").click()
        WebDriverWait(browser, WAIT_S).until(
            lambda d: "refused" in d.find_element(By.ID, "status").text
        )
        assert "unauthorized" in browser.find_element(By.ID, "error").text

        token.clear()
        token.send_keys("open-sesame")
        browser.find_element(By.CSS_SELECTOR, "#auth button").click()
        WebDriverWait(browser, WAIT_S).until(
            lambda d: d.find_element(By.ID, "app").get_attribute("data-state") == "done"
        )
        assert PAGE_LINES[0] in panel_text(browser)
        assert not token.is_displayed()
    finally:
        support.stop_server(process)

"""The page's searchable PDF button, in headless Chromium against a real server: shown for an
image, it saves the server's ``format=pdf`` reply of the same file."""

from __future__ import annotations

import base64
import subprocess
from pathlib import Path
from typing import TYPE_CHECKING

from support import PAGE_ONE
from test_page import (  # noqa: F401  (fixtures used by name)
    WAIT_S,
    browser,
    page,
    pytestmark,
    server,
    upload,
)

from extractor import samples

if TYPE_CHECKING:  # selenium itself only once test_page has checked it is installed
    from selenium.webdriver.chrome.webdriver import WebDriver


def test_the_searchable_pdf_button_saves_the_pdf_of_the_shown_image(
    page: WebDriver,  # noqa: F811
    tmp_path: Path,
) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    image = tmp_path / "invoice.png"
    image.write_bytes(samples.encode_image(samples.text_page(PAGE_ONE).image, "PNG"))
    assert upload(page, image) == "done"
    button = page.find_element(By.ID, "download-pdf")
    assert button.is_displayed()
    # Keep what the page would save instead of letting Chromium download it.
    page.execute_script(
        "HTMLAnchorElement.prototype.click = function () {"
        "  window.saved = { href: this.href, name: this.download }; };"
    )
    button.click()
    WebDriverWait(page, WAIT_S).until(lambda d: d.execute_script("return window.saved"))
    assert page.execute_script("return window.saved.name") == "invoice.pdf"
    encoded = page.execute_async_script(
        "const done = arguments[arguments.length - 1];"
        "fetch(window.saved.href).then(r => r.arrayBuffer()).then(b => {"
        "  let s = ''; for (const x of new Uint8Array(b)) s += String.fromCharCode(x);"
        "  done(btoa(s)); });"
    )
    pdf = tmp_path / "saved.pdf"
    pdf.write_bytes(base64.b64decode(encoded))
    text = subprocess.run(["pdftotext", str(pdf), "-"], capture_output=True, text=True).stdout
    assert [" ".join(line.split()) for line in text.splitlines() if line.strip()] == PAGE_ONE
    assert "searchable PDF saved" in page.find_element(By.ID, "status").text

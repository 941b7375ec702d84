"""The page's "run as a job" option: the upload goes out with Prefer: respond-async, the page
follows the job (GET /v1/jobs/{id}) and shows its result, the same JSON as /extract gives."""

from __future__ import annotations

import json
from pathlib import Path

from selenium.webdriver.chrome.webdriver import WebDriver
from selenium.webdriver.common.by import By
from test_page import (  # noqa: F401  (fixtures used by name)
    PDF_PAGES,
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

from extractor import samples


def test_a_file_sent_as_a_job_shows_the_same_result(
    page: WebDriver,  # noqa: F811
    server: str,  # noqa: F811
    tmp_path: Path,
) -> None:
    path = tmp_path / "report.pdf"
    path.write_bytes(samples.pdf([samples.text_page(lines, page=i)
                                  for i, lines in enumerate(PDF_PAGES)]))  # fmt: skip
    page.find_element(By.ID, "opt-async").click()
    assert upload(page, path) == "done", page.find_element(By.ID, "status").text
    reply = ask_server(server, path, "application/json").json()
    assert json.loads(link_content(page, "download-json")) == reply
    made = requests_made(page)
    assert any("/v1/jobs/ExtractionQueue:" in url and url.endswith("/result") for url in made)
    assert_only_local_requests(page, server)

"""The kit against our own gunicorn server: every rule passes, in process and through the CLI."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator

import pytest
import support

from extractor import samples
from extractor.check import Status, check

pytestmark = pytest.mark.slow
SECRET = "kit-secret"


@pytest.fixture(scope="module")
def server_url() -> Iterator[str]:
    """Our real server (one worker, real engines) behind a secret, for the whole module."""
    base, process = support.start_server(
        "--workers", "1", env={"EXTRACTOR_SECRET": SECRET, "OMP_THREAD_LIMIT": "1"}
    )
    try:
        yield f"{base}/extract"
    finally:
        support.stop_server(process)


def test_our_server_passes_every_rule(server_url: str) -> None:
    kind = "all" if samples.have_espeak() else "ocr"
    report = check(server_url, secret=SECRET, kind=kind)
    not_passed = [c for c in report.checks if c.status is not Status.PASS]
    assert not_passed == []
    assert report.passed
    assert {name for name, _text in report.found} >= {"page.png", "pages.tiff", "pages.pdf"}


def test_cli_json_report_exits_0(server_url: str) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "extractor.cli", "check", server_url, "--secret", SECRET,
         "--kind", "ocr", "--json"],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    report = json.loads(done.stdout)
    assert report["url"] == server_url and report["passed"] is True
    assert {c["status"] for c in report["checks"]} == {"PASS"}
    assert set(report["checks"][0]) == {"id", "title", "status", "detail"}


def test_without_the_secret_every_upload_fails_with_a_hint(server_url: str) -> None:
    report = check(server_url, kind="ocr")
    assert report.failures() == ["http.status"]
    detail = next(c.detail for c in report.checks if c.id == "http.status")
    assert "HTTP 401" in detail and "--secret" in detail


def test_the_servers_root_instead_of_its_endpoint_gets_a_hint(server_url: str) -> None:
    """`extractor check http://host:port` (the root, which takes no upload) says where to look."""
    root = server_url.removesuffix("/extract")
    report = check(root, secret=SECRET, kind="ocr")
    detail = next(c.detail for c in report.checks if c.id == "http.status")
    assert "HTTP 405" in detail and ".../extract" in detail

"""The README stays a short front page, the docs site builds with no broken link or anchor, and
no file describes the present by the history that led to it."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).parent.parent
README = ROOT / "README.md"
LINK = re.compile(r"(?<!!)\[[^\]]+\]\(([^)\s]+)\)")


def test_the_readme_is_short_and_keeps_the_two_commands() -> None:
    text = README.read_text()
    assert len(text.splitlines()) <= 250
    assert "make run" in text and "make test" in text


def test_the_readmes_links_reach_files_of_the_repository() -> None:
    for target in LINK.findall(README.read_text()):
        if target.startswith(("http://", "https://", "#")):
            continue
        assert (ROOT / target.split("#")[0]).exists(), target


# Prose and the code's own docstrings and comments (the settings page is generated from the
# help texts in extractor/config/).
WRITTEN = [
    README,
    *sorted((ROOT / "docs").rglob("*.md")),
    *sorted((ROOT / "bench").glob("*.md")),
    *sorted((ROOT / "extractor").rglob("*.py")),
    *sorted((ROOT / "bench").glob("*.py")),
]


@pytest.mark.parametrize("path", WRITTEN, ids=lambda path: str(path.relative_to(ROOT)))
def test_no_session_numbers(path: Path) -> None:
    """The files say what is true now; which working session found it is git history."""
    assert not re.search(r"(?<![\w-])sessions? \d", path.read_text(), re.IGNORECASE)


@pytest.mark.parametrize("path", sorted((ROOT / "bench").glob("*.md")), ids=lambda path: path.name)
def test_a_benchmark_file_is_a_current_table_not_a_log(path: Path) -> None:
    assert len(path.read_text().splitlines()) <= 300


@pytest.mark.parametrize(
    "page", sorted((ROOT / "docs").rglob("*.md")), ids=lambda page: str(page.relative_to(ROOT))
)
def test_a_docs_page_has_one_title(page: Path) -> None:
    outside_code = re.sub(r"^```.*?^```", "", page.read_text(), flags=re.MULTILINE | re.DOTALL)
    assert len(re.findall(r"^# ", outside_code, re.MULTILINE)) == 1


def test_every_error_code_is_documented() -> None:
    """Each class of extractor.errors and extractor.async_jobs.errors has its row."""
    import inspect

    from extractor import errors
    from extractor.async_jobs import errors as job_errors

    page = (ROOT / "docs" / "api" / "errors.md").read_text()
    for module in (errors, job_errors):
        for _, error in inspect.getmembers(module, inspect.isclass):
            code, status = getattr(error, "code", None), getattr(error, "status", None)
            if isinstance(code, str) and isinstance(status, int):
                rows = [line for line in page.splitlines() if line.startswith("| ")]
                row = next((line for line in rows if f"`{code}`" in line), "")
                assert row.startswith(f"| {status} |"), f"{code} ({status}) is not in errors.md"


def test_the_docs_site_builds_strictly(tmp_path: Path) -> None:
    pytest.importorskip("mkdocs")
    build = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path)],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert build.returncode == 0, build.stderr[-3000:]
    assert (tmp_path / "api" / "openapi" / "index.html").read_text().count("POST /extract") >= 1
    assert "EXTRACTOR_BIND" in (tmp_path / "settings" / "index.html").read_text()

"""The tesseract CLI as the OCR engine runs it: output on a pipe, its failures named."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from extractor import samples
from extractor.ocr.command import (
    TesseractFailed,
    TesseractMissing,
    TesseractTimedOut,
    run_tesseract,
)


def test_a_page_is_read_to_tsv_on_stdout_leaving_its_folder_as_it_was(tmp_path: Path) -> None:
    image = tmp_path / "page.png"
    image.write_bytes(samples.encode_image(samples.text_page(["Quarterly report"]).image, "PNG"))
    tsv = run_tesseract(image, ["-l", "eng", "-c", "tessedit_create_tsv=1"], timeout=60)
    assert tsv.startswith("level\tpage_num\t")
    assert "Quarterly" in tsv and "report" in tsv
    assert list(tmp_path.iterdir()) == [image]


def test_an_unreadable_image_fails_with_tesseracts_reason_but_not_the_servers_path(
    tmp_path: Path,
) -> None:
    image = tmp_path / "secret-folder" / "page.png"
    image.parent.mkdir()
    image.write_bytes(b"\x89PNG\r\n\x1a\n not really")
    with pytest.raises(TesseractFailed) as failed:
        run_tesseract(image, ["-l", "eng"], timeout=60)
    assert "read" in str(failed.value).lower()  # "Error, cannot read input file the image"
    assert "secret-folder" not in str(failed.value)


def test_a_run_past_its_time_is_killed_at_once(tmp_path: Path) -> None:
    image = tmp_path / "page.png"
    page = samples.text_page(samples.a4_page_lines(45, 10))
    image.write_bytes(samples.encode_image(page.image, "PNG"))
    started = time.monotonic()
    with pytest.raises(TesseractTimedOut):
        run_tesseract(image, ["-l", "eng"], timeout=0.2)
    assert time.monotonic() - started < 5  # killed, not waited for (a page takes ~2 s)


def test_no_tesseract_on_path_is_said_so(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(TesseractMissing):
        run_tesseract(tmp_path / "page.png", [], timeout=10)

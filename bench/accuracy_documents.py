"""OCR on real documents: the service against the bare Tesseract CLI and OCRmyPDF, per class.

The documents are the pinned test resources of two source distributions (``bench.datasets``:
ocrmypdf 16.5.0, tabula-py 2.9.3): born-digital PDFs whose own text layer (``pdftotext``) is
the exact reference for their rendered pages, scans of a printed letter upright, skewed and
turned, a chart and a page of coloured ink whose references were transcribed by eye (below).
Each is read three ways, all at 300 dpi:

- **service**: the PDF posted to ``/extract`` of a real ``extractor serve`` (its defaults);
- **CLI**: each page rendered by ``pdftoppm -r 300`` (colour PNG), then ``tesseract PAGE -``;
- **OCRmyPDF**: ``ocrmypdf --rotate-pages --deskew --force-ocr --sidecar`` when an
  ``ocrmypdf`` is on the PATH or in ``$OCRMYPDF`` (it needs Ghostscript); its sidecar text.

Two error rates per class: CER over the text in reading order, and CER over the words sorted
(order-free: a table or chart has no single reading order, so this one says what was read
and what was made up, whatever the order). The trivial baseline, an empty reply, scores 100%.

    python -m bench.accuracy --only documents
"""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from .accuracy_engines import Service, bare_tesseract
from .accuracy_score import normalize_page, page_cer
from .datasets import documents
from .server import clean_environ

log = logging.getLogger("bench.accuracy")

# The Linn letter's scans have no text layer: their reference is the CLI's reading of the
# upright original (linn.png), so these rows say how much a turned or skewed copy loses.
LINN = "linn.png"
TRANSCRIBED = {
    # Colour text on white, each line in its own ink (cyan, magenta, yellow, black).
    "cmyk.pdf": "Multicolor Black\nPure Black (K = 100)\nPure Magenta\nPure Cyan\nPure Yellow",
    # A line chart: axis figures, the legend, and 21 names set at 45 degrees under the axis.
    "graph.pdf": (
        "600 500 400 300 200 100 0 Support No vote[note 1] Oppose Net[note 2] Percentage"
        " [note 3] Newyorkbrad NuclearWarfare Worm That Turned Carcharoth Timotheus Canens"
        " Coren Salvio giuliano David Fuchs RegentsPark Elen of the Roads Guerillero Keilana"
        " Beeblebrox Richwales Pgallert Kww Jc37 Jclemens Ks0stm Count Iblis YOLO Swag"
    ),
}


@dataclass(frozen=True)
class Sample:
    file: str
    kind: str  # the document class
    part: str  # "tuning" (choices were measured on it) or "test"


SAMPLES = (
    Sample("tagged.pdf", "plain text", "tuning"),
    Sample("MultiColumn.pdf", "plain text", "tuning"),
    Sample("toc.pdf", "plain text", "test"),
    Sample("data.pdf", "ruled table", "tuning"),
    Sample("campaign_donors.pdf", "ruled table", "test"),
    Sample("12s0324.pdf", "small print table", "test"),
    Sample("data_dtype.pdf", "colour form", "test"),
    Sample("cmyk.pdf", "colour text", "test"),
    Sample("graph.pdf", "chart", "test"),
    Sample("linn.pdf", "scan", "tuning"),
    Sample("skew.pdf", "skewed or turned scan", "tuning"),
    Sample("rotated_skew.pdf", "skewed or turned scan", "test"),
    Sample("cardinal.pdf", "skewed or turned scan", "test"),
)
DPI = 300


def reference(path: Path, files: dict[str, Path]) -> str:
    if path.name in TRANSCRIBED:
        return TRANSCRIBED[path.name]
    if path.name in ("linn.pdf", "skew.pdf", "rotated_skew.pdf", "cardinal.pdf"):
        upright = bare_tesseract(files[LINN].read_bytes(), ".png")
        pages = int(_pdfinfo(path).get("Pages", "1"))
        return "\n".join([upright] * pages)  # cardinal.pdf: the letter four times, turned
    return subprocess.run(
        ["pdftotext", "-layout", str(path), "-"], capture_output=True, text=True, check=True
    ).stdout


def cli(path: Path) -> str:
    """``pdftoppm -r 300`` each page, ``tesseract PAGE -`` on it; the pages' text joined."""
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run(["pdftoppm", "-r", str(DPI), "-png", str(path), f"{tmp}/page"], check=True)
        return "\n".join(
            bare_tesseract(page.read_bytes(), ".png") for page in sorted(Path(tmp).iterdir())
        )


def ocrmypdf_command() -> str | None:
    return os.environ.get("OCRMYPDF") or shutil.which("ocrmypdf")


def ocrmypdf(command: str, path: Path) -> str | None:
    """OCRmyPDF's sidecar text, or None when it wrote none."""
    with tempfile.TemporaryDirectory() as tmp:
        sidecar = Path(tmp) / "text.txt"
        done = subprocess.run(
            [command, "-q", "--jobs", "1", "--rotate-pages", "--deskew", "--force-ocr",
             "--output-type", "pdf", "--sidecar", str(sidecar), str(path), f"{tmp}/out.pdf"],
            capture_output=True, text=True, timeout=900,
            env={**clean_environ(), "OMP_THREAD_LIMIT": "1"},
        )  # fmt: skip
        if not sidecar.is_file():
            log.warning("ocrmypdf %s: %s", path.name, done.stderr[-500:])
            return None
        # Its sidecar marks a page it skipped ("[OCR skipped on page(s) ...]"): none here.
        return sidecar.read_text().replace("\f", "\n")


def _pdfinfo(path: Path) -> dict[str, str]:
    out = subprocess.run(["pdfinfo", str(path)], capture_output=True, text=True).stdout
    return {k.strip(): v.strip() for k, _, v in (row.partition(":") for row in out.splitlines())}


def sorted_words(text: str) -> str:
    return " ".join(sorted(normalize_page(text).split()))


def cers(references: list[str], hypotheses: list[str]) -> tuple[float, float]:
    """CER in reading order, and over the words sorted (both fractions)."""
    return (
        page_cer(references, hypotheses),
        page_cer([sorted_words(r) for r in references], [sorted_words(h) for h in hypotheses]),
    )


def read_all(log_dir: Path) -> list[dict[str, object]]:
    files = documents()
    command = ocrmypdf_command()
    rows: list[dict[str, object]] = []
    with Service("--workers", "1", log_dir=log_dir) as service:
        service.wait_ready(1)
        for sample in SAMPLES:
            path = files[sample.file]
            log.info("documents: %s", sample.file)
            rows.append({
                "sample": sample,
                "reference": reference(path, files),
                "service": service.text(path.read_bytes(), path.name),
                "cli": cli(path),
                "ocrmypdf": ocrmypdf(command, path) if command else None,
            })  # fmt: skip
    for row in rows:  # kept for reading what each side got wrong
        name = row["sample"].file  # type: ignore[attr-defined]
        for side in ("reference", "service", "cli", "ocrmypdf"):
            if row[side] is not None:
                (log_dir / f"{name}.{side}.txt").write_text(str(row[side]))
    return rows


def _percent(pair: tuple[float, float] | None) -> str:
    if pair is None:
        return "not run"
    return f"{100 * pair[0]:.1f} / {100 * pair[1]:.1f}"


def table(rows: list[dict[str, object]], part: str) -> list[str]:
    lines = [
        "| Class | Documents (pages) | Service | Bare CLI (pdftoppm 300 dpi) | OCRmyPDF |"
        " Empty reply |",
        "|---|---|---|---|---|---|",
    ]
    kinds = dict.fromkeys(r["sample"].kind for r in rows if r["sample"].part == part)  # type: ignore[attr-defined]
    for kind in kinds:
        chosen = [r for r in rows if r["sample"].kind == kind and r["sample"].part == part]  # type: ignore[attr-defined]
        refs = [str(r["reference"]) for r in chosen]
        names = ", ".join(r["sample"].file for r in chosen)  # type: ignore[attr-defined]
        sides = {}
        for side in ("service", "cli", "ocrmypdf"):
            texts = [r[side] for r in chosen]
            sides[side] = (
                None if any(t is None for t in texts) else cers(refs, [str(t) for t in texts])
            )
        lines.append(
            f"| {kind} | {names} | {_percent(sides['service'])} | {_percent(sides['cli'])} |"
            f" {_percent(sides['ocrmypdf'])} | 100.0 / 100.0 |"
        )
    return lines


def measure(log_dir: Path) -> str:
    rows = read_all(log_dir)
    command = ocrmypdf_command()
    text = [
        "## Real documents (OCR)",
        "",
        "CER in % as *reading order / words sorted* (order-free), per document class; lower is"
        " better. Documents: the pinned test resources of the ocrmypdf 16.5.0 and tabula-py"
        " 2.9.3 sdists (`bench/datasets.py`); references: each born-digital PDF's text layer"
        " (`pdftotext -layout`), the chart and the colour page transcribed by eye, the Linn"
        " letter's scans against the CLI's reading of the upright original (`linn.png`), so"
        " those rows measure what turning and skew lose. The service reads the PDF with its"
        " defaults; the CLI reads `pdftoppm -r 300` pages with `tesseract PAGE -`; OCRmyPDF"
        " runs `--rotate-pages --deskew --force-ocr --sidecar`"
        + ("" if command else " (not installed here: `pip install ocrmypdf` and Ghostscript)")
        + ".",
        "",
        "Test part (nothing was tuned on it):",
        "",
        *table(rows, "test"),
        "",
        "Tuning part (the rotation, colour and rule choices were measured on it):",
        "",
        *table(rows, "tuning"),
        "",
        "Reproduce: `python -m bench.accuracy --only documents` (OCRmyPDF from `$OCRMYPDF` or"
        " the PATH); each side's text is kept in the log folder.",
    ]
    return "\n".join(text) + "\n"

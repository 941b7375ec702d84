"""Tesseract OCR of one page image into ``Line``s with word boxes, from a single TSV run."""

from __future__ import annotations

import logging
import os
import time
from dataclasses import dataclass

import pytesseract

from .errors import EngineTimeout, EngineUnavailable, UnsupportedMedia
from .importable import BoundingBox, Line, Word
from .media import PageImage

log = logging.getLogger(__name__)

WORD_LEVEL = 5  # Tesseract TSV: 1 page, 2 block, 3 paragraph, 4 line, 5 word


@dataclass(frozen=True)
class OcrOptions:
    languages: str = "eng"  # '+'-joined Tesseract language codes
    psm: int | None = None  # page segmentation mode; None keeps Tesseract's default


class TesseractEngine:
    """Runs the ``tesseract`` CLI through pytesseract, once per page, single-threaded.

    OpenMP's default threading makes Tesseract about 7x slower on a small machine, and pages
    are already run in parallel by the caller, so every run gets ``OMP_THREAD_LIMIT=1``.
    """

    def __init__(self, options: OcrOptions) -> None:
        self.options = options
        self._installed: frozenset[str] | None = None
        # pytesseract starts tesseract with its module-level ``environ``. Give Tesseract its own
        # copy with the limit rather than setting it process-wide: CTranslate2 in this same
        # process silently decodes garbage when OMP_THREAD_LIMIT is below its thread count.
        pytesseract.pytesseract.environ = {**os.environ, "OMP_THREAD_LIMIT": "1"}

    def check(self) -> dict[str, object]:
        """Tesseract's version and whether every configured language is installed."""
        try:
            version = str(pytesseract.get_tesseract_version())
            installed = set(pytesseract.get_languages(config=""))
        except (pytesseract.TesseractNotFoundError, pytesseract.TesseractError, OSError) as exc:
            raise EngineUnavailable(f"tesseract is not usable: {exc}") from exc
        wanted = self.options.languages.split("+")
        missing = [lang for lang in wanted if lang not in installed]
        return {"version": version, "languages": wanted, "missing_languages": missing}

    def installed_languages(self) -> frozenset[str]:
        """The languages Tesseract has data for (``tesseract --list-langs``), read once."""
        if self._installed is None:
            try:
                self._installed = frozenset(pytesseract.get_languages(config=""))
            except (pytesseract.TesseractNotFoundError, pytesseract.TesseractError, OSError) as exc:
                raise EngineUnavailable(f"tesseract is not usable: {exc}") from exc
        return self._installed

    def recognise(
        self, page: PageImage, deadline: float, languages: str | None = None
    ) -> list[Line]:
        """OCR one page in ``languages`` ('+'-joined; None: the configured ones); every line,
        word and box comes from the same TSV output."""
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise EngineTimeout("the request timed out before OCR could run")
        config = f"--psm {self.options.psm}" if self.options.psm is not None else ""
        try:
            data = pytesseract.image_to_data(
                str(page.path),
                lang=languages or self.options.languages,
                config=config,
                output_type=pytesseract.Output.DICT,
                timeout=remaining,
            )
        except pytesseract.TesseractNotFoundError as exc:
            raise EngineUnavailable("tesseract is not installed") from exc
        except pytesseract.TesseractError as exc:
            raise UnsupportedMedia(
                f"Tesseract could not read page {page.index + 1}: {exc.message.strip()[:300]}"
            ) from exc
        except RuntimeError as exc:  # pytesseract's way of saying it killed a slow run
            if "timeout" in str(exc).lower():
                raise EngineTimeout("OCR took longer than the request timeout") from exc
            raise
        return list(lines_from_tsv(data, page))


def lines_from_tsv(data: dict[str, list[object]], page: PageImage) -> list[Line]:
    """Group Tesseract's word rows into lines in reading order, dropping empty words."""
    grouped: dict[tuple[object, ...], list[Word]] = {}
    for i, level in enumerate(data["level"]):
        text = str(data["text"][i]).strip()
        if int(level) != WORD_LEVEL or not text:  # type: ignore[call-overload]
            continue
        left, top = int(data["left"][i]), int(data["top"][i])  # type: ignore[call-overload]
        width, height = int(data["width"][i]), int(data["height"][i])  # type: ignore[call-overload]
        box = BoundingBox(
            left=max(left, 0),
            top=max(top, 0),
            right=min(left + width, page.width),
            bottom=min(top + height, page.height),
        )
        key = (data["page_num"][i], data["block_num"][i], data["par_num"][i], data["line_num"][i])
        conf = float(data["conf"][i])  # type: ignore[arg-type]
        # A word Tesseract reads with inner spaces is still one box: keep it one token.
        for part in text.split():
            grouped.setdefault(key, []).append(Word(part, box, confidence=conf))
    return [
        Line(tuple(words), page_index=page.index, block=int(key[1]), paragraph=int(key[2]))  # type: ignore[call-overload]
        for key, words in grouped.items()
    ]

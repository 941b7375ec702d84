"""Tesseract OCR of one page image into ``Line``s with word boxes, from a single TSV run.

Pages go through libtesseract in-process with the models kept loaded (``tesslib``); when the
library can't be loaded (or ``EXTRACTOR_OCR_IN_PROCESS`` is off) through the ``tesseract`` CLI
(``command``). Both produce the same TSV, parsed by one function.
"""

from __future__ import annotations

import logging
import re
import time
from dataclasses import dataclass

import pytesseract

from extractor.errors import EngineTimeout, EngineUnavailable, InvalidParameter, UnsupportedMedia
from extractor.media.images import PageImage
from extractor.ocr.command import (
    TesseractFailed,
    TesseractMissing,
    TesseractTimedOut,
    run_tesseract,
)
from extractor.ocr.reader import PageReader, ReaderUnavailable
from extractor.ocr.tesslib import LibraryUnavailable, WarmPool, shared_pool
from extractor.replies.importable import BoundingBox, Line, Word

log = logging.getLogger(__name__)

WORD_LEVEL = 5  # Tesseract TSV: 1 page, 2 block, 3 paragraph, 4 line, 5 word
TSV_COLUMNS = (
    "level", "page_num", "block_num", "par_num", "line_num", "word_num",
    "left", "top", "width", "height", "conf", "text",
)  # fmt: skip
# Table rules, borders and underlines that Tesseract reads as characters: a ruled table's
# vertical rules come back as "|" tokens beside each cell (at confidences of 47-97, as high
# as the words': confidence cannot tell them apart), or glued to a word ("|Mazda"); a form's
# blanks as "____". Taken off a token's ends, the token dropped when nothing is left.
RULE_EDGES = "|¦‖_"
# A line of nothing but rule strokes and punctuation (a border read as "—_——=-|"): no letter
# or digit, and at least one stroke a printed line leaves.
RULE_STROKES = re.compile(r"[|¦‖_—=~]")
NO_ALPHANUMERIC = re.compile(r"[\W_]+")


@dataclass(frozen=True)
class OcrOptions:
    languages: str = "eng"  # '+'-joined Tesseract language codes
    psm: int | None = None  # page segmentation mode; None keeps Tesseract's default
    in_process: bool = True  # libtesseract with warm models; False: always the CLI
    warm_engines: int = 1  # idle loaded Tesseract APIs kept per process


class TesseractEngine:
    """Runs Tesseract once per page, single-threaded, in-process when the library loads.

    OpenMP's default threading makes Tesseract about 7x slower on a small machine, and pages
    are already run in parallel by the caller, so every run is kept to one thread: the CLI
    gets ``OMP_THREAD_LIMIT=1``, the library the per-thread equivalent (see ``tesslib``).
    """

    def __init__(self, options: OcrOptions) -> None:
        self.options = options
        self._pool: WarmPool | None = None
        self._tried_library = not options.in_process
        self._installed: frozenset[str] | None = None
        # Pages read while the worker transcribes, in a warm process of their own (``reader``).
        self.reader = PageReader(options.languages, options.psm, options.warm_engines)

    @property
    def mode(self) -> str:
        """``library`` or ``cli``: how pages are being read (decided on first use)."""
        return "library" if self._library() is not None else "cli"

    def _library(self) -> WarmPool | None:
        if not self._tried_library:
            self._tried_library = True
            try:
                self._pool = shared_pool()
            except LibraryUnavailable as exc:
                log.warning(
                    "libtesseract unusable, using the tesseract CLI", extra={"error": str(exc)}
                )
        return self._pool

    def check(self) -> dict[str, object]:
        """Tesseract's version, how it runs, and whether every configured language is installed.

        In-process, this also loads the default languages once, so the first page is warm.
        """
        pool = self._library()
        try:
            version = str(pytesseract.get_tesseract_version())
        except (pytesseract.TesseractNotFoundError, pytesseract.TesseractError, OSError) as exc:
            if pool is None:
                raise EngineUnavailable(f"tesseract is not usable: {exc}") from exc
            version = pool.library.version
        wanted = self.options.languages.split("+")
        installed = self.installed_languages()
        missing = [lang for lang in wanted if lang not in installed]
        status: dict[str, object] = {"version": version, "mode": self.mode, "languages": wanted}
        if pool is not None and not missing:
            try:
                with pool.api(self.options.languages, self.options.psm, self.options.warm_engines):
                    pass
            except LibraryUnavailable as exc:  # installed but unusable: a damaged traineddata
                missing, status["error"] = wanted, str(exc)
        return {**status, "missing_languages": missing}

    def renew(self) -> None:
        """Reload the warm Tesseract APIs (~50 ms), handing back what pages left in them; a
        no-op through the CLI. See ``WarmPool.renew``."""
        pool = self._library()
        if pool is not None:
            try:
                pool.renew(self.options.warm_engines)
            except LibraryUnavailable as exc:  # the next page loads one, or says why not
                log.warning("tesseract api not reloaded", extra={"error": str(exc)})

    def release_idle(self) -> None:
        """Unload the idle warm Tesseract APIs (~10 MB of a worker's RSS with ``eng``) until
        the next page, which loads one again (~50 ms); a no-op through the CLI."""
        if self._pool is not None:
            self._pool.release_idle()

    def installed_languages(self) -> frozenset[str]:
        """Every language code Tesseract finds traineddata for (read once per process)."""
        if self._installed is None:
            self._installed = self._list_languages()
        return self._installed

    def _list_languages(self) -> frozenset[str]:
        try:
            return frozenset(pytesseract.get_languages(config=""))
        except (pytesseract.TesseractNotFoundError, pytesseract.TesseractError, OSError) as exc:
            pool = self._library()
            if pool is None:
                raise EngineUnavailable(f"tesseract is not usable: {exc}") from exc
            try:
                with pool.api(self.options.languages, None, self.options.warm_engines) as api:
                    return pool.library.available_languages(api.handle)
            except LibraryUnavailable as unlisted:
                raise EngineUnavailable(f"tesseract is not usable: {unlisted}") from exc

    def recognise(
        self, page: PageImage, deadline: float, languages: str | None = None, *,
        in_process: bool = True, reader: bool = False,
    ) -> list[Line]:  # fmt: skip
        """OCR one page with ``languages`` ('+'-joined; None: the configured ones); every line,
        word and box comes from the same TSV output. ``in_process=False`` reads it through the
        CLI even when the library is loaded: the same words and boxes, in another process's
        memory; ``reader=True`` in the warm reader process (``ocr.reader``) if it runs and is
        free, else through the CLI."""
        languages = languages or self.options.languages
        if languages != self.options.languages:
            missing = sorted(set(languages.split("+")) - self.installed_languages())
            if missing:
                raise InvalidParameter(f"OCR languages not installed: {', '.join(missing)}")
        if reader:
            with self.reader.claim() as ours:
                try:
                    if ours:
                        tsv = self.reader.tsv(page.path, page.index, languages, deadline, page.dpi)
                        return lines_from_tsv(parse_tsv(tsv), page)
                except ReaderUnavailable as exc:  # it died: this page goes through the CLI
                    log.warning("page reader unavailable", extra={"error": str(exc)})
            return self._recognise_cli(page, deadline, languages)  # not up, busy or dead
        pool = self._library() if in_process else None
        if pool is None:
            return self._recognise_cli(page, deadline, languages)
        try:
            with pool.api(languages, self.options.psm, self.options.warm_engines) as api:
                tsv = api.tsv(page.path, page.index, deadline, page.dpi)
        except LibraryUnavailable as exc:  # installed, yet its traineddata would not load
            raise EngineUnavailable(str(exc)) from exc
        return lines_from_tsv(parse_tsv(tsv), page)

    def _recognise_cli(self, page: PageImage, deadline: float, languages: str) -> list[Line]:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise EngineTimeout("the request timed out before OCR could run")
        psm = ["--psm", str(self.options.psm)] if self.options.psm is not None else []
        dpi = ["--dpi", str(page.dpi)] if page.dpi else []
        options = ["-l", languages, *psm, *dpi, "-c", "tessedit_create_tsv=1"]
        try:
            tsv = run_tesseract(page.path, options, remaining)
        except TesseractMissing as exc:
            raise EngineUnavailable(str(exc)) from exc
        except TesseractFailed as exc:
            raise UnsupportedMedia(
                f"Tesseract could not read page {page.index + 1}: {exc}"
            ) from exc
        except TesseractTimedOut as exc:
            raise EngineTimeout("OCR took longer than the request timeout") from exc
        return lines_from_tsv(parse_tsv(tsv), page)


def parse_tsv(tsv: str) -> dict[str, list[object]]:
    """Tesseract's TSV as one list per column, the same for the CLI's output and the library's.

    Parsed here rather than by pytesseract's ``Output.DICT``, which rounds confidences to whole
    numbers: both paths keep Tesseract's own figures (``96.590767``).
    """
    columns: dict[str, list[object]] = {name: [] for name in TSV_COLUMNS}
    for row in tsv.splitlines():
        fields = row.split("\t")
        if len(fields) != len(TSV_COLUMNS) or not fields[0].isdigit():  # the CLI's header row
            continue
        for name, value in zip(TSV_COLUMNS, fields, strict=True):
            columns[name].append(value)
    return columns


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
            word = without_rules(part)
            if word:
                grouped.setdefault(key, []).append(Word(word, box, confidence=conf))
    return [
        Line(tuple(words), page_index=page.index, block=int(key[1]), paragraph=int(key[2]))  # type: ignore[call-overload]
        for key, words in grouped.items()
        if not rule_line(words)
    ]


def without_rules(token: str) -> str:
    """``token`` without the rules read into it (``RULE_EDGES``): "" for a token that is only
    rule strokes ("|", "__"), a word's glued rule taken off ("|Mazda|" is "Mazda")."""
    return token.strip(RULE_EDGES)


def rule_line(words: list[Word]) -> bool:
    """Whether a line is a rule or border read as text: no letter or digit in any of its
    words, and a stroke a printed line leaves (``RULE_STROKES``) in one of them."""
    return all(NO_ALPHANUMERIC.fullmatch(w.text) for w in words) and any(
        RULE_STROKES.search(w.text) for w in words
    )

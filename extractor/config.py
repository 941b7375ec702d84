"""Settings of the extractor: one frozen dataclass, read once from defaults, env, then overrides.

Every field is an environment variable ``EXTRACTOR_<NAME>`` and a CLI flag ``--<name>``; the
README's settings table is generated from the same metadata (``settings_table()``), so the three
can never disagree.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, get_args, get_type_hints

from .formats import DEFAULT_CHOICES
from .net.ssrf import OutboundPolicy

ENV_PREFIX = "EXTRACTOR_"
ENGINES = ("faster-whisper", "openai-whisper")
SPEAKER_MODES = ("channels", "auto")  # ?speakers=: one speaker per stereo channel, or diarized


class SettingsError(ValueError):
    """A setting has a value that cannot be used; the message names the variable."""


def _setting(default: Any, help: str, *, choices: tuple[str, ...] | None = None) -> Any:
    return field(default=default, metadata={"help": help, "choices": choices})


def _cpu_count() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


@dataclass(frozen=True)
class Settings:
    """What one extractor deployment is configured to do."""

    # -- serving --------------------------------------------------------------------------
    bind: str = _setting("127.0.0.1:8000", "Address gunicorn listens on (HOST:PORT).")
    workers: int = _setting(
        0, "gunicorn worker processes; 0 means one per CPU core (each loads its own engines)."
    )
    threads: int = _setting(
        4, "Threads per worker: one runs the engine, the others answer health checks and queue."
    )
    engine_slots: int = _setting(
        1, "Extractions a worker runs at once; more waits in the worker's queue."
    )
    queue_size: int = _setting(
        8, "Requests a worker lets wait for an engine slot; beyond it: 503 with Retry-After."
    )
    request_timeout: float = _setting(
        900.0, "Seconds one extraction may take (queue wait included) before a 504."
    )
    header_timeout: float = _setting(
        10.0,
        "Seconds a request's line and headers may take to arrive (408 and close; a connection"
        " that sent nothing is just closed). Requests are received whole before a thread sees"
        " them, so a slow client holds no thread meanwhile.",
    )
    body_timeout: float = _setting(
        30.0,
        "Seconds a request body may take to arrive, plus 1 s per EXTRACTOR_BODY_MIN_RATE bytes"
        " received (408 and close).",
    )
    body_min_rate: int = _setting(
        100_000,
        "Bytes per second an upload at least this fast never times out (a 200 MB upload has"
        " 30 s + 2,000 s); a body dribbled slower gets its 408 after ~EXTRACTOR_BODY_TIMEOUT.",
    )
    send_timeout: float = _setting(
        30.0,
        "Seconds a client may take to read a reply, plus 1 s per EXTRACTOR_BODY_MIN_RATE bytes"
        " of it; then the connection is closed and the thread serving it freed.",
    )
    keepalive_timeout: int = _setting(
        75,
        "Seconds an idle kept-alive connection waits for the client's next request (it holds no"
        " thread meanwhile). Longer than common clients' and proxies' own idle limits (httpx"
        " 5 s, nginx upstream 60 s), so they close first instead of sending a request into a"
        " connection being closed.",
    )
    max_pending_connections: int = _setting(
        256,
        "Requests one worker may be receiving at once (their bodies spooled to memory up to"
        " 64 KiB, then to an unlinked file in EXTRACTOR_TMP_DIR); a connection beyond them gets"
        " 503 with Retry-After.",
    )
    secret: str | None = _setting(
        None, "Shared secret: when set, requests need 'Authorization: Bearer <secret>'."
    )
    default_format: str = _setting(
        "json",
        "Reply format when the Accept header leaves the choice open.",
        choices=DEFAULT_CHOICES,
    )
    validate_replies: bool = _setting(
        True, "Check every JSON reply against schemas/importable.schema.json before sending it."
    )
    tmp_dir: str | None = _setting(
        None, "Directory for per-request temporary files (default: the system's)."
    )
    log_level: str = _setting("info", "Log level (debug, info, warning, error).")
    malloc_huge_pages: bool = _setting(
        True,
        "Back the workers' large heap blocks with transparent huge pages (glibc's"
        " GLIBC_TUNABLES=glibc.malloc.hugetlb=1, set by `extractor serve` re-executing itself"
        " once): a transcription then faults ~6x fewer pages, ~20% less CPU on a 6 s clip; no"
        " effect where the kernel's THP is off.",
    )
    metrics: bool = _setting(True, "Serve Prometheus metrics at GET /metrics.")
    metrics_require_secret: bool = _setting(
        False,
        "Put /metrics behind EXTRACTOR_SECRET too (off: scrapers need no secret, and the"
        " numbers hold no request content).",
    )
    # -- asynchronous jobs (POST /v1/jobs) ------------------------------------------------
    data_dir: str = _setting(
        "./data",
        "Directory of the job database (jobs.db, SQLite) when EXTRACTOR_DATABASE_URL is unset.",
    )
    database_url: str | None = _setting(
        None,
        "SQLAlchemy URL of the job database (postgresql+psycopg://...): every server on it"
        " shares one queue; uploads and results are kept in it too. Unset: SQLite in"
        " EXTRACTOR_DATA_DIR (one machine).",
    )
    job_workers: int = _setting(
        1,
        "Asynchronous jobs one server process runs at once, on threads of their own at"
        " EXTRACTOR_JOB_NICENESS (0: this process runs none, it only queues them).",
    )
    job_niceness: int = _setting(
        10,
        "Nice value added to job threads (and the processes they start) so synchronous"
        " requests come first on a busy CPU; 0 keeps them equal.",
    )
    job_timeout: float = _setting(
        14400.0, "Seconds of work one job may use over all its attempts before it fails (504)."
    )
    job_lease_seconds: float = _setting(
        30.0,
        "A running job's lease: a job whose server died (SIGKILL) is taken again this long"
        " after its last heartbeat (every third of it), by a restarted server or another one.",
    )
    job_ttl_seconds: float = _setting(
        86400.0,
        "Seconds a finished job is kept; then its result is deleted and GET answers 404.",
    )
    max_queued_jobs_per_client: int = _setting(
        20, "Queued jobs one client address may have waiting; one more gets 429 + Retry-After."
    )
    webhook_secret: str | None = _setting(
        None,
        "Key of the X-Signature HMAC-SHA256 on webhook calls; a job with a callback_url is"
        " refused (400) without it.",
    )
    webhook_attempts: int = _setting(
        8,
        "Tries of one webhook call (timeouts, connection errors, 429, 5xx are retried with"
        " backoff 1, 2, 4 ... s, at most 5 min apart).",
    )
    webhook_timeout: float = _setting(10.0, "Seconds one webhook attempt may take in all.")
    outbound_allow: str = _setting(
        "",
        "Comma-separated [http|https://]HOST[:PORT|:*] webhook destinations allowed although"
        " private, loopback or link-local (refused otherwise), as EXTRACTOR_LABELING_OUTBOUND_ALLOW.",
    )
    # -- limits ---------------------------------------------------------------------------
    max_upload_bytes: int = _setting(200 * 1024 * 1024, "Largest accepted upload in bytes (413).")
    max_pages: int = _setting(100, "Most pages (PDF pages, TIFF frames) in one document (413).")
    max_audio_seconds: float = _setting(3 * 3600.0, "Longest accepted audio, in seconds (413).")
    audio_chunk_seconds: float = _setting(
        30.0,
        "Seconds of decoded audio a worker holds at once: longer audio is decoded in pieces of"
        " this length into a temporary file (64 KB per second and channel) and transcribed in"
        " windows of at most this length, cut at quiet moments. 60 makes a one-minute clip one"
        " faster-whisper call as bare makes it (2 encoder passes instead of 4, 10% more of a"
        " LibriVox minute's words) but took an hour of 8 kHz speech to 337 MB (30: 262 MB).",
    )
    max_ocr_languages: int = _setting(
        3, "Most Tesseract languages one request may name in ?ocr_languages= (400)."
    )
    # -- OCR ------------------------------------------------------------------------------
    ocr_languages: str = _setting(
        "eng", "Tesseract languages, '+'-joined (each needs Debian's tesseract-ocr-<lang>)."
    )
    ocr_psm: int | None = _setting(
        None, "Tesseract page segmentation mode (--psm); unset keeps Tesseract's default (3)."
    )
    ocr_rotate: bool = _setting(
        True,
        "Read pages scanned sideways, upside down or askew: a page whose first reading looks"
        " unreadable or sloped is turned upright and read again, its boxes kept in the upload's"
        " pixels (off: every page is read as it is; per request: ?ocr_rotate=).",
    )
    ocr_parallel_pages: int = _setting(
        0, "Pages of one document OCR'd at once; 0 means one per CPU core."
    )
    ocr_in_process_pages: int = _setting(
        1,
        "Of those, how many are read inside the worker (30-40 MB each for a 300 dpi page, and"
        " some kept afterwards); its other pages in flight go through the tesseract CLI, whose"
        " memory is its own process's, for ~0.06 s of model loading per page (0: all of them).",
    )
    pdf_dpi: int = _setting(300, "Resolution PDF pages are rendered at before OCR, in dpi.")
    pdf_page_timeout: float = _setting(
        60.0,
        "Seconds PDFium may spend rendering one PDF page (a 300 dpi page of text takes ~0.1 s)"
        " before a 504; each PDF renders in a process of its own, killed at the timeout, so"
        " no other request waits for it.",
    )
    pdf_render_memory_mb: int = _setting(
        1024,
        "Address space (MB) the process rendering one PDF may use (a 300 dpi scanned A4 page"
        " peaks ~110 MB); a page that needs more is refused with a 413.",
    )
    ocr_in_process: bool = _setting(
        True,
        "Run Tesseract in-process (libtesseract, models kept loaded: no process start per page);"
        " false, or a library that won't load, runs the tesseract CLI per page.",
    )
    ocr_warm_engines: int = _setting(
        1,
        "Loaded Tesseract instances a worker keeps between pages (15-30 MB each for eng); the"
        " least recently used language set is dropped first. One more saves a multi-page"
        " document or a second language set ~50 ms of model loading.",
    )
    # -- speech ---------------------------------------------------------------------------
    asr_engine: str = _setting("faster-whisper", "Speech engine.", choices=ENGINES)
    asr_model: str | None = _setting(
        None,
        "Whisper model: a CTranslate2 directory (faster-whisper), an openai-whisper name or .pt"
        " path; unset: the bundled tiny.en.",
    )
    asr_compute_type: str = _setting(
        "int8", "CTranslate2 compute type for faster-whisper (int8, float32, ...)."
    )
    asr_threads: int = _setting(
        1, "CPU threads one transcription uses (workers x threads should not exceed the cores)."
    )
    asr_language: str | None = _setting(
        None, "Spoken language (ISO 639-1); unset: detect (English-only models: 'en')."
    )
    asr_beam_size: int = _setting(5, "Beam size of the Whisper decoder (1: greedy).")
    asr_vad: bool = _setting(
        True, "Voice activity detection: silence and noise give no text instead of hallucinations."
    )
    cache_dir: str | None = _setting(
        None,
        "Where derived models (the openai-whisper checkpoint) are cached; default"
        " $XDG_CACHE_HOME/extractor.",
    )
    # -- speaker labels (speakers=auto; the extractor[speakers] extra) --------------------
    speakers_max_seconds: float = _setting(
        1200.0,
        "Longest audio speakers=auto labels, in seconds (413); past 20 min senko clusters with"
        " UMAP+HDBSCAN instead of the spectral clustering measured here.",
    )
    speakers_merge_similarity: float = _setting(
        0.92,
        "Cosine similarity (0-1] of two groups' mean voices at or above which they are one"
        " speaker; tuned on generated talks (bench/speakers.md).",
    )
    speakers_min_speech: float = _setting(
        3.6,
        "Seconds of speech a voice needs to be a speaker of its own, less joins the nearest"
        " voice (unless num_speakers/min_speakers ask for more); bench/speakers.md.",
    )
    speakers_max_count: int = _setting(
        20, "Largest num_speakers, min_speakers or max_speakers a request may give (400 above)."
    )

    def __post_init__(self) -> None:
        for f in dataclasses.fields(self):
            choices = f.metadata.get("choices")
            value = getattr(self, f.name)
            if choices and value not in choices:
                raise SettingsError(
                    f"{ENV_PREFIX}{f.name.upper()}={value!r}: expected one of {', '.join(choices)}"
                )
        positive = ("threads", "engine_slots", "max_upload_bytes", "max_pages", "pdf_dpi",
                    "max_ocr_languages", "pdf_render_memory_mb", "body_min_rate",
                    "max_pending_connections", "keepalive_timeout", "webhook_attempts",
                    "max_queued_jobs_per_client")  # fmt: skip
        for name in (*positive, "asr_threads", "asr_beam_size", "speakers_max_count"):
            if getattr(self, name) < 1:
                raise SettingsError(f"{ENV_PREFIX}{name.upper()} must be at least 1")
        for name in ("workers", "queue_size", "ocr_parallel_pages", "ocr_in_process_pages",
                     "ocr_warm_engines", "job_workers", "job_niceness"):  # fmt: skip
            if getattr(self, name) < 0:
                raise SettingsError(f"{ENV_PREFIX}{name.upper()} must not be negative")
        if min(self.request_timeout, self.max_audio_seconds, self.pdf_page_timeout,
               self.header_timeout, self.body_timeout, self.send_timeout, self.job_timeout,
               self.job_lease_seconds, self.job_ttl_seconds, self.webhook_timeout) <= 0:  # fmt: skip
            raise SettingsError("timeouts and durations must be positive")
        if min(self.speakers_max_seconds, self.speakers_min_speech) <= 0:
            raise SettingsError("speaker durations must be positive")
        if not 0 < self.speakers_merge_similarity <= 1:
            raise SettingsError(f"{ENV_PREFIX}SPEAKERS_MERGE_SIMILARITY must be in (0, 1]")
        try:  # a typo in the allow-list stops the server at start, not a webhook later
            OutboundPolicy(self.outbound_allow, setting=f"{ENV_PREFIX}OUTBOUND_ALLOW")
        except ValueError as exc:
            raise SettingsError(str(exc)) from None

    # -- derived --------------------------------------------------------------------------
    @property
    def worker_count(self) -> int:
        return self.workers or _cpu_count()

    @property
    def job_database_url(self) -> str:
        """EXTRACTOR_DATABASE_URL, or the SQLite file in EXTRACTOR_DATA_DIR."""
        return self.database_url or f"sqlite:///{Path(self.data_dir) / 'jobs.db'}"

    @property
    def page_parallelism(self) -> int:
        return self.ocr_parallel_pages or _cpu_count()

    @property
    def model_cache_dir(self) -> Path:
        if self.cache_dir:
            return Path(self.cache_dir)
        base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
        return Path(base) / "extractor"

    # -- construction ---------------------------------------------------------------------
    @classmethod
    def load(
        cls, environ: Mapping[str, str] | None = None, overrides: Mapping[str, Any] | None = None
    ) -> Settings:
        """Defaults, then ``EXTRACTOR_*`` variables of ``environ``, then ``overrides``."""
        environ = os.environ if environ is None else environ
        hints = get_type_hints(cls)
        values: dict[str, Any] = {}
        for f in dataclasses.fields(cls):
            raw = environ.get(ENV_PREFIX + f.name.upper())
            if raw is not None:
                values[f.name] = parse_value(f.name, hints[f.name], raw)
        unknown = set(overrides or {}) - {f.name for f in dataclasses.fields(cls)}
        if unknown:
            raise SettingsError(f"unknown settings: {', '.join(sorted(unknown))}")
        values.update({k: v for k, v in (overrides or {}).items()})
        return cls(**values)


def parse_value(name: str, hint: Any, raw: str) -> Any:
    """Turn the text of an env var or flag into the field's type, naming the variable on error."""
    text = raw.strip()
    if text == "" and (isinstance(hint, str) or _is_optional(hint)):
        return None
    kind = hint if isinstance(hint, str) else type_name(hint)
    try:
        if kind == "bool":
            lowered = text.lower()
            if lowered in {"1", "true", "yes", "on"}:
                return True
            if lowered in {"0", "false", "no", "off"}:
                return False
            raise ValueError(text)
        if kind == "int":
            return int(text)
        if kind == "float":
            return float(text)
    except ValueError:
        raise SettingsError(f"{ENV_PREFIX}{name.upper()}={raw!r} is not a valid {kind}") from None
    return text


def _is_optional(hint: Any) -> bool:
    return type(None) in get_args(hint)


def type_name(hint: Any) -> str:
    """``int`` for ``int`` and for ``int | None``."""
    args = [a for a in get_args(hint) if a is not type(None)]
    return (args[0] if args else hint).__name__


def setting_fields() -> list[tuple[dataclasses.Field[Any], str]]:
    """Every setting with its type name, for the CLI and the README table."""
    hints = get_type_hints(Settings)
    return [(f, type_name(hints[f.name])) for f in dataclasses.fields(Settings)]


def settings_table() -> str:
    """The README's Markdown table of every setting."""
    rows = ["| Environment variable | CLI flag | Default | Meaning |", "|---|---|---|---|"]
    for f, _kind in setting_fields():
        default = "unset" if f.default is None else f"`{f.default}`"
        flag = "--" + f.name.replace("_", "-")
        rows.append(
            f"| `{ENV_PREFIX}{f.name.upper()}` | `{flag}` | {default} | {f.metadata['help']} |"
        )
    return "\n".join(rows)

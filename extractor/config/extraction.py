"""Settings of the extractor (``EXTRACTOR_*``): what one deployment is configured to do.

Every field is declared with :func:`~extractor.config.fields.setting`; from it come its
environment variable ``EXTRACTOR_<NAME>``, the flag ``--<name>`` of ``extractor serve`` and
``extractor extract``, its checks and its row of the README's tables (``make settings-table``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from .engines import EngineSettings, cpu_count
from .fields import setting
from .intake import IntakeSettings
from .jobs import JobSettings

# Reply formats a deployment may answer in when the Accept header leaves the choice open: those
# that fit every document (a subtitle format cannot answer for an image). Named here rather than
# read from the formats registry, which sits above the settings; tests/test_settings.py checks
# the two agree.
DEFAULT_FORMATS = ("json", "text")
# Seconds of a live turn's window a slide keeps (EXTRACTOR_REALTIME_SLIDE_SECONDS says it; the
# decoding policy, extractor.realtime.items.DecodePolicy, uses it).
SLIDE_KEEP_SECONDS = 7.0


@dataclass(frozen=True)
class Settings(JobSettings, EngineSettings, IntakeSettings):
    """What one extractor deployment is configured to do.

    How the engines read (OCR, PDF pages, speech, speaker labels) is declared in
    :class:`EngineSettings`, how asynchronous jobs run in :class:`JobSettings` (each its own
    README table); these are serving, limits and live transcription.
    """

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
    secret: str | None = setting(
        None,
        "",
        "Shared secret: when set, requests need 'Authorization: Bearer <secret>' (or a named"
        " key of EXTRACTOR_API_KEYS). Its holders are one identity, `shared` in the metrics:"
        " they see and cancel the jobs submitted with it (or with no secret), never a named"
        " key's, so existing clients keep working while no key's jobs or callback URLs reach"
        " whoever holds the one secret everyone shared.",
        secret=True,
    )
    api_keys: str | None = setting(
        None,
        "",
        "File of named API keys, one `name:key` a line (`#` comments and blank lines ignored;"
        " a name is 1-32 of A-Z a-z 0-9 _ . - and neither `shared` nor `none`; a key is 16 or"
        " more characters without spaces; one name may have several keys, for a rotation)."
        " When set, requests need one of its keys (or EXTRACTOR_SECRET) as 'Authorization:"
        " Bearer <key>'; each key's jobs are visible and cancellable with a key of its name"
        " only (another's are a 404), the metrics count requests by its name (label `key`),"
        " and its live streams count against EXTRACTOR_REALTIME_SESSIONS_PER_CLIENT by name"
        " too. Re-read when it changes (checked on every request; replace it by renaming a new"
        " file over it): an added key works and a removed one is refused without a restart. A"
        " file that cannot be read or parsed then keeps the keys read last (an error is"
        " logged); at start it stops the server.",
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
        " once), the models' own blocks excepted: a transcription then faults ~20x fewer pages"
        " and takes ~25% less CPU on a 6 s clip, at the same peak; no effect where the kernel's"
        " THP is off.",
    )
    settle_library_pages: bool = setting(
        True,
        "",
        "At start, write back and drop the page cache of the installed packages' shared"
        " libraries that no process maps, so that the workers read them back from disk: pages"
        " pip or an image build has just written stay cached in large folios, which a worker"
        " maps whole (a ready worker ~30 MB larger right after an install). Costs reading"
        " ~100 MB of libraries once.",
    )
    release_library_pages: bool = setting(
        True,
        "",
        "Once a worker has loaded its engines (and again once it loads the job system), unmap"
        " the pages of libraries and read-only files it has mapped that are clean copies of the"
        " page cache: code run once at load, CPU variants it does not use. They stay cached and"
        " come back on a minor fault when run again. A ready worker ~35-55 MB smaller in RSS, a"
        " transcription's peak ~20-30 MB lower; the page cache and anonymous memory are"
        " unchanged.",
    )
    metrics: bool = setting(True, "", "Serve Prometheus metrics at GET /metrics.")
    metrics_require_secret: bool = setting(
        False,
        "",
        "Put /metrics behind EXTRACTOR_SECRET too (or any key of EXTRACTOR_API_KEYS; off:"
        " scrapers need no secret, and the numbers hold no request content).",
    )
    # -- limits ---------------------------------------------------------------------------
    max_upload_bytes: int = setting(
        200 * 1024 * 1024, "bytes", "Largest accepted upload in bytes (413).", at_least=1
    )
    max_pages: int = setting(
        100, "pages", "Most pages (PDF pages, TIFF frames) in one document (413).", at_least=1
    )
    max_page_pixels: int = setting(
        80_000_000,
        "pixels",
        "Most pixels one image or TIFF frame may have (413). An image other than a JPEG is"
        " decoded whole before it is scaled to EXTRACTOR_OCR_MAX_PIXELS (in a process of its"
        " own, capped by EXTRACTOR_PDF_RENDER_MEMORY_MB), so its pixels count as the bytes each"
        " takes: twice bilevel or palette, 4 times in colour (a colour PNG or TIFF of 20"
        " million); the default keeps that process under ~200 MB (bench/memory.md). A PDF"
        " page is drawn in at most EXTRACTOR_OCR_MAX_PIXELS whatever its size (with that at 0,"
        " a page past this limit at EXTRACTOR_PDF_DPI is refused).",
        at_least=1,
    )
    max_audio_seconds: float = setting(
        3 * 3600.0, "seconds", "Longest accepted audio, in seconds (413).", above=0
    )
    audio_chunk_seconds: float = setting(
        30.0,
        "seconds",
        "Seconds of decoded audio a worker holds at once: longer audio is decoded in pieces of"
        " this length into a temporary file (64 KB per second and channel), and the VAD reads it"
        " back in windows of at most this length, cut at quiet moments.",
        above=0,
    )
    asr_speech_window_seconds: float = setting(
        60.0,
        "seconds",
        "Most seconds of speech (the silence the VAD cut out not counted) one faster-whisper call"
        " transcribes: the speech found in all windows is joined as bare faster-whisper joins"
        " it, so audio with at most this much speech is transcribed exactly as bare"
        " faster-whisper transcribes it (same passes, text and times). Longer calls condition"
        " each 30 s pass on more of the text before it, which costs memory and CPU: 10 minutes"
        " of speech peaked at 279 MB per worker with 60, 332 MB with 120 (30: 274 MB).",
        above=0,
    )
    max_ocr_languages: int = setting(
        3,
        "languages",
        "Most Tesseract languages one request may name in ?ocr_languages= (400).",
        at_least=1,
    )
    # -- live transcription (WS /v1/realtime?intent=transcription) -------------------------
    realtime_sessions: int = setting(
        2,
        "sessions",
        "Live transcription streams one worker serves at once (0: none). A worker holding"
        " that many leaves new connections to a sibling with room; with no worker left with"
        " room, one more stream gets an `error` (code session_limit_reached) and close code"
        " 1013. A stream costs its worker a share of one decoding thread (bench/realtime.md).",
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
        "Seconds a live session may go without audio (an input_audio_buffer.append) from its"
        " client; then `error` idle_timeout and close 1001. Other messages do not count, so a"
        " client cannot hold a stream's place by sending one now and then.",
        above=0,
    )
    realtime_first_audio_seconds: float = setting(
        10.0,
        "seconds",
        "Seconds a new live session may go before its first audio (the idle timeout if"
        " shorter); then `error` idle_timeout and close 1001, its place free for another"
        " stream: a socket that connects and sends nothing holds a place no longer.",
        above=0,
    )
    realtime_sessions_per_client: int = setting(
        2,
        "sessions",
        "Live transcription streams one client address may hold at once, over all the"
        " server's workers, and as many one named API key may (EXTRACTOR_API_KEYS; the shared"
        " secret is not counted as a key); one more gets an `error` (code"
        " client_session_limit_reached) and close 1013, so one client cannot take every place."
        " Behind a proxy every client has its address: raise it there.",
        at_least=1,
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
        0.4,
        "seconds",
        "Seconds of new audio between two partial decodes of a live turn (a word is sent once"
        " successive decodes agree on it): less is lower latency for more CPU"
        " (bench/realtime.md).",
        above=0,
    )
    realtime_agreement: int = setting(
        3,
        "decodes",
        "Successive partial decodes of a live turn that must agree on a word before it is sent"
        " (LocalAgreement-n): 2 sends words one step sooner, 3 made fewer wrong ones final on"
        " the tuning recordings; 2 with EXTRACTOR_REALTIME_WORD_MARGIN_SECONDS=0.3 did better"
        " still in-process, but not over a WebSocket on a busy machine (bench/realtime.md).",
        at_least=2,
    )
    realtime_agreement_patience: int = setting(
        2,
        "decodes",
        "Partial decodes in a row that agreed on no new word, after which the newest two"
        " decodes suffice to send one (a word Whisper keeps hearing differently otherwise holds"
        " back every word after it under LocalAgreement-3): lower sends sooner; 0: never"
        " (bench/realtime.md).",
        at_least=0,
    )
    realtime_word_margin_seconds: float = setting(
        0.0,
        "seconds",
        "When above 0, a word is sent only once each agreeing decode heard at least this much"
        " audio after the word's end (Whisper's word timings, an alignment pass per decode:"
        " ~10-25% more CPU), so a word the end of the audio cut is not taken as heard; 0: no"
        " timings (bench/realtime.md).",
        at_least=0,
    )
    realtime_context_seconds: float = setting(
        5.0,
        "seconds",
        "Seconds of the previous turn (its audio, and its words as the decoder's forced"
        " prefix) a live turn's decodes hear before it, as far as they fit in"
        " EXTRACTOR_REALTIME_MIN_WINDOW_SECONDS with the turn: Whisper then hears a turn after"
        " the speech before it, as in a whole file (LibriVox 1.4% WER streamed against 5.6%"
        " with each turn heard alone); 0: each turn alone (bench/realtime.md).",
        at_least=0,
        at_most=25,
    )
    realtime_history_words: int = setting(
        0,
        "words",
        "The last words of a live session's finished turns, up to this many, that a turn's"
        " decodes get as Whisper's prompt (after the client's prompt, before the turn's own"
        " earlier words), as a whole file's windows get the text before them. With 120: one"
        " reader (LibriVox) 2.70% WER against 3.17% over twelve placements, for ~20% more"
        " decoding and a later end of turn with several streams; mixed on talks of two voices"
        " (a misheard sentence is carried into the next turn); 0: each turn's own words only"
        " (bench/realtime.md).",
        at_least=0,
        at_most=200,
    )
    realtime_tentative: bool = setting(
        True,
        "",
        "Send each live turn's revisable tail, the words the newest decode hears after those"
        " sent but not yet confirmed, as x_conversation.item.input_audio_transcription.tentative"
        " events (an extension, which the official openai client passes on like any event), so"
        " a page can show a word once one decode has heard it; false: OpenAI's events only."
        " With turn_detection null there is none: nothing of a buffer (no delta, no tail) is"
        " sent before its input_audio_buffer.commit.",
    )
    realtime_beam_size: int = setting(
        5,
        "beams",
        "Beam size of the decodes that end a live turn or window (their words are sent as"
        " heard): 5 made fewer wrong words final than greedy decoding (1, ~15% less CPU) on the"
        " tuning recordings (bench/realtime.md).",
        at_least=1,
    )
    realtime_partial_beam_size: int = setting(
        5,
        "beams",
        "Beam size of a live turn's partial decodes, which run about every"
        " EXTRACTOR_REALTIME_STEP_SECONDS while the speaker goes on and send the words"
        " EXTRACTOR_REALTIME_AGREEMENT of them agree on. 3: on a host whose decodes take twice"
        " as long, a talk's words reached the client 0.1-0.2 s sooner (median) for 0.75 points"
        " more WER on the held-out talks, ~10% less CPU (bench/realtime.md).",
        at_least=1,
    )
    realtime_slide_seconds: float = setting(
        12.0,
        "seconds",
        "A live turn's window longer than this (seconds of audio) starts anew at a word already"
        f" sent in its last {SLIDE_KEEP_SECONDS:g} s, those words forced as the decoder's prefix:"
        " a forced word costs"
        " a decoder step, dearer the longer the window, so a long turn's decodes and its end"
        " wait less (the espeak-ng talk's end-of-turn p95 1.10 s against 1.38 s, held-out talks"
        " as accurate, 10-19% less CPU); 0: a window grows until a pause past 20 s"
        " (bench/realtime.md).",
        at_least=0,
        at_most=25,
    )
    realtime_min_window_seconds: float = setting(
        10.0,
        "seconds",
        "Shortest audio Whisper's encoder is given for a live decode (the turn, padded with"
        " silence to this length); 30 is Whisper's full window, as faster-whisper always"
        " pads, about 10x the encoder's cost (bench/realtime.md).",
        above=0,
        at_most=30,
    )
    realtime_threads: int = setting(
        1,
        "threads",
        "CPU threads of a worker's live decoder. Equal to EXTRACTOR_ASR_THREADS (the default),"
        " live sessions run on the file engine's model, its weights in memory once; otherwise"
        " each worker loads a second copy on its first live session (~60 MB more).",
        at_least=1,
    )

    # -- derived --------------------------------------------------------------------------
    @property
    def live_shares_speech_model(self) -> bool:
        """Whether a worker's live decoder runs on the file engine's model (one more of its
        CTranslate2 workers, the weights shared) instead of loading a second copy: a second
        copy took a worker streaming beside a file transcription to 379 MB (bench/memory.md).
        Only the default engine, and only with the same threads, can share."""
        return (
            self.realtime_sessions >= 1
            and self.asr_engine == "faster-whisper"
            and self.realtime_threads == self.asr_threads
        )

    @property
    def worker_count(self) -> int:
        return self.workers or cpu_count()

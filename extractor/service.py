"""The extraction pipeline: decode -> engine -> Document, bounded by a per-worker engine gate.

Nothing here knows HTTP: the web layer and the ``extract`` command both call
``Extractor.extract`` and render the ``Document`` it returns.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from functools import partial
from pathlib import Path
from typing import TypeVar

import numpy as np

from . import metrics
from .asr import ENGINES, SpeechEngine, TranscribeOptions, Transcript, TranscriptSegment
from .asr.base import TimedWord
from .asr.speaker_count import SpeakerCount
from .asr.speakers import SpeakerDiarizer, label_segments
from .config import Settings
from .errors import EngineTimeout, InvalidParameter, ServiceBusy, SpeakerAudioTooLong
from .heap import limit_heap_retention, trim_heap
from .importable import Document, DocumentKind, Line, Page, Word
from .media import SAMPLE_RATE, MediaKind, PageImage, PdfPages, Sniffed, image_pages
from .ocr import OcrOptions, TesseractEngine
from .orientation import Reading, read_upright
from .spooled import SpooledAudio, decode_spooled

log = logging.getLogger(__name__)
T = TypeVar("T")
# Told how much of an extraction is done of how much in all (pages, or seconds of audio); an
# asynchronous job's progress, and where it stops (it raises) when cancelled.
Progress = Callable[[float, float], None]


def _no_progress(_done: float, _total: float) -> None:
    """A synchronous request's progress: nobody asks."""


def _shifted(progress: Progress, before: int, total: int, done: float, _part: float) -> None:
    """The progress of one stereo channel as progress of both: ``before`` samples done before
    it, of ``total`` samples in all."""
    progress(before / SAMPLE_RATE + done, total / SAMPLE_RATE)


# audio: "channels" transcribes each stereo channel as a speaker; "auto" diarizes the mix


@dataclass(frozen=True)
class ExtractOptions:
    """Per-request choices on top of the deployment's settings."""

    language: str | None = None  # audio: ISO 639-1, overrides EXTRACTOR_ASR_LANGUAGE
    speakers: str | None = None  # audio: one of SPEAKER_MODES
    speaker_count: SpeakerCount | None = None  # speakers=auto: num/min/max_speakers, if given
    word_timestamps: bool = False  # audio: each word's time span in the cell's metadata
    prompt: str | None = None  # audio: text that conditions the transcription (OpenAI 'prompt')
    temperature: float | None = None  # audio: decoding temperature; None keeps the fallback
    ocr_languages: str | None = None  # OCR: '+'-joined, overrides EXTRACTOR_OCR_LANGUAGES
    ocr_rotate: bool | None = None  # OCR: turn pages upright; None: EXTRACTOR_OCR_ROTATE


@dataclass
class Timings:
    """Seconds spent per stage of one request, for the structured log."""

    stages: dict[str, float] = field(default_factory=dict)

    @contextmanager
    def stage(self, name: str) -> Iterator[None]:
        started = time.perf_counter()
        try:
            yield
        finally:
            self.stages[name] = round(self.stages.get(name, 0.0) + time.perf_counter() - started, 4)


class EngineGate:
    """Runs extractions on a fixed number of engine threads with a bounded queue.

    A request past the bound is refused at once with 503 and Retry-After instead of waiting
    forever; a request that outlives its deadline gets a 504 while the engine thread finishes
    (or, for faster-whisper, stops at the next segment) on its own.
    """

    def __init__(self, slots: int, queue_size: int) -> None:
        self._executor = ThreadPoolExecutor(slots, thread_name_prefix="engine")
        self._limit = slots + queue_size
        self._pending = 0
        self._lock = threading.Lock()

    @property
    def pending(self) -> int:
        return self._pending

    def run(self, job: Callable[[], T], deadline: float, cancel: threading.Event) -> T:
        with self._lock:
            if self._pending >= self._limit:
                metrics.BUSY_REFUSALS.inc()
                raise ServiceBusy(
                    "every engine slot and queue place is taken; retry shortly",
                    headers={"Retry-After": "5"},
                )
            self._pending += 1
            metrics.QUEUE_DEPTH.inc()
        future = self._executor.submit(_then_trim_heap, job)
        future.add_done_callback(self._release)
        try:
            return future.result(timeout=max(deadline - time.monotonic(), 0))
        except FutureTimeout:
            cancel.set()
            future.cancel()
            raise EngineTimeout("the extraction took longer than the request timeout") from None

    def _release(self, _future: Future[T]) -> None:
        with self._lock:
            self._pending -= 1
            metrics.QUEUE_DEPTH.dec()

    def shutdown(self) -> None:
        self._executor.shutdown(wait=False, cancel_futures=True)


def _then_trim_heap(job: Callable[[], T]) -> T:
    """Run ``job``, then hand the heap's free pages back to the system.

    An extraction's buffers (decoded audio, CTranslate2's working memory, page images) are
    freed afterwards but glibc keeps the pages: measured ~30 MB of a worker's RSS per
    transcription that ``malloc_trim`` returns in a millisecond or two.
    """
    try:
        return job()
    finally:
        trim_heap()


class PagesAhead:
    """Pages produced in order on a thread of their own, at most ``ahead`` + 1 of them waiting
    for a reader at once (rendered PDF pages on disk: 9 MB each at 300 dpi).

    ``get(i)`` waits for page ``i``. A page that fails fails every later one with it, so no
    reader waits for a page that will never come.
    """

    def __init__(self, count: int, produce: Callable[[int], PageImage], ahead: int) -> None:
        self._produce = produce
        self._pages: list[Future[PageImage]] = [Future() for _ in range(count)]
        self._room = threading.Semaphore(ahead + 1)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="pages-ahead", daemon=True)

    def __enter__(self) -> PagesAhead:
        self._thread.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self._stop.set()
        self._room.release()  # in case it waits for room nobody will make
        self._thread.join()

    def get(self, index: int) -> PageImage:
        page = self._pages[index].result()
        self._room.release()
        return page

    def _run(self) -> None:
        for index, page in enumerate(self._pages):
            self._room.acquire()
            if self._stop.is_set():
                failure: BaseException = EngineTimeout("the document's reading stopped")
            else:
                try:
                    page.set_result(self._produce(index))
                    continue
                except BaseException as exc:  # handed to the page's reader
                    failure = exc
            for left in self._pages[index:]:
                if not left.done():
                    left.set_exception(failure)
            return


class Extractor:
    """One worker's engines (Tesseract and one Whisper engine) and the gate in front of them."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.ocr = TesseractEngine(
            OcrOptions(
                settings.ocr_languages, settings.ocr_psm, settings.ocr_in_process,
                settings.ocr_warm_engines,
            )
        )  # fmt: skip
        factory = ENGINES[settings.asr_engine]
        self.speech: SpeechEngine = factory(
            settings.asr_model, settings.asr_threads, settings.asr_compute_type,
            settings.model_cache_dir,
        )  # fmt: skip
        self.gate = EngineGate(settings.engine_slots, settings.queue_size)
        self.speakers = SpeakerDiarizer(  # loads on first speakers=auto
            settings.asr_threads, settings.speakers_merge_similarity, settings.speakers_min_speech
        )
        self._ocr_status: dict[str, object] | None = None

    def load(self) -> None:
        """Load and warm everything; gunicorn calls this in each worker right after the fork."""
        started = time.monotonic()
        limit_heap_retention()
        # The speech model first: loaded after Tesseract's, its loading scratch fragmented the
        # heap around Tesseract's models and a ready worker held 4 MB more.
        self.speech.load()
        self._ocr_status = self.ocr.check()
        trim_heap()  # the warm-up's scratch memory: a ready worker's RSS is then its steady one
        seconds = time.monotonic() - started
        metrics.ENGINE_LOAD_SECONDS.set(seconds)
        log.info("engines ready", extra={"load_s": round(seconds, 2)})

    def readiness(self) -> tuple[bool, dict[str, object]]:
        """Whether this worker can serve every kind of file, and the details why not."""
        ocr = self._ocr_status
        ready = bool(ocr) and not ocr.get("missing_languages") and self.speech.loaded  # type: ignore[union-attr]
        return ready, {
            "tesseract": ocr or "not checked",
            "speech": {"engine": self.speech.name, "loaded": self.speech.loaded},
            "queue": {"pending": self.gate.pending},
        }

    def extract(
        self,
        path: Path,
        name: str,
        sniffed: Sniffed,
        workdir: Path,
        options: ExtractOptions | None = None,
        timings: Timings | None = None,
        *,
        progress: Progress | None = None,
        timeout: float | None = None,
        gated: bool = True,
    ) -> Document:
        """Turn the file at ``path`` into a Document within the request timeout.

        An asynchronous job passes ``progress`` (told the pages or seconds of audio done of
        the total as they are done; raising there stops the extraction between pages or audio
        windows), its own ``timeout`` and ``gated=False``: it runs on the caller's thread,
        outside the gate whose slots are the synchronous requests'.
        """
        options = options or ExtractOptions()
        timings = timings or Timings()
        seconds = self.settings.request_timeout if timeout is None else timeout
        deadline = time.monotonic() + seconds
        cancel = threading.Event()
        report = progress or _no_progress

        def job() -> Document:
            if sniffed.kind is MediaKind.AUDIO:
                return self._audio(path, name, workdir, options, timings, cancel, report)
            return self._ocr(path, name, sniffed, workdir, deadline, timings, options, report)

        with timings.stage("queue+work"):
            if not gated:
                return job()
            return self.gate.run(job, deadline, cancel)

    # -- OCR ------------------------------------------------------------------------------

    def _ocr(
        self, path: Path, name: str, sniffed: Sniffed, workdir: Path, deadline: float,
        timings: Timings, options: ExtractOptions, progress: Progress,
    ) -> Document:  # fmt: skip
        max_pages = self.settings.max_pages
        if sniffed.kind is MediaKind.PDF:
            # PDFium runs in a renderer process of this document's own (media.PdfPages): the
            # pages' pixels are rendered there, outside this worker's memory, and written into
            # the workdir; Tesseract reads them as any other document's pages (_ocr_pages).
            # A page past EXTRACTOR_PDF_PAGE_TIMEOUT kills that process, nobody else's.
            with timings.stage("decode"):
                pdf = PdfPages(
                    path, workdir, self.settings.pdf_dpi, max_pages,
                    page_timeout=self.settings.pdf_page_timeout, deadline=deadline,
                    memory_mb=self.settings.pdf_render_memory_mb,
                )  # fmt: skip
            try:
                # The renderer works ahead of the readers: a page is rendered while the ones
                # before it are read, not when a reader comes for it.
                with PagesAhead(
                    pdf.count, lambda i: pdf.render(i, deadline), self.settings.page_parallelism
                ) as ahead:
                    per_page = self._ocr_pages(
                        pdf.count, ahead.get, deadline, timings, options, progress
                    )
            finally:
                pdf.close()
        else:
            with timings.stage("decode"):
                images = image_pages(path, workdir, max_pages)
            per_page = self._ocr_pages(
                len(images), images.__getitem__, deadline, timings, options, progress
            )
        if len(per_page) > 1 and self.settings.ocr_in_process_pages:
            # Pages leave 15-20 MB in the warm API and its heap (a 10-page 300 dpi PDF: 242 MB
            # after, 224 MB once renewed), which the next transcription's peak would stand on;
            # ~50 ms once per document gives it back. A single image keeps its API as it is.
            with timings.stage("renew"):
                self.ocr.renew()
        pages = tuple(page for page, _lines in per_page)
        lines = tuple(line for _page, page_lines in per_page for line in page_lines)
        return Document(name=name, kind=DocumentKind.OCR, lines=lines, pages=pages)

    def _ocr_pages(
        self, count: int, page: Callable[[int], PageImage], deadline: float, timings: Timings,
        options: ExtractOptions, progress: Progress = _no_progress,
    ) -> list[tuple[Page, list[Line]]]:  # fmt: skip
        """OCR ``count`` pages, ``EXTRACTOR_OCR_PARALLEL_PAGES`` at a time, in page order.

        At most ``EXTRACTOR_OCR_IN_PROCESS_PAGES`` of them are read by the warm in-process
        Tesseract at once; a page that finds every such place taken goes through the CLI. A
        300 dpi page costs Tesseract 30-40 MB while it is read and leaves some of it in the
        reader's heap: in a worker that also holds a speech model, two pages at once pushed a
        10-page PDF to 314 MB and the next transcription to 311 MB, one page at a time in
        process plus one through the CLI keeps both under 300 MB at the price of the CLI's
        model loading (~0.06 s) on half the pages.
        """
        in_process = threading.BoundedSemaphore(self.settings.ocr_in_process_pages)
        done = [0]
        counting = threading.Lock()

        def one(index: int) -> tuple[Page, list[Line]]:
            image = page(index)
            warm = in_process.acquire(blocking=False)  # never, with 0 places
            try:
                read = self._ocr_page(image, deadline, timings, options, in_process=warm)
            finally:
                if warm:
                    in_process.release()
            with counting:
                done[0] += 1
                progress(done[0], count)
            return read

        return self._pages_in_parallel(count, one)

    def _ocr_page(
        self, image: PageImage, deadline: float, timings: Timings, options: ExtractOptions,
        *, in_process: bool = True,
    ) -> tuple[Page, list[Line]]:  # fmt: skip
        if image.derived:
            # A re-encoded image's pixels were just freed; glibc would keep them in its arenas
            # for the whole document (a 10-page 300 dpi PDF rendered in-process: peak 379 MB
            # without, 339 with). PDF pages now render in their own process (media.PdfPages),
            # so for them this only returns what Tesseract freed from the previous page.
            trim_heap()

        def read(page: PageImage) -> list[Line]:
            return self.ocr.recognise(page, deadline, options.ocr_languages, in_process=in_process)

        rotate = self.settings.ocr_rotate if options.ocr_rotate is None else options.ocr_rotate
        try:
            with timings.stage("engine"):
                reading = read_upright(read, image, deadline) if rotate else Reading(read(image))
        finally:
            if image.derived:  # a 300 dpi page is ~9 MB: don't keep a long PDF's pages on disk
                image.path.unlink(missing_ok=True)
        turn = reading.turn
        return Page(image.index, image.width, image.height, 90 * turn.quarter, turn.skew), (
            reading.lines
        )

    def _pages_in_parallel(self, count: int, work: Callable[[int], T]) -> list[T]:
        """Pages run concurrently (one Tesseract instance each), results kept in page order."""
        if count == 1:
            return [work(0)]
        with ThreadPoolExecutor(min(count, self.settings.page_parallelism)) as pool:
            futures = [pool.submit(work, index) for index in range(count)]
            try:
                return [future.result() for future in futures]
            except BaseException:
                # One page failed (a 504, a bad page): the rest would only be thrown away.
                for future in futures:
                    future.cancel()
                raise

    # -- audio ----------------------------------------------------------------------------

    def _audio(
        self, path: Path, name: str, workdir: Path, options: ExtractOptions, timings: Timings,
        cancel: threading.Event, progress: Progress,
    ) -> Document:  # fmt: skip
        by_channel = options.speakers == "channels"
        if options.speakers == "auto":
            self.speakers.require()
        language = options.language or self.settings.asr_language
        if language is not None:
            self.speech.load()
            known = self.speech.languages()
            if language not in known:
                raise InvalidParameter(
                    f"language {language!r} is not one this model transcribes"
                    f" ({', '.join(sorted(known)[:12])}{', ...' if len(known) > 12 else ''})"
                )
        with timings.stage("decode"):
            audio = decode_spooled(
                path, workdir, max_seconds=self.settings.max_audio_seconds,
                keep_channels=by_channel, piece_seconds=self.settings.audio_chunk_seconds,
            )  # fmt: skip
            duration_ms = int(audio.duration * 1000)
            if options.speakers == "auto" and audio.duration > self.settings.speakers_max_seconds:
                raise SpeakerAudioTooLong(
                    f"speakers=auto labels at most {self.settings.speakers_max_seconds:g} s of"
                    f" audio (EXTRACTOR_SPEAKERS_MAX_SECONDS); this file has"
                    f" {audio.duration:.0f} s"
                )
            two = audio.rows == 2
            window = int(self.settings.audio_chunk_seconds * SAMPLE_RATE)
            tracks = [Track.spooled(audio, row, window) for row in range(audio.rows)]
            del audio
        transcribe = TranscribeOptions(
            language=language,
            beam_size=self.settings.asr_beam_size,
            vad=self.settings.asr_vad,
            word_timestamps=options.word_timestamps,
            prompt=options.prompt,
            temperature=options.temperature,
            cancel=cancel,
        )
        lines: list[Line] = []
        with timings.stage("engine"):
            total = sum(track.windows[-1][1] for track in tracks)
            if two:
                for channel in range(2):
                    before = channel * tracks[0].windows[-1][1]
                    report = partial(_shifted, progress, before, total)
                    transcript = self._transcribe(tracks[channel], transcribe, report)
                    speaker = f"Speaker {channel + 1}"
                    lines += transcript_lines(transcript, duration_ms, speaker, transcribe)
                    language = language or transcript.language
                lines.sort(key=lambda line: (line.start_ms or 0, line.end_ms or 0))
            elif options.speakers == "auto":
                lines, language = self._speaker_lines(
                    tracks[0], duration_ms, transcribe, timings, options.speaker_count, progress
                )
            else:
                transcript = self._transcribe(tracks[0], transcribe, progress)
                lines = transcript_lines(transcript, duration_ms, None, transcribe)
                language = transcript.language
        return Document(
            name=name, kind=DocumentKind.AUDIO, lines=tuple(lines), language=language,
            duration_ms=duration_ms,
        )  # fmt: skip

    def _speaker_lines(
        self, track: Track, duration_ms: int, options: TranscribeOptions, timings: Timings,
        count: SpeakerCount | None, progress: Progress,
    ) -> tuple[list[Line], str | None]:  # fmt: skip
        """``speakers=auto``: transcribe with word times, diarize, then label and split lines."""
        transcript = self._transcribe(track, replace(options, word_timestamps=True), progress)
        if options.cancel is not None and options.cancel.is_set():
            raise EngineTimeout("transcription took longer than the request timeout")
        with timings.stage("speakers"):
            # Whole, in memory: speakers=auto is bounded by EXTRACTOR_SPEAKERS_MAX_SECONDS.
            turns = self.speakers.turns(track.read(0, track.windows[-1][1]), count)
        lines: list[Line] = []
        for segment, speaker in label_segments(transcript, turns):
            lines += transcript_lines(Transcript((segment,), None), duration_ms, speaker, options)
        return lines, transcript.language

    def _transcribe(
        self, track: Track, options: TranscribeOptions, progress: Progress = _no_progress
    ) -> Transcript:
        """Transcribe in windows of at most ``EXTRACTOR_AUDIO_CHUNK_SECONDS``, cut at quiet moments.

        Whisper's feature extraction and the VAD both work on the whole signal at once, which
        for ten minutes of audio peaked at ~500 MB above the worker's RSS; windows bound that,
        and a cancelled request stops at the next window for either engine.
        """
        self.speech.load()  # a no-op once loaded at worker start
        segments: list[TranscriptSegment] = []
        language = None
        for start, end in track.windows:
            if options.cancel is not None and options.cancel.is_set():
                raise EngineTimeout("transcription took longer than the request timeout")
            part = self.speech.transcribe(track.read(start, end), options)
            offset = start / SAMPLE_RATE
            segments += [shift(segment, offset) for segment in part.segments]
            language = language or part.language
            progress(end / SAMPLE_RATE, track.windows[-1][1] / SAMPLE_RATE)
        return Transcript(tuple(segments), language)

    def close(self) -> None:
        self.gate.shutdown()


@dataclass(frozen=True)
class Track:
    """One track of speech cut into windows; a long one kept on disk and read a window at a
    time, so the engine's peak holds one window (1.9 MB) instead of the recording (38 MB for
    10 minutes, 690 MB for the 3-hour limit)."""

    windows: list[tuple[int, int]]  # sample ranges, see quiet_windows
    samples: np.ndarray | None  # in memory: a recording of one window at most
    path: Path | None  # float32 samples on disk otherwise

    @classmethod
    def of(cls, samples: np.ndarray, spill_to: Path) -> Track:
        windows = quiet_windows(samples, CHUNK_SECONDS * SAMPLE_RATE)
        if len(windows) == 1:
            return cls(windows, samples, None)
        try:
            np.ascontiguousarray(samples, dtype=np.float32).tofile(spill_to)
        except OSError as exc:  # a full temporary disk costs memory, not the request
            spill_to.unlink(missing_ok=True)
            log.warning("long audio kept in memory", extra={"error": str(exc)})
            return cls(windows, samples, None)
        return cls(windows, None, spill_to)

    @classmethod
    def spooled(cls, audio: SpooledAudio, row: int, longest: int) -> Track:
        """Row ``row`` of decoded audio, in windows of at most ``longest`` samples; the cuts are
        searched by reading the file where they may fall, never the whole of it."""
        windows = quiet_cuts(partial(audio.read, row), audio.length, longest)
        if audio.memory is not None:
            return cls(windows, audio.memory[row], None)
        return cls(windows, None, audio.files[row])

    def read(self, start: int, end: int) -> np.ndarray:
        if self.samples is not None:
            return self.samples[start:end]
        assert self.path is not None
        return np.fromfile(self.path, np.float32, count=end - start, offset=start * 4)


# Longest window of a Track made from samples in memory (``Track.of``; the server's windows are
# EXTRACTOR_AUDIO_CHUNK_SECONDS long): one Whisper window, so the VAD, the features and the
# encoder never hold more than 30 s at once (2-minute windows peaked ~30 MB higher on 60 s of
# speech in-process, at the same CPU time).
CHUNK_SECONDS = 30
QUIET_SEARCH_SECONDS = 10  # how far back from a window's end to look for a quiet cut
QUIET_FRAME = SAMPLE_RATE // 20  # 50 ms frames when looking for the quietest moment


def quiet_windows(samples: np.ndarray, longest: int) -> list[tuple[int, int]]:
    """Split ``samples`` into windows of at most ``longest`` samples, each cut at the quietest
    50 ms of the last ``QUIET_SEARCH_SECONDS`` before its limit, so no word is cut in half."""
    return quiet_cuts(lambda start, end: samples[start:end], len(samples), longest)


def quiet_cuts(
    read: Callable[[int, int], np.ndarray], total: int, longest: int
) -> list[tuple[int, int]]:
    """``quiet_windows`` over ``total`` samples that ``read(start, end)`` returns a part of."""
    windows = []
    start = 0
    search = min(QUIET_SEARCH_SECONDS * SAMPLE_RATE, longest // 2)
    while total - start > longest:
        low = start + longest - search
        frames = read(low, start + longest)
        usable = len(frames) // QUIET_FRAME * QUIET_FRAME
        energy = np.square(frames[:usable].reshape(-1, QUIET_FRAME)).mean(axis=1)
        cut = low + int(np.argmin(energy)) * QUIET_FRAME + QUIET_FRAME // 2
        windows.append((start, cut))
        start = cut
    windows.append((start, total))
    return windows


def shift(segment: TranscriptSegment, seconds: float) -> TranscriptSegment:
    """``segment`` moved ``seconds`` later: a window's times made relative to the whole audio."""
    return TranscriptSegment(
        segment.start + seconds,
        segment.end + seconds,
        segment.text,
        tuple(TimedWord(w.text, w.start + seconds, w.end + seconds) for w in segment.words),
        segment.detail,
    )


def transcript_lines(
    transcript: Transcript, duration_ms: int, speaker: str | None, options: TranscribeOptions
) -> list[Line]:
    """One line per segment, times clamped into the audio and never running backwards."""
    lines = []
    previous_start = 0
    for segment in transcript.segments:
        start = min(max(round(segment.start * 1000), previous_start), duration_ms)
        end = min(max(round(segment.end * 1000), start), duration_ms)
        if options.word_timestamps and segment.words:
            words = tuple(
                Word(token, start_ms=_clamp(w.start, start, end), end_ms=_clamp(w.end, start, end))
                for w in segment.words
                for token in w.text.split()
            )
        else:
            words = tuple(Word(token) for token in segment.text.split())
        if not words:
            continue
        lines.append(
            Line(
                words,
                start_ms=start,
                end_ms=end,
                speaker=speaker,
                word_timings=options.word_timestamps,
                detail=segment.detail,
            )
        )
        previous_start = start
    return lines


def _clamp(seconds: float, low: int, high: int) -> int:
    return min(max(round(seconds * 1000), low), high)

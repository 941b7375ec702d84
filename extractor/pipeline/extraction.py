"""The extraction pipeline: decode -> engine -> Document, bounded by a per-worker engine gate.

Nothing here knows HTTP: the web layer and the ``extract`` command both call
``Extractor.extract`` and render the ``Document`` it returns.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import replace
from functools import partial
from pathlib import Path
from typing import cast

import numpy as np
from PIL import Image

from extractor import metrics
from extractor.asr import ENGINES, SpeechEngine, TranscribeOptions, Transcript, TranscriptSegment
from extractor.asr.loaded_models import LoadedModels
from extractor.asr.models import served_models
from extractor.asr.speaker_count import SpeakerCount
from extractor.asr.speakers import SpeakerDiarizer, label_segments
from extractor.asr.speech_windows import joins_speech, speech_spans, transcribe_spans
from extractor.config import Settings
from extractor.errors import EngineTimeout, SpeakerAudioTooLong
from extractor.heap import limit_heap_retention, loading_without_huge_pages, trim_heap
from extractor.media.audio import SAMPLE_RATE
from extractor.media.images import PageImage, image_pages
from extractor.media.sniff import MediaKind, Sniffed
from extractor.media.spooled import decode_spooled
from extractor.ocr.orientation import Reading, in_upload_pixels, read_upright
from extractor.ocr.tesseract import OcrOptions, TesseractEngine
from extractor.pipeline.gate import EngineGate, PagesAhead, in_page_order
from extractor.pipeline.progress import Progress, ReportingEngine, no_progress, shifted
from extractor.pipeline.request import ExtractionRequest
from extractor.pipeline.scans import open_pdf
from extractor.pipeline.timings import Timings
from extractor.pipeline.transcript import Track, detected_language, shift, transcript_lines
from extractor.pipeline.turns import MemoryTurns, Place
from extractor.replies.importable import Document, DocumentKind, Line, Page
from extractor.replies.spool import PageSpool

log = logging.getLogger(__name__)
SPOOL_NAME = "lines.spool"  # a long OCR document's lines, in its request's work directory


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
        # One CTranslate2 worker more than the engine slots when live sessions run on the same
        # model (extractor.realtime.worker): a live decode never queues behind a file's.
        replicas = settings.engine_slots + int(settings.live_shares_speech_model)
        self.models = LoadedModels(
            lambda model: factory(model, settings.asr_threads, settings.asr_compute_type,
                                  settings.model_cache_dir, replicas),
            served_models(settings.asr_model), settings.asr_max_models,
        )  # fmt: skip
        self.gate = EngineGate(settings.engine_slots, settings.queue_size)
        self.turns = MemoryTurns(self.ocr.reader)  # the encoder and an in-process page: never both
        self.speakers = SpeakerDiarizer(  # loads on first speakers=auto
            settings.asr_threads, settings.speakers_merge_similarity, settings.speakers_min_speech
        )
        self._ocr_status: dict[str, object] | None = None
        # The one pixel limit media.images and the PDF renderer count pages against (and
        # Pillow's own decompression-bomb guard, which refuses at twice it): process-wide.
        Image.MAX_IMAGE_PIXELS = settings.max_page_pixels

    @property
    def speech(self) -> SpeechEngine:
        """The deployment's own speech engine (``EXTRACTOR_ASR_MODEL``)."""
        return self.models.engine()

    def load(self) -> None:
        """Load and warm everything; gunicorn calls this in each worker right after the fork."""
        started = time.monotonic()
        limit_heap_retention()
        self.ocr.reader.start_keeper()  # at this thread's priority, not a job's (ocr.reader)
        with loading_without_huge_pages():  # the models' blocks: written sparsely (heap)
            # The speech model first: loaded after Tesseract's, its loading scratch fragmented
            # the heap around Tesseract's models and a ready worker held 4 MB more.
            self.speech.load()
            self._ocr_status = self.ocr.check()
        trim_heap()  # the warm-up's scratch memory: a ready worker's RSS is then its steady one
        seconds = time.monotonic() - started
        metrics.ENGINE_LOAD_SECONDS.set(seconds)
        log.info("engines ready", extra={"load_s": round(seconds, 2)})

    def readiness(self) -> tuple[bool, dict[str, object]]:
        """Whether this worker can serve every kind of file, and the details why not."""
        ocr = self._ocr_status
        loaded = bool(self.models.loaded())  # the deployment's model, or one a request chose
        ready = bool(ocr) and not ocr.get("missing_languages") and loaded  # type: ignore[union-attr]
        return ready, {
            "tesseract": ocr or "not checked",
            "speech": {"engine": self.speech.name, "loaded": loaded},
            "queue": {"pending": self.gate.pending},
        }

    def extract(
        self, path: Path, name: str, sniffed: Sniffed, workdir: Path,
        options: ExtractionRequest | None = None, timings: Timings | None = None, *,
        progress: Progress | None = None, timeout: float | None = None, gated: bool = True,
        cancel: threading.Event | None = None,
        on_segment: Callable[[TranscriptSegment], None] | None = None,
    ) -> Document:  # fmt: skip
        """Turn the file at ``path`` into a Document within the request timeout.

        An asynchronous job passes ``progress`` (told the pages or seconds of audio done of
        the total as they are done; raising there stops the extraction between pages or audio
        windows), its own ``timeout`` and ``gated=False``: it runs on the caller's thread,
        outside the gate whose slots are the synchronous requests'. A streamed transcription
        passes ``on_segment``, told each speech segment as the engine decodes it, and sets
        ``cancel`` when its client goes away.
        """
        options = options or ExtractionRequest()
        timings = timings or Timings()
        seconds = self.settings.request_timeout if timeout is None else timeout
        deadline = time.monotonic() + seconds
        cancel = cancel or threading.Event()  # a job's: set when it is cancelled
        report = progress or no_progress

        def job() -> Document:
            if cancel.is_set():  # cancelled while it queued for a slot
                raise EngineTimeout("the extraction was cancelled before it started")
            if sniffed.kind is MediaKind.AUDIO:
                with self.models.use(options.model) as speech:
                    return self._audio(
                        speech, path, name, workdir, options, timings, cancel, report,
                        on_segment, job=not gated,
                    )  # fmt: skip
            # A job (ungated) reads its pages through the CLI: see pipeline.turns.
            return self._ocr(
                path, name, sniffed, workdir, deadline, timings, options, report, not gated
            )

        with timings.stage("queue+work"):
            if not gated:
                return job()
            return self.gate.run(job, deadline, cancel)

    def check_audio(self, options: ExtractionRequest) -> None:
        """Refuse before decoding what cannot be done (/extract and a job's submit alike):
        ``speakers=auto`` without its extra, a language the model lacks (400, language)."""
        if options.speakers == "auto":
            self.speakers.require()
        if language := options.language or self.settings.asr_language:
            self.models.check_language(language, options.model)

    # -- OCR ------------------------------------------------------------------------------

    def _ocr(
        self, path: Path, name: str, sniffed: Sniffed, workdir: Path, deadline: float,
        timings: Timings, options: ExtractionRequest, progress: Progress, job: bool = False,
    ) -> Document:  # fmt: skip
        settings = self.settings
        if sniffed.kind is MediaKind.PDF:
            # PDFium runs in a renderer process of this document's own (media.PdfPages): pages
            # are rendered there, outside this worker's memory, into the workdir, and read as any
            # others (_ocr_pages). A page past EXTRACTOR_PDF_PAGE_TIMEOUT kills that process.
            with timings.stage("decode"):
                pdf = open_pdf(path, workdir, settings, deadline)
            try:
                # The renderer works ahead of the readers: a page is rendered while the ones
                # before it are read, not when a reader comes for it.
                with PagesAhead(
                    pdf.count, lambda i: pdf.render(i, deadline), self.settings.page_parallelism
                ) as ahead:
                    document = self._assemble(
                        name, pdf.count, workdir,
                        self._ocr_pages(
                            pdf.count, ahead.get, deadline, timings, options, progress, job
                        ),
                    )  # fmt: skip
            finally:
                pdf.close()
        else:
            with timings.stage("decode"):
                images = image_pages(  # pages past EXTRACTOR_OCR_MAX_PIXELS: media.shrink
                    path, workdir, settings.max_pages, settings.ocr_max_pixels,
                    memory_mb=settings.pdf_render_memory_mb, deadline=deadline,
                )  # fmt: skip
            document = self._assemble(
                name, len(images), workdir,
                self._ocr_pages(
                    len(images), images.__getitem__, deadline, timings, options, progress, job
                ),
            )  # fmt: skip
        if len(document.pages) > 1 and self.settings.ocr_in_process_pages:
            # Pages leave 15-20 MB in the warm API and its heap (10 pages at 300 dpi: 242 MB,
            # renewed 224) under the next transcription's peak: ~50 ms a document. Not an image.
            with timings.stage("renew"):
                self.ocr.renew()
        return document

    @staticmethod
    def _assemble(
        name: str, count: int, workdir: Path, per_page: Iterator[tuple[Page, list[Line]]]
    ) -> Document:
        """The OCR document of ``count`` pages read in order: one page's lines stay in memory,
        more go to a spool in ``workdir`` as each page is read (``replies.spool``), so a
        document's size no longer adds to the process's peak (a dense page is ~0.5 MB of
        ``Line`` objects: 100 of them took a worker to 386 MB with its reply)."""
        pages: list[Page] = []
        if count == 1:
            lines: list[Line] = []
            for page, page_lines in per_page:
                pages.append(page)
                lines += page_lines
            return Document(name=name, kind=DocumentKind.OCR, lines=tuple(lines), pages=(*pages,))
        spool = PageSpool(workdir / SPOOL_NAME)
        try:
            for page, page_lines in per_page:
                pages.append(page)
                spool.add(page_lines)
        except BaseException:
            spool.discard()
            raise
        return Document(name=name, kind=DocumentKind.OCR, lines=spool.close(), pages=(*pages,))

    def _ocr_pages(
        self, count: int, page: Callable[[int], PageImage], deadline: float, timings: Timings,
        options: ExtractionRequest, progress: Progress = no_progress, job: bool = False,
    ) -> Iterator[tuple[Page, list[Line]]]:  # fmt: skip
        """OCR ``count`` pages, ``EXTRACTOR_OCR_PARALLEL_PAGES`` at a time, yielded in page order.

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
                with self.turns.page(warm, job) as place:  # not beside a transcription
                    read = self._ocr_page(image, deadline, timings, options, place)
            finally:
                if warm:
                    in_process.release()
            with counting:
                done[0] += 1
                progress(done[0], count)
            return read

        return in_page_order(count, one, self.settings.page_parallelism)

    def _ocr_page(
        self, image: PageImage, deadline: float, timings: Timings, options: ExtractionRequest,
        place: Place = Place.IN_PROCESS,
    ) -> tuple[Page, list[Line]]:  # fmt: skip
        if image.derived:
            # A re-encoded image's pixels were just freed; glibc would keep them in its arenas
            # for the whole document (a 10-page 300 dpi PDF rendered in-process: peak 379 MB
            # without, 339 with). PDF pages now render in their own process (media.PdfPages),
            # so for them this only returns what Tesseract freed from the previous page.
            trim_heap()

        def read(page: PageImage) -> list[Line]:
            return self.ocr.recognise(
                page, deadline, options.ocr_languages,
                in_process=place is Place.IN_PROCESS, reader=place is Place.READER,
            )  # fmt: skip

        rotate = self.settings.ocr_rotate if options.ocr_rotate is None else options.ocr_rotate
        try:
            with timings.stage("engine"):
                reading = read_upright(read, image, deadline) if rotate else Reading(read(image))
        finally:
            if image.derived:  # a 300 dpi page is ~9 MB: don't keep a long PDF's pages on disk
                image.path.unlink(missing_ok=True)
        turn = reading.turn
        # A page past EXTRACTOR_OCR_MAX_PIXELS was decoded or drawn scaled down: its size and
        # boxes in the upload's pixels (media.images, media.pdfrender).
        width, height = image.shown_size
        page = Page(image.index, width, height, 90 * turn.quarter, turn.skew, reading.gain)
        return page, in_upload_pixels(reading.lines, image)

    # -- audio ----------------------------------------------------------------------------

    def _audio(
        self, speech: SpeechEngine, path: Path, name: str, workdir: Path, options: ExtractionRequest, timings: Timings,
        cancel: threading.Event, progress: Progress,
        on_segment: Callable[[TranscriptSegment], None] | None = None, *, job: bool = False,
    ) -> Document:  # fmt: skip
        by_channel = options.speakers == "channels"
        language = options.language or self.settings.asr_language
        self.check_audio(options)  # the engine is loaded: its own languages
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
            word_timestamps=options.words,
            prompt=options.prompt,
            temperature=options.temperature,
            cancel=cancel,
            on_segment=on_segment,
        )
        lines: list[Line] = []
        transcripts: list[Transcript] = []  # the first that detected a language says which
        with timings.stage("engine"):
            total = sum(track.windows[-1][1] for track in tracks)
            if two:
                for channel in range(2):
                    before = channel * tracks[0].windows[-1][1]
                    report = partial(shifted, progress, before, total)
                    transcript = self._transcribe(
                        speech, tracks[channel], transcribe, timings, report, job
                    )
                    speaker = f"Speaker {channel + 1}"
                    lines += transcript_lines(transcript, duration_ms, speaker, transcribe)
                    transcripts.append(transcript)
                lines.sort(key=lambda line: (line.start_ms or 0, line.end_ms or 0))
            elif options.speakers == "auto":
                lines, transcript = self._speaker_lines(
                    speech, tracks[0], duration_ms, transcribe, timings, options.speaker_count,
                    progress, job,
                )  # fmt: skip
                transcripts.append(transcript)
            else:
                transcript = self._transcribe(speech, tracks[0], transcribe, timings, progress, job)
                lines = transcript_lines(transcript, duration_ms, None, transcribe)
                transcripts.append(transcript)
        language, extra = detected_language(transcripts, language)
        return Document(
            name=name, kind=DocumentKind.AUDIO, lines=tuple(lines), language=language,
            duration_ms=duration_ms, extra=extra,
        )  # fmt: skip

    def _speaker_lines(
        self, speech: SpeechEngine, track: Track, duration_ms: int, options: TranscribeOptions,
        timings: Timings, count: SpeakerCount | None, progress: Progress, job: bool,
    ) -> tuple[list[Line], Transcript]:  # fmt: skip
        """``speakers=auto``: transcribe with word times, diarize, then label and split lines."""
        transcript = self._transcribe(
            speech, track, replace(options, word_timestamps=True), timings, progress, job
        )
        if options.cancel is not None and options.cancel.is_set():
            raise EngineTimeout("transcription took longer than the request timeout")
        with timings.stage("speakers"):
            # Whole, in memory: speakers=auto is bounded by EXTRACTOR_SPEAKERS_MAX_SECONDS.
            turns = self.speakers.turns(track.read(0, track.windows[-1][1]), count)
        lines: list[Line] = []
        for segment, speaker in label_segments(transcript, turns):
            lines += transcript_lines(Transcript((segment,), None), duration_ms, speaker, options)
        return lines, transcript

    def _transcribe(
        self, speech: SpeechEngine, track: Track, options: TranscribeOptions, timings: Timings,
        progress: Progress = no_progress, job: bool = False,
    ) -> Transcript:  # fmt: skip
        """Transcribe ``track`` once no page is read in process (``pipeline.turns``)."""
        with self.turns.transcription(job):
            return self._transcribe_track(speech, track, options, timings, progress)

    def _transcribe_track(
        self, speech: SpeechEngine, track: Track, options: TranscribeOptions, timings: Timings,
        progress: Progress,
    ) -> Transcript:  # fmt: skip
        """Transcribe ``track``, holding at most one window of it at a time.

        Whisper's feature extraction and the VAD both work on the whole signal at once, which
        for ten minutes of audio peaked at ~500 MB above the worker's RSS. With the VAD on and
        faster-whisper, the VAD reads the track a window (``EXTRACTOR_AUDIO_CHUNK_SECONDS``) at
        a time and the speech it finds goes to the engine joined, up to
        ``EXTRACTOR_ASR_SPEECH_WINDOW_SECONDS`` per call, as bare faster-whisper joins it
        (``asr.speech_windows``: each window transcribed on its own took a LibriVox minute 4
        encoder passes against bare's 2); otherwise each window is transcribed on its own. A
        cancelled request stops at the next window either way.
        """
        # Whisper's encoder takes ~85 MB above the worker for each 30 s window (the attention of
        # 1500 positions); the idle Tesseract API's ~10 MB goes first, so that the peak stays
        # within 300 MB (bench/memory.md). The next page reloads it (~50 ms).
        self.ocr.release_idle()
        trim_heap()
        total = track.windows[-1][1] / SAMPLE_RATE
        if joins_speech(speech, options):

            def scanned(start: int, end: int) -> np.ndarray:
                progress(0, total)  # nothing transcribed yet; a job may stop here
                return track.read(start, end)

            with timings.stage("vad"):
                spans = speech_spans(scanned, track.windows, options.cancel)
            longest = int(self.settings.asr_speech_window_seconds * SAMPLE_RATE)
            reached = [0]  # the furthest sample read for the engine so far

            def read(start: int, end: int) -> np.ndarray:
                reached[0] = max(reached[0], end)
                return track.read(start, end)

            # After each engine call, what it was given is done.
            engine = ReportingEngine(speech, lambda: progress(reached[0] / SAMPLE_RATE, total))
            return transcribe_spans(cast(SpeechEngine, engine), read, spans, options, longest)
        segments: list[TranscriptSegment] = []
        language: tuple[str | None, float | None] = (None, None)  # the first window's detection
        for start, end in track.windows:
            if options.cancel is not None and options.cancel.is_set():
                raise EngineTimeout("transcription took longer than the request timeout")
            part = speech.transcribe(track.read(start, end), options)
            offset = start / SAMPLE_RATE
            segments += [shift(segment, offset) for segment in part.segments]
            if language[0] is None:
                language = (part.language, part.language_probability)
            progress(end / SAMPLE_RATE, total)
        return Transcript(tuple(segments), *language)

    def close(self) -> None:
        self.gate.shutdown()
        self.ocr.reader.close()

"""Long audio transcribed as bare faster-whisper transcribes it, with bounded memory.

Bare faster-whisper runs Silero VAD over the whole recording, cuts the silence out, joins the
speech and lets Whisper's seek loop walk it 30 s at a time. The server cannot hold a whole
recording (a decoded hour is 230 MB), so it reads it in windows of
``EXTRACTOR_AUDIO_CHUNK_SECONDS`` cut at quiet moments. Transcribing each of those windows on
its own cost Whisper passes: a window's speech rarely ends where a 30 s pass does, so each
window paid a short last pass of its own (a LibriVox minute took 4 encoder passes against bare's
2, 1.17x bare's CPU, and the joins lost words).

Here the VAD runs window by window (its memory is one window's), the speech it finds is
collected across windows, and Whisper gets the joined speech in batches of up to
``EXTRACTOR_ASR_SPEECH_WINDOW_SECONDS``, its times mapped back as faster-whisper maps them
(``SpeechTimestampsMap``). Audio with at most that much speech is then one engine call on the
same joined speech as bare's: the same passes and the same text.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
from dataclasses import replace
from typing import TYPE_CHECKING

import numpy as np

from ..errors import EngineTimeout
from .base import SpeechEngine, TimedWord, TranscribeOptions, Transcript, TranscriptSegment

if TYPE_CHECKING:
    from faster_whisper.vad import SpeechTimestampsMap

SAMPLE_RATE = 16_000  # the engines' input rate (media.SAMPLE_RATE; not imported: no cycle)

Span = tuple[int, int]  # [start, end) in samples of the whole track
Reader = Callable[[int, int], np.ndarray]  # samples [start, end) of the track


def joins_speech(engine: SpeechEngine, options: TranscribeOptions) -> bool:
    """Whether this transcription should run the VAD here and hand the engine joined speech:
    with the VAD on, for engines whose own VAD does the same (faster-whisper); openai-whisper's
    drops segments outside the speech instead, and keeps doing so window by window."""
    return options.vad and bool(getattr(engine, "joins_speech", False))


def speech_spans(
    read: Reader, windows: Iterable[Span], cancel: threading.Event | None = None
) -> list[Span]:
    """Where Silero VAD (faster-whisper's default options) hears speech, window by window.

    Each window is read, searched and let go before the next, so the VAD never holds more than
    one window; the windows are cut at quiet moments, where a span ending at a cut and the next
    one starting there join seamlessly.
    """
    from faster_whisper.vad import VadOptions, get_speech_timestamps

    from . import silero

    silero.install()
    vad = VadOptions()
    spans: list[Span] = []
    for start, end in windows:
        if cancel is not None and cancel.is_set():
            raise EngineTimeout("transcription took longer than the request timeout")
        stamps = get_speech_timestamps(read(start, end), vad)
        spans += [(start + s["start"], start + s["end"]) for s in stamps]
    return spans


def speech_batches(spans: list[Span], longest: int) -> list[list[Span]]:
    """``spans`` in order, grouped so that each group holds at most ``longest`` samples of
    speech; a span longer than that alone is cut into pieces of ``longest``."""
    batches: list[list[Span]] = []
    batch: list[Span] = []
    held = 0
    for first, last in spans:
        for start in range(first, last, longest):
            end = min(start + longest, last)
            if batch and held + end - start > longest:
                batches.append(batch)
                batch, held = [], 0
            batch.append((start, end))
            held += end - start
    if batch:
        batches.append(batch)
    return batches


def transcribe_spans(
    engine: SpeechEngine, read: Reader, spans: list[Span], options: TranscribeOptions,
    longest: int,
) -> Transcript:  # fmt: skip
    """The speech in ``spans`` transcribed in batches of at most ``longest`` samples, each
    batch's speech joined as faster-whisper joins it, its times those of the whole track."""
    from faster_whisper.vad import SpeechTimestampsMap

    segments: list[TranscriptSegment] = []
    language, probability = options.language, None
    plain = replace(options, vad=False, speech_only=True)  # the silence is already gone
    for batch in speech_batches(spans, longest):
        if options.cancel is not None and options.cancel.is_set():
            raise EngineTimeout("transcription took longer than the request timeout")
        speech = np.concatenate([read(start, end) for start, end in batch])
        part = engine.transcribe(speech, plain)
        del speech
        times = SpeechTimestampsMap([{"start": s, "end": e} for s, e in batch], SAMPLE_RATE)
        segments += [restored(segment, times) for segment in part.segments]
        if language is None:  # the first batch's detection is the transcript's
            language, probability = part.language, part.language_probability
    return Transcript(tuple(segments), language, probability)


def restored(segment: TranscriptSegment, times: SpeechTimestampsMap) -> TranscriptSegment:
    """``segment``'s times in the track, by faster-whisper's own rule
    (``restore_speech_timestamps``): a word's start and end fall in the speech span of its
    middle; a segment with words spans them, one without maps its own start and end."""
    if segment.words:
        words = []
        for word in segment.words:
            index = times.get_chunk_index((word.start + word.end) / 2)
            words.append(
                TimedWord(
                    word.text,
                    times.get_original_time(word.start, index),
                    times.get_original_time(word.end, index),
                )
            )
        return replace(segment, start=words[0].start, end=words[-1].end, words=tuple(words))
    return replace(
        segment,
        start=times.get_original_time(segment.start),
        end=times.get_original_time(segment.end, is_end=True),
    )

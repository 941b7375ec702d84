"""Speech cut into windows at quiet moments, and transcripts turned into the Document's lines."""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np

from extractor.asr import TranscribeOptions, Transcript, TranscriptSegment
from extractor.asr.base import TimedWord
from extractor.media.audio import SAMPLE_RATE
from extractor.media.spooled import SpooledAudio
from extractor.replies.importable import Line, Word

log = logging.getLogger(__name__)


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


def detected_language(
    transcripts: Sequence[Transcript], given: str | None
) -> tuple[str | None, dict[str, Any]]:
    """An audio document's language (the first transcript's that has one, else ``given``) and
    its ``Document.extra``: how sure the model was, when a multilingual model detected it."""
    found = next((t for t in transcripts if t.language), Transcript((), given))
    if found.language_probability is None:
        return found.language, {}
    return found.language, {"language_probability": round(found.language_probability, 3)}


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

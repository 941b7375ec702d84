"""Audio uploads decoded by FFmpeg (PyAV) into 16 kHz mono samples, bounded in length."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from extractor.errors import (
    AudioTooLong,
    UnsupportedMedia,
)

log = logging.getLogger(__name__)

SAMPLE_RATE = 16_000  # Hz: what Whisper expects

# -- audio --------------------------------------------------------------------------------


@dataclass(frozen=True)
class Audio:
    """Decoded speech: float32 samples at 16 kHz, one row per channel kept."""

    samples: np.ndarray  # shape (channels, n)

    @property
    def duration(self) -> float:
        return self.samples.shape[1] / SAMPLE_RATE  # seconds

    def mono(self) -> np.ndarray:
        return self.samples[0] if self.samples.shape[0] == 1 else self.samples.mean(axis=0)


@contextmanager
def av_errors() -> Iterator[None]:
    import av

    try:
        yield
    except (av.FFmpegError, ValueError, IndexError, OSError) as exc:
        raise UnsupportedMedia(f"the audio could not be decoded: {exc}") from exc


def decode_audio(path: Path, *, max_seconds: float, keep_channels: bool = False) -> Audio:
    """Decode the first audio track to 16 kHz float32, mono or one row per channel, in memory.

    Samples go straight into one growing buffer (no list of chunks to concatenate), so a long
    recording is never held twice; the duration limit is checked from the container first and
    enforced while decoding for files that do not declare it. The server decodes with
    ``spooled.decode_spooled`` instead, which holds a bounded piece at a time.
    """
    import av

    with av_errors(), av.open(str(path), metadata_errors="ignore") as container:
        track = open_audio(container, max_seconds, keep_channels)
        # The buffer never outgrows the longest accepted audio: a file that declares its length
        # gets exactly that, one that does not starts at 30 s and doubles up to the limit.
        limit = int((max_seconds + 1) * SAMPLE_RATE)
        first = min(int(((track.declared or 30) + 1) * SAMPLE_RATE), limit)
        buffer = np.empty((track.rows, first), dtype=np.float32)
        filled = 0
        for chunk in track.pieces():
            filled, buffer = _append(buffer, filled, chunk, limit, max_seconds)
    if filled == 0:
        raise UnsupportedMedia("the audio track holds no samples")
    return Audio(buffer[:, :filled])


@dataclass(frozen=True)
class AudioTrack:
    """An opened file's first audio track and the resampler to 16 kHz float rows."""

    container: Any
    stream: Any
    declared: float | None  # seconds, when the container states it
    channels: int  # in the file
    rows: int  # in the output: 1 (mono mix) or 2 (one per channel)
    resampler: Any

    def pieces(self) -> Iterator[np.ndarray]:
        """The resampled samples, (rows, n) float32 a frame at a time, then the resampler's
        tail; raise inside ``_av_errors``."""
        for frame in _frames(self.container, self.stream):
            for out in self.resampler.resample(frame):
                yield out.to_ndarray()
        for out in self.resampler.resample(None):
            yield out.to_ndarray()


def open_audio(container: Any, max_seconds: float, keep_channels: bool) -> AudioTrack:
    """The first audio track of an opened ``container``, checked (415 without one or without a
    decoder, 413 when its declared length passes ``max_seconds``)."""
    import av

    if not container.streams.audio:
        raise UnsupportedMedia("the file has no audio track")
    stream = container.streams.audio[0]
    declared = _declared_seconds(container, stream)
    if declared is not None and declared > max_seconds + 1:
        raise AudioTooLong(f"the audio lasts {declared:.0f} s; the limit is {max_seconds:.0f} s")
    if stream.codec_context is None:  # FFmpeg knows no decoder for this codec tag
        raise UnsupportedMedia("the audio track uses a codec that cannot be decoded")
    channels = stream.codec_context.channels or 1
    rows = 2 if keep_channels and channels >= 2 else 1
    resampler = av.AudioResampler(
        format="fltp", layout="stereo" if rows == 2 else "mono", rate=SAMPLE_RATE
    )
    return AudioTrack(container, stream, declared, channels, rows, resampler)


def _frames(container: Any, stream: Any) -> Iterator[Any]:
    import av

    try:
        yield from container.decode(stream)
    except av.error.EOFError:
        return


def _declared_seconds(container: object, stream: object) -> float | None:
    duration, time_base = getattr(stream, "duration", None), getattr(stream, "time_base", None)
    if duration and time_base:
        return float(duration * time_base)
    if getattr(container, "duration", None):
        return float(container.duration) / 1_000_000  # type: ignore[attr-defined]  # AV_TIME_BASE
    return None


def _append(
    buffer: np.ndarray, filled: int, chunk: np.ndarray, limit: int, max_seconds: float
) -> tuple[int, np.ndarray]:
    n = chunk.shape[1]
    if filled + n > limit:
        raise AudioTooLong(f"the audio lasts longer than the limit of {max_seconds:.0f} s")
    if filled + n > buffer.shape[1]:
        size = min(max(2 * buffer.shape[1], filled + n), limit)
        grown = np.empty((buffer.shape[0], size), np.float32)
        grown[:, :filled] = buffer[:, :filled]
        buffer = grown
    buffer[:, filled : filled + n] = chunk
    return filled + n, buffer

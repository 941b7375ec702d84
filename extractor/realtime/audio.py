"""Input audio formats, turned into Whisper's 16 kHz mono float32 samples as they arrive.

- ``audio/pcm``: PCM16 mono little-endian at 24 kHz (OpenAI's only PCM rate), or at 16 kHz (this
  server's extension, which skips resampling);
- ``audio/pcmu`` / ``audio/pcma``: G.711 mu-law / A-law at 8 kHz (telephony), expanded by
  table lookup.

Resampling is libswresample's (PyAV, already a dependency), which keeps its filter state between
pieces, so 40 ms messages give the same samples as one long buffer. An odd byte at the end of a
PCM16 message is kept for the next one, as a byte stream split anywhere must still work.
"""

from __future__ import annotations

import time
from collections import deque
from typing import Any

import numpy as np

SAMPLE_RATE = 16_000  # Whisper's and Silero's rate


def milliseconds(sample: int) -> int:
    """Where sample index ``sample`` of 16 kHz audio is, in whole milliseconds (the offsets
    of the protocol's events)."""
    return sample * 1000 // SAMPLE_RATE


def _ulaw_table() -> np.ndarray:
    codes = ~np.arange(256, dtype=np.uint8)
    sign = codes & 0x80
    exponent = (codes >> 4) & 0x07
    mantissa = codes & 0x0F
    magnitude = ((mantissa.astype(np.int32) << 3) + 0x84) << exponent
    value = np.where(sign, 0x84 - magnitude, magnitude - 0x84)
    return (value / 32768.0).astype(np.float32)


def _alaw_table() -> np.ndarray:
    codes = np.arange(256, dtype=np.uint8) ^ 0x55
    sign = codes & 0x80
    exponent = (codes >> 4) & 0x07
    mantissa = (codes & 0x0F).astype(np.int32)
    magnitude = np.where(
        exponent == 0, (mantissa << 4) + 8, ((mantissa << 4) + 0x108) << (exponent - 1)
    )
    value = np.where(sign, magnitude, -magnitude)
    return (value / 32768.0).astype(np.float32)


G711_TABLES = {"audio/pcmu": _ulaw_table(), "audio/pcma": _alaw_table()}


class AudioInput:
    """One session's audio format: ``convert(bytes)`` gives the 16 kHz samples they hold."""

    def __init__(self, kind: str, rate: int) -> None:
        self.kind, self.rate = kind, rate
        self._odd = b""  # a PCM16 sample's first byte, waiting for its second
        self._resampler: Any = None
        if rate != SAMPLE_RATE:
            import av

            self._resampler = av.AudioResampler(format="flt", layout="mono", rate=SAMPLE_RATE)

    @property
    def bytes_per_second(self) -> int:
        return self.rate * (2 if self.kind == "audio/pcm" else 1)

    def seconds(self, size: int) -> float:
        """How long ``size`` bytes of this format play."""
        return size / self.bytes_per_second

    def convert(self, data: bytes) -> np.ndarray:
        """The 16 kHz float32 samples of ``data`` (some may come out with the next piece:
        the resampler's filter looks a few samples ahead)."""
        if self.kind == "audio/pcm":
            data = self._odd + data
            whole = len(data) - len(data) % 2
            self._odd = data[whole:]
            samples = np.frombuffer(data[:whole], dtype="<i2").astype(np.float32) / 32768.0
        else:
            samples = G711_TABLES[self.kind][np.frombuffer(data, dtype=np.uint8)]
        if self._resampler is None or not len(samples):
            return samples
        return self._resample(samples)

    def _resample(self, samples: np.ndarray | None) -> np.ndarray:
        import av

        frame = None
        if samples is not None:
            frame = av.AudioFrame.from_ndarray(samples.reshape(1, -1), format="flt", layout="mono")
            frame.sample_rate = self.rate
        pieces = [out.to_ndarray().reshape(-1) for out in self._resampler.resample(frame)]
        return np.concatenate(pieces) if pieces else np.zeros(0, np.float32)

    def flush(self) -> np.ndarray:
        """What the resampler still holds (at the end of a stream or a committed buffer)."""
        if self._resampler is None:
            return np.zeros(0, np.float32)
        tail = self._resample(None)
        import av

        # A flushed resampler cannot take more: start a fresh one for what follows.
        self._resampler = av.AudioResampler(format="flt", layout="mono", rate=SAMPLE_RATE)
        return tail


class Arrivals:
    """When a session's audio arrived: (end sample, monotonic time) per append, kept only
    while a decode may still ask about that audio (the latency metrics)."""

    def __init__(self) -> None:
        self.marks: deque[tuple[int, float]] = deque()

    def add(self, end: int, arrived: float) -> None:
        self.marks.append((end, arrived))

    def forget(self, before: int) -> None:
        """Drop what only audio before sample ``before`` needs (one mark stays)."""
        while len(self.marks) > 1 and self.marks[1][0] <= before:
            self.marks.popleft()

    def of(self, sample: int, kept_from: int) -> float:
        """When the audio up to ``sample`` had arrived (now, if it has not yet); the marks
        only audio before ``kept_from`` (the session's oldest) needs are dropped."""
        self.forget(min(sample, kept_from))
        for end, arrived in self.marks:
            if end >= sample:
                return arrived
        return time.monotonic()

"""Audio decoded in bounded pieces: what fits one piece stays in memory, longer audio goes to
disk a piece at a time, so a worker's memory does not grow with the length of a recording.

Decoded 16 kHz float32 takes 3.8 MB per minute and channel: an hour held whole put a worker at
415 MB (measured, ``bench/flat.py``), the 3-hour limit would be 690 MB more. Here the decoder
fills one piece of ``EXTRACTOR_AUDIO_CHUNK_SECONDS`` (1.9 MB per channel for 30 s), appends it to
a float32 file per channel in the request's directory, and reuses it; the transcription then
reads its windows back from the file one at a time (``pipeline.transcript.Track``).
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

import numpy as np

from extractor.errors import AudioTooLong, EngineUnavailable, UnsupportedMedia
from extractor.media.audio import SAMPLE_RATE, av_errors, open_audio


@dataclass(frozen=True)
class SpooledAudio:
    """Decoded audio, 16 kHz float32, one row per channel kept (1 or 2)."""

    rows: int
    source_channels: int
    length: int  # samples per row
    memory: np.ndarray | None  # (rows, length) when it fit in one piece
    files: tuple[Path, ...]  # one float32 file per row otherwise

    @property
    def duration(self) -> float:
        return self.length / SAMPLE_RATE  # seconds

    def read(self, row: int, start: int, end: int) -> np.ndarray:
        """Samples ``start:end`` of ``row``: a view in memory, or read from its file."""
        end = min(end, self.length)
        if self.memory is not None:
            return self.memory[row, start:end]
        count = max(end - start, 0)
        return np.fromfile(self.files[row], np.float32, count=count, offset=start * 4)


def decode_spooled(
    path: Path, folder: Path, *, max_seconds: float, keep_channels: bool, piece_seconds: float
) -> SpooledAudio:
    """Decode ``path``'s first audio track as ``media.decode_audio`` does, holding at most one
    piece of ``piece_seconds`` in memory; longer audio is written to ``folder``."""
    import av

    piece = np.empty((2 if keep_channels else 1, max(int(piece_seconds * SAMPLE_RATE), 1)),
                     np.float32)  # fmt: skip
    limit = int((max_seconds + 1) * SAMPLE_RATE)
    filled = total = 0
    files: list[BinaryIO] = []
    paths: list[Path] = []
    with contextlib.ExitStack() as stack:
        with av_errors(), av.open(str(path), metadata_errors="ignore") as container:
            track = open_audio(container, max_seconds, keep_channels)
            rows = track.rows
            for chunk in track.pieces():
                n = chunk.shape[1]
                total += n
                if total > limit:
                    raise AudioTooLong(
                        f"the audio lasts longer than the limit of {max_seconds:.0f} s"
                    )
                used = 0
                while used < n:
                    take = min(n - used, piece.shape[1] - filled)
                    piece[:rows, filled : filled + take] = chunk[:, used : used + take]
                    filled, used = filled + take, used + take
                    if filled == piece.shape[1]:  # full: to disk, and start over
                        if not files:
                            paths = [folder / f"audio-{row}.f32" for row in range(rows)]
                            files = [stack.enter_context(p.open("wb")) for p in paths]
                        _write(files, piece, filled)
                        filled = 0
        if total == 0:
            raise UnsupportedMedia("the audio track holds no samples")
        if not files:
            return SpooledAudio(rows, track.channels, total, piece[:rows, :filled], ())
        _write(files, piece, filled)
    return SpooledAudio(rows, track.channels, total, None, tuple(paths))


def _write(files: list[BinaryIO], piece: np.ndarray, filled: int) -> None:
    try:
        for row, sink in enumerate(files):
            sink.write(piece[row, :filled].data)  # a row of a C-ordered array: contiguous
    except OSError as exc:  # a full temporary disk: not the client's fault, retry elsewhere
        raise EngineUnavailable(
            f"no room to hold the decoded audio in the temporary directory: {exc}"
        ) from exc

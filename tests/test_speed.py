"""Where a transcription's time goes: the engine reports its VAD, features and model seconds."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import suppress
from pathlib import Path

import pytest
from support import requires_espeak, start_server, stop_server

from extractor.asr import TranscribeOptions
from extractor.asr.faster import FasterWhisperEngine
from extractor.heap import HUGE_PAGES_TUNABLE
from extractor.media import SAMPLE_RATE, decode_audio

pytestmark = requires_espeak


@pytest.fixture(scope="module")
def engine() -> FasterWhisperEngine:
    engine = FasterWhisperEngine(None)
    engine.load()
    return engine


def test_each_window_logs_its_stages(
    engine: FasterWhisperEngine,
    speech_wav: bytes,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    path = tmp_path / "speech.wav"
    path.write_bytes(speech_wav)
    audio = decode_audio(path, max_seconds=60).mono()
    with caplog.at_level(logging.DEBUG, logger="extractor.asr.faster"):
        transcript = engine.transcribe(audio, TranscribeOptions("en"))
    assert "weather" in " ".join(s.text for s in transcript.segments).lower()
    [window] = [r for r in caplog.records if r.getMessage() == "window transcribed"]
    parts = {k: getattr(window, k) for k in ("audio_s", "vad_s", "features_s", "model_s")}
    assert parts["audio_s"] == pytest.approx(len(audio) / SAMPLE_RATE, abs=0.01)
    assert all(v > 0 for v in parts.values()), parts


@pytest.fixture(scope="module")
def one_worker() -> Iterator[tuple[str, int]]:
    """A real ``extractor serve --workers 1``: its URL and its worker's pid."""
    url, process = start_server("--workers", "1")
    try:
        yield url, worker_pids(process.pid)[0]
    finally:
        stop_server(process)


def worker_pids(master: int) -> list[int]:
    """gunicorn's workers: the master's child processes, from /proc."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with suppress(OSError):
                stat = (entry / "stat").read_text()
                if int(stat[stat.rindex(")") + 2 :].split()[1]) == master:
                    found.append(int(entry.name))
    return found


def test_workers_run_with_huge_pages_for_the_heap(one_worker: tuple[str, int]) -> None:
    _url, worker = one_worker
    environ = Path(f"/proc/{worker}/environ").read_bytes().split(b"\0")
    tunables = [v for v in environ if v.startswith(b"GLIBC_TUNABLES=")]
    assert tunables and HUGE_PAGES_TUNABLE.encode() in tunables[0]

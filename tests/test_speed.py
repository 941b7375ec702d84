"""Where a transcription's time goes: the engine reports its VAD, features and model seconds."""

from __future__ import annotations

import json
import logging
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from support import SPOKEN, requires_espeak, start_server, stop_server, worker_pids

from extractor.asr import TranscribeOptions
from extractor.asr.faster import FasterWhisperEngine
from extractor.heap import HUGE_PAGES_TUNABLE
from extractor.library_pages import settle_library_pages
from extractor.media.audio import SAMPLE_RATE, decode_audio

# serial: stage timings and a worker's peak RSS, measured alone (make test's second pass).
pytestmark = [requires_espeak, pytest.mark.serial]
# Issue 19's target: 300 MB for every server process. A clean clone's `make test` measured 312-318
# MB where older venvs measured 278-284: ~30 MB of clean library pages the kernel maps whole
# when pip has just written them (bench/pagecache.py, bench/memory.md). `one_worker` drops their
# cache first, which holds when this test runs alone; in the whole serial pass the pytest process
# has mapped the libraries by then (torch, accuracy tests), their cache can no longer be dropped,
# and the same clean clone measured 300-301 MB. So `make test` drops it right after the install,
# before any test process maps them: the serial pass then measured 271/281 MB (2026-11-26).
PEAK_LIMIT_MB = 300


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
    # Which words tiny.en hears in espeak's voice varies with the CPU and its load ("weather"
    # came back "whenever"); that the window was decoded into words is what this test needs.
    assert " ".join(s.text for s in transcript.segments).split()
    [window] = [r for r in caplog.records if r.getMessage() == "window transcribed"]
    parts = {k: getattr(window, k) for k in ("audio_s", "vad_s", "features_s", "model_s")}
    assert parts["audio_s"] == pytest.approx(len(audio) / SAMPLE_RATE, abs=0.01)
    assert all(v > 0 for v in parts.values()), parts


@pytest.fixture(scope="module")
def one_worker() -> Iterator[tuple[str, int]]:
    """A real ``extractor serve --workers 1``: its URL and its worker's pid (its libraries read
    back from disk, as on a machine where pip did not just write them)."""
    settle_library_pages()
    url, process = start_server("--workers", "1")
    try:
        yield url, worker_pids(process.pid)[0]
    finally:
        stop_server(process)


def test_workers_run_with_huge_pages_for_the_heap_but_not_for_the_models(
    one_worker: tuple[str, int],
) -> None:
    """glibc's huge pages for the blocks a request allocates; the models' ~700 MB of blocks,
    written sparsely, kept in 4 KB pages (heap.loading_without_huge_pages): with huge pages a
    ready worker held ~240 MB of them on Linux 6.18, 410 MB in all. A worker as it should be
    held 20-46 MB before what it keeps between requests was advised against huge pages
    (heap.keep_idle_memory_in_small_pages: khugepaged filled them out the longer it sat), ~0
    since; the bound sits between that and the failure, not at the edge of the good case."""
    _url, worker = one_worker
    environ = Path(f"/proc/{worker}/environ").read_bytes().split(b"\0")
    tunables = [v for v in environ if v.startswith(b"GLIBC_TUNABLES=")]
    assert tunables and HUGE_PAGES_TUNABLE.encode() in tunables[0]
    rollup = Path(f"/proc/{worker}/smaps_rollup").read_text()
    huge_mb = int(rollup.split("AnonHugePages:")[1].split()[0]) / 1024
    assert huge_mb <= 100, f"{huge_mb:.0f} MB of huge pages in a worker between requests"


def test_workers_read_the_token_embedding_from_a_file(one_worker: tuple[str, int]) -> None:
    """The speech model's largest matrix (tiny.en's 19.9 MB token embedding) is a mapping of a
    file in the cache, not the worker's own memory (asr/embedding_file.py), and holds no page
    between requests."""
    _url, worker = one_worker
    resident_kb, files = 0, set()
    inside = False
    for line in Path(f"/proc/{worker}/smaps").read_text().splitlines():
        fields = line.split()
        if fields and "-" in fields[0] and not fields[0].endswith(":"):
            inside = "token-embedding-" in line
            if inside:
                files.add(fields[-1])
        elif inside and line.startswith("Rss:"):
            resident_kb += int(fields[1])
    assert len(files) == 1, files
    assert resident_kb == 0


def upload(url: str, path: Path) -> tuple[int, str]:
    """POST ``path`` to ``url``/extract as multipart field ``upload``: status and body."""
    boundary = "speedtestboundary"
    body = (
        (
            f'--{boundary}\r\nContent-Disposition: form-data; name="upload"; filename="{path.name}"'
            "\r\nContent-Type: application/octet-stream\r\n\r\n"
        ).encode()
        + path.read_bytes()
        + f"\r\n--{boundary}--\r\n".encode()
    )
    request = urllib.request.Request(
        f"{url}/extract", data=body, method="POST",
        headers={"Content-Type": f"multipart/form-data; boundary={boundary}"},
    )  # fmt: skip
    try:
        with urllib.request.urlopen(request, timeout=600) as reply:
            return reply.status, reply.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()


def peak_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    raise LookupError("VmHWM")


def long_quiet_flac(path: Path, minutes: int, rate: int, channels: int) -> Path:
    """A FLAC of ``minutes`` of digital silence with a spoken sentence at the start: the whole
    length is decoded, resampled and searched by the VAD, the model runs on a few windows."""
    import av
    import numpy as np

    from extractor import samples

    spoken, spoken_rate = samples.decode_wav(samples.speech(SPOKEN))
    speech = np.interp(
        np.arange(int(spoken.shape[1] * rate / spoken_rate)) * spoken_rate / rate,
        np.arange(spoken.shape[1]), spoken[0],
    )  # fmt: skip
    layout = "stereo" if channels == 2 else "mono"
    with av.open(str(path), "w", format="flac") as container:
        stream = container.add_stream("flac", rate=rate)
        stream.layout = layout  # type: ignore[attr-defined]
        stream.format = "s16"  # type: ignore[attr-defined]
        for second in range(minutes * 60):
            block = np.zeros(rate, np.int16)
            if second * rate < len(speech):
                piece = speech[second * rate : (second + 1) * rate]
                block[: len(piece)] = (piece * 32767).astype(np.int16)
            frame = av.AudioFrame.from_ndarray(
                np.repeat(block, channels)[None, :], format="s16", layout=layout
            )
            frame.sample_rate = rate
            for packet in stream.encode(frame):  # type: ignore[attr-defined]
                container.mux(packet)
        for packet in stream.encode(None):  # type: ignore[attr-defined]
            container.mux(packet)
    return path


@pytest.mark.slow  # seconds of CPU each: make test runs it, make test-fast leaves it out
def test_a_long_recording_does_not_raise_the_worker_s_peak(
    one_worker: tuple[str, int], tmp_path: Path
) -> None:
    """40 minutes of 48 kHz stereo held whole would be 150 MB of samples on top of the worker;
    decoded in pieces it costs what a minute does (flat in length)."""
    url, worker = one_worker
    short = long_quiet_flac(tmp_path / "short.flac", 1, 48_000, 2)
    long = long_quiet_flac(tmp_path / "long.flac", 40, 48_000, 2)
    peaks = []
    for path in (short, long):
        Path(f"/proc/{worker}/clear_refs").write_text("5")  # VmHWM := the RSS now
        status, text = upload(url, path)
        assert status == 200, text
        # The sentence was decoded into words; which words tiny.en hears in espeak's voice
        # varies with the CPU and its load, and is the accuracy gate's to judge.
        assert " ".join(c["content"] for c in json.loads(text)["cells"]).split(), text[:500]
        peaks.append(peak_mb(worker))
    assert peaks[1] <= peaks[0] + 15, peaks  # flat in length: not 150 MB more
    assert peaks[1] <= PEAK_LIMIT_MB, peaks

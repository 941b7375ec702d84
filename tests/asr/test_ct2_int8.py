"""The int8 copy of the bundled speech model (extractor/asr/ct2_int8.py): loaded, it is the
same model as CTranslate2 quantizing the float16 one at load, bit for bit, at a far lower
peak RSS."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from extractor.asr.ct2_int8 import int8_model_dir
from extractor.asr.faster import bundled_model_dir

LOAD_PEAK = """
import sys
from extractor.heap import limit_heap_retention
limit_heap_retention()
import ctranslate2
def kb(field):
    return next(int(l.split()[1]) for l in open("/proc/self/status") if l.startswith(field))
before = kb("VmRSS")
model = ctranslate2.models.Whisper(sys.argv[1], compute_type="int8", intra_threads=1)
print((kb("VmHWM") - before) // 1024)
"""


@pytest.fixture(scope="module")
def int8_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return int8_model_dir(bundled_model_dir(), tmp_path_factory.mktemp("cache"))


@pytest.mark.slow  # seconds of the real model: make test runs it, make test-fast does not
def test_the_copy_is_written_once_and_loads_the_same_model(
    int8_dir: Path, speech_wav: bytes, tmp_path: Path
) -> None:
    import ctranslate2
    from faster_whisper import WhisperModel

    original = bundled_model_dir()
    assert int8_dir != original and (int8_dir / "tokenizer.json").is_file()
    assert (int8_dir / "model.bin").stat().st_size < 0.6 * (original / "model.bin").stat().st_size
    written = (int8_dir / "model.bin").stat().st_mtime_ns
    assert int8_model_dir(original, int8_dir.parent) == int8_dir  # cached, not rewritten
    assert (int8_dir / "model.bin").stat().st_mtime_ns == written
    assert int8_model_dir(int8_dir, tmp_path) == int8_dir  # already int8: used as it is

    features = np.random.default_rng(0).standard_normal((1, 80, 3000), np.float32)
    audio = tmp_path / "speech.wav"
    audio.write_bytes(speech_wav)
    seen: list[Any] = []
    for path in (original, int8_dir):
        model = WhisperModel(str(path), device="cpu", compute_type="int8", cpu_threads=1)
        encoded = model.model.encode(ctranslate2.StorageView.from_array(features), to_cpu=True)
        segments, _info = model.transcribe(str(audio), language="en", word_timestamps=True)
        seen.append((np.array(encoded), [
            (s.text, s.avg_logprob, s.start, s.end, [(w.word, w.start, w.end, w.probability)
                                                   for w in s.words or ()])
            for s in segments
        ]))  # fmt: skip
    assert np.array_equal(seen[0][0], seen[1][0])  # the encoder's output, bit for bit
    # The same words and times as the original; which words varies with the CPU, so only
    # that there are some.
    assert seen[0][1] == seen[1][1] and seen[0][1][0][0].split()


def test_loading_the_copy_peaks_far_lower(int8_dir: Path) -> None:
    """Measured: 174 MB above the process for the float16 model, 71 MB for the copy."""
    command = [sys.executable, "-c", LOAD_PEAK]
    runs = [
        subprocess.run([*command, str(path)], check=True, capture_output=True, text=True)
        for path in (bundled_model_dir(), int8_dir)
    ]
    peaks = [int(run.stdout) for run in runs]
    assert peaks[1] <= peaks[0] - 60, peaks


def test_an_unwritable_cache_loads_the_original(tmp_path: Path) -> None:
    if os.geteuid() == 0:
        blocked = tmp_path / "file"  # root writes anywhere: a file where a folder must be
        blocked.write_text("")
    else:
        blocked = tmp_path / "ro"
        blocked.mkdir(mode=0o500)
    assert int8_model_dir(bundled_model_dir(), blocked / "cache") == bundled_model_dir()

"""The token embedding read from a file (extractor/asr/embedding_file.py): the same model, its
pages out of the process's own memory, and a wrong file or an unwritable cache never mapped.

Each case loads the real int8 tiny.en and checks it against a copy loaded as CTranslate2 loads
it, in a process of its own (the mapping changes the process it runs in)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from extractor.asr.ct2_int8 import int8_model_dir
from extractor.asr.faster import bundled_model_dir

CHILD = """
import json, sys
from pathlib import Path
from extractor.asr.embedding_file import map_token_embedding
from faster_whisper import WhisperModel

def anon_kb():
    return next(int(l.split()[1]) for l in open("/proc/self/status") if l.startswith("RssAnon"))

def mapped_kb():
    kb, inside = 0, False
    for line in open("/proc/self/smaps"):
        if line[0] in "0123456789abcdef" and "-" in line.split()[0]:
            inside = "token-embedding-" in line
        elif inside and line.startswith("Rss:"):
            kb += int(line.split()[1])
    return kb

def heard(model):
    segments, _ = model.transcribe(sys.argv[3], language="en", word_timestamps=True)
    return [[s.text, s.avg_logprob, [[w.word, w.start, w.end, w.probability] for w in s.words]]
            for s in segments]

def load():
    return WhisperModel(str(model_dir), device="cpu", compute_type="int8", cpu_threads=1)

model_dir, cache, copies = Path(sys.argv[1]), sys.argv[2], int(sys.argv[4])
earlier = [load() for _ in range(copies - 1)]  # loaded from the same file before this one
mapped = load()
before = anon_kb()
mapping = map_token_embedding(model_dir, Path(cache) if cache != "-" else None)
after = anon_kb()
plain = load()  # as CTranslate2 loads it, nothing mapped
files = [line.split()[-1] for line in open("/proc/self/maps") if "token-embedding-" in line]
plain_words, mapped_words = heard(plain), heard(mapped)
read_kb = mapped_kb()
mapping.release()
print(json.dumps({"moved": mapping.size, "anon_freed_kb": before - after, "files": files,
                  "plain": plain_words, "mapped": mapped_words,
                  "read_kb": read_kb, "released_kb": mapped_kb()}))
"""


@pytest.fixture(scope="module")
def int8_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return int8_model_dir(bundled_model_dir(), tmp_path_factory.mktemp("models"))


@pytest.fixture(scope="module")
def audio(tmp_path_factory: pytest.TempPathFactory, speech_wav: bytes) -> Path:
    path = tmp_path_factory.mktemp("audio") / "speech.wav"
    path.write_bytes(speech_wav)
    return path


def _ct2_uses_mkl() -> bool:
    """CTranslate2's CPU backend here: MKL on an Intel CPU unless ``CT2_USE_MKL`` says
    otherwise (its documented default), oneDNN or another elsewhere."""
    forced = os.environ.get("CT2_USE_MKL")
    if forced is not None:
        return forced.strip().lower() in ("1", "true", "on")
    with open("/proc/cpuinfo") as cpuinfo:
        return any(line.startswith("vendor_id") and "GenuineIntel" in line for line in cpuinfo)


def _child(model_dir: Path, cache: Path | None, audio: Path, copies: int = 1) -> dict:
    run = subprocess.run(
        [sys.executable, "-c", CHILD, str(model_dir), str(cache or "-"), str(audio), str(copies)],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr[-3000:]
    return json.loads(run.stdout.strip().splitlines()[-1])


@pytest.mark.slow  # seconds of the real model: make test runs it, make test-fast does not
def test_the_embedding_leaves_memory_and_the_model_hears_the_same(
    int8_dir: Path, audio: Path, tmp_path: Path
) -> None:
    cache = tmp_path / "cache"
    seen = _child(int8_dir, cache, audio)
    rows, width = 51864, 384  # tiny.en's token embedding, int8
    assert rows * width - 8192 <= seen["moved"] <= rows * width
    assert seen["anon_freed_kb"] >= 16 * 1024  # its pages were the process's own (19 MB)
    [mapped_file] = seen["files"]
    assert Path(mapped_file).parent == cache
    # Every word, time and probability the same as the model loaded as CTranslate2 loads it.
    # (Which words is the CPU's: the two runs agree, and they heard some.)
    assert seen["mapped"] == seen["plain"] and seen["plain"][0][0].split()
    # With MKL (CTranslate2 packs the output layer's own copy), decoding read a few rows of it:
    # a page per token, no read-around. Without (any other CPU), the output layer multiplies by
    # the whole matrix at each token: all of it, and nothing else. Released after, either way.
    whole_kb = -(-rows * width // 4096) * 4 + 4  # its pages, one more where it is not aligned
    most_kb = 4 * 1024 if _ct2_uses_mkl() else whole_kb
    assert 0 < seen["read_kb"] <= most_kb and seen["released_kb"] == 0

    # A second worker maps the file the first one wrote.
    again = _child(int8_dir, cache, audio)
    assert again["files"] == [mapped_file] and again["mapped"] == again["plain"]
    assert len(list(cache.glob("token-embedding-*.bin"))) == 1


@pytest.mark.slow  # seconds of the real model: make test runs it, make test-fast does not
def test_a_wrong_file_is_written_again_before_anything_is_mapped(
    int8_dir: Path, audio: Path, tmp_path: Path
) -> None:
    cache = tmp_path / "cache"
    first = _child(int8_dir, cache, audio)
    [path] = [Path(p) for p in first["files"]]
    # Something else left a file of the right name and size with other bytes (replaced, as
    # a writer does: a file changed in place under a mapping would change the model too).
    wrong = path.with_suffix(".wrong")
    wrong.write_bytes(bytes(path.stat().st_size))
    os.replace(wrong, path)
    seen = _child(int8_dir, cache, audio)
    assert seen["moved"] > 0 and seen["mapped"] == seen["plain"]
    assert path.read_bytes().count(0) < path.stat().st_size // 2  # the matrix again


@pytest.mark.slow  # seconds of the real model: make test runs it, make test-fast does not
def test_without_a_writable_cache_the_embedding_stays_in_memory(
    int8_dir: Path, audio: Path, tmp_path: Path
) -> None:
    blocked = tmp_path / "file"  # a file where the cache's folder would be
    blocked.write_text("")
    for cache in (blocked / "cache", None):
        seen = _child(int8_dir, cache, audio)
        assert seen["moved"] == 0 and seen["files"] == []
        assert seen["mapped"] == seen["plain"]


@pytest.mark.slow  # seconds of the real model: make test runs it, make test-fast does not
def test_two_copies_in_memory_are_both_left_alone(
    int8_dir: Path, audio: Path, tmp_path: Path
) -> None:
    """An earlier model from the same file still holds its copy: which copy is the caller's
    cannot be told (and releasing pages of one freed since would zero whatever took its
    place), so neither is mapped."""
    seen = _child(int8_dir, tmp_path / "cache", audio, copies=2)
    assert seen["moved"] == 0 and seen["files"] == [] and seen["mapped"] == seen["plain"]


@pytest.mark.slow  # seconds of the real model: make test runs it, make test-fast does not
def test_a_float16_model_converted_at_load_is_left_alone(audio: Path, tmp_path: Path) -> None:
    """CTranslate2 quantizes the bundled float16 matrix at load: the bytes in memory are not
    the file's, so nothing is found to map."""
    seen = _child(bundled_model_dir(), tmp_path / "cache", audio)
    assert seen["moved"] == 0 and seen["files"] == [] and seen["mapped"] == seen["plain"]


def test_resident_runs_are_found_across_the_windows_asked_about() -> None:
    """``mincore`` is asked 1 GB at a time: a run across a window's edge is one run, and a
    large reservation costs no more than its windows."""
    import ctypes
    import mmap

    from extractor.asr import embedding_file

    libc = embedding_file._libc()
    assert libc is not None
    reserved = mmap.mmap(-1, 3 << 30)  # address space only, a few pages touched below
    start = ctypes.addressof(ctypes.c_char.from_buffer(reserved))
    page, window = mmap.PAGESIZE, embedding_file._MINCORE_WINDOW
    for offset in (0, page, window - page, window, 2 * window + 2 * page):
        reserved[offset] = 1
    runs = embedding_file._resident_runs(libc, start, start + (3 << 30))
    assert [(a - start, b - start) for a, b in runs] == [
        (0, 2 * page),
        (window - page, window + page),
        (2 * window + 2 * page, 2 * window + 3 * page),
    ]

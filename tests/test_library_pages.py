"""``extractor serve`` drops the installed libraries' cached pages before its workers map them
(extractor/library_pages.py): pages just written, dirty ones included, are read back
from disk; pages a process maps, and files that are not libraries, are left alone."""

from __future__ import annotations

import ctypes
import mmap
import os
from pathlib import Path

import pytest
from support import start_server, stop_server

from extractor.library_pages import (
    releasable_mappings,
    release_mapped_library_pages,
    settle_library_pages,
)

libc = ctypes.CDLL(None, use_errno=True)
libc.mmap.restype = ctypes.c_void_p
libc.mmap.argtypes = [
    ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long,
]  # fmt: skip
libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
libc.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p]

SIZE = 4 << 20  # bytes per file


def written(path: Path) -> Path:
    """A file of ``SIZE`` bytes just written: its pages cached and still dirty."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("wb") as fh:
        for block in range(SIZE // (1 << 20)):
            fh.write(bytes([block + 1]) * (1 << 20))
    return path


def cached_pages(path: Path) -> int:
    """How many of ``path``'s pages the page cache holds (``mincore`` over a mapping that
    touches none of them)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        address = libc.mmap(None, SIZE, mmap.PROT_READ, mmap.MAP_SHARED, fd, 0)
        assert address not in (None, ctypes.c_void_p(-1).value), os.strerror(ctypes.get_errno())
        try:
            vector = (ctypes.c_ubyte * (SIZE // mmap.PAGESIZE))()
            assert libc.mincore(address, SIZE, vector) == 0
            return sum(byte & 1 for byte in vector)
        finally:
            libc.munmap(address, SIZE)
    finally:
        os.close(fd)


def test_just_written_libraries_are_dropped_and_others_left(tmp_path: Path) -> None:
    root = tmp_path / "site-packages"
    library = written(root / "pkg.libs" / "libdemo-1a2b.so.3")
    module = written(root / "pkg" / "_ext.cpython-311-x86_64-linux-gnu.so")
    data = written(root / "pkg" / "weights.bin")
    mapped = written(root / "pkg" / "libmapped.so")
    everything = SIZE // mmap.PAGESIZE
    assert cached_pages(library) == everything  # dirty, as pip leaves them
    with mapped.open("rb") as fh, mmap.mmap(fh.fileno(), SIZE, prot=mmap.PROT_READ) as view:
        assert sum(view[offset] for offset in range(0, SIZE, mmap.PAGESIZE)) > 0  # touched
        assert settle_library_pages([root]) == 3
        assert cached_pages(library) == 0
        assert cached_pages(module) == 0
        assert cached_pages(data) == everything  # not a library
        assert cached_pages(mapped) == everything  # mapped here: left alone


@pytest.mark.parametrize("settle", [True, False])
def test_serve_settles_the_libraries_before_its_workers_start(tmp_path: Path, settle: bool) -> None:
    """A real server, with a site-packages directory of its own on its path holding a library
    just written: dropped from the cache before the server is ready, unless told not to."""
    root = tmp_path / "site-packages"
    library = written(root / "demo.libs" / "libdemo.so.1")
    flags = [] if settle else ["--no-settle-library-pages"]
    path = os.pathsep.join(filter(None, [str(root), os.environ.get("PYTHONPATH", "")]))
    _url, process = start_server("--workers", "1", *flags, env={"PYTHONPATH": path})
    try:
        assert cached_pages(library) == (0 if settle else SIZE // mmap.PAGESIZE)
    finally:
        stop_server(process)


def resident_kb(path: Path) -> int:
    """This process's resident kB of its mappings of ``path`` (/proc/self/smaps)."""
    total, ours = 0, False
    for line in Path("/proc/self/smaps").read_text().splitlines():
        if line[:1] in "0123456789abcdef" and "-" in line.split(" ", 1)[0]:
            ours = line.rstrip().endswith(str(path))
        elif ours and line.startswith("Rss:"):
            total += int(line.split()[1])
    return total


def test_a_worker_releases_clean_mapped_pages_and_keeps_everything_else(tmp_path: Path) -> None:
    """What ``release_mapped_library_pages`` may drop: pages of a read-only private mapping,
    copies of the page cache, which read back the same on the next touch. What it must not:
    a private mapping written to (its pages are the process's own), anonymous memory."""
    shared = written(tmp_path / "libcode.so")
    private = written(tmp_path / "libdata.so")
    anonymous = bytearray(b"\x07" * SIZE)
    with (
        shared.open("rb") as code_file, private.open("r+b") as data_file,
        mmap.mmap(code_file.fileno(), SIZE, flags=mmap.MAP_PRIVATE, prot=mmap.PROT_READ) as code,
        mmap.mmap(data_file.fileno(), SIZE, flags=mmap.MAP_PRIVATE,
                  prot=mmap.PROT_READ | mmap.PROT_WRITE) as data,
    ):  # fmt: skip
        before = [code[offset] for offset in range(0, SIZE, mmap.PAGESIZE)]  # every page touched
        for offset in range(0, SIZE, mmap.PAGESIZE):
            data[offset] = 0xEE  # copied on write: this process's own pages now
        assert resident_kb(shared) >= SIZE // 1024 * 0.9
        assert release_mapped_library_pages() >= SIZE // 1024 * 0.9
        assert resident_kb(shared) == 0
        assert resident_kb(private) >= SIZE // 1024 * 0.9
        assert [code[offset] for offset in range(0, SIZE, mmap.PAGESIZE)] == before  # read back
        assert all(data[offset] == 0xEE for offset in range(0, SIZE, mmap.PAGESIZE))
        assert anonymous == b"\x07" * SIZE


def test_only_read_only_private_file_mappings_without_pages_of_their_own_qualify() -> None:
    smaps = "\n".join([
        "7f0000000000-7f0000002000 r-xp 00001000 fd:01 11 /venv/lib/libct2.so",
        "Rss:                   8 kB", "Private_Clean:         4 kB", "Private_Dirty:         0 kB",
        "Anonymous:             0 kB",
        "7f0000002000-7f0000003000 r--p 00003000 fd:01 11 /venv/lib/libct2.so",  # RELRO: dirty
        "Rss:                   4 kB", "Private_Dirty:         4 kB", "Anonymous:             4 kB",
        "7f0000003000-7f0000004000 rw-p 00004000 fd:01 11 /venv/lib/libct2.so",
        "Rss:                   4 kB", "Private_Dirty:         0 kB", "Anonymous:             0 kB",
        "7f0000004000-7f0000005000 r--s 00000000 fd:01 12 /data/jobs.db-shm",
        "Rss:                   4 kB", "Private_Dirty:         0 kB", "Anonymous:             0 kB",
        "7f0000005000-7f0000008000 r--p 00000000 00:00 0 ",
        "Rss:                  12 kB", "Private_Dirty:         0 kB", "Anonymous:             0 kB",
        "7f0000008000-7f0000009000 r--p 00000000 fd:01 13 /usr/share/locale/locale-archive",
        "Rss:                   4 kB", "Private_Dirty:         0 kB", "Anonymous:             0 kB",
    ])  # fmt: skip
    assert releasable_mappings(smaps) == [
        (0x7F0000000000, 0x7F0000002000, 8),
        (0x7F0000008000, 0x7F0000009000, 4),
    ]

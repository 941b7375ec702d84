"""The installed libraries' cached pages dropped before the workers map them.

A shared library's pages count in a worker's RSS once it maps them, and how many a touch maps
depends on how the kernel cached the file, not on the worker: pages ``pip install`` (or an
image build) has just written stay cached in large folios, and Linux 6.18 maps a whole cached
folio on a fault, so touching one byte of the library maps up to 1 MiB of it; pages read back
from disk on a fault come in small folios and map ~100 KB around the byte. A worker started
right after ``make install-dev`` held 233 MB ready, the same worker over libraries read back
from disk 204 MB (libctranslate2 +15 MB, jsonschema_rs, libavcodec and OpenBLAS +3 MB each:
bench/memory.md), and large folios stay cached for as long as memory allows: days, on a
machine with room.

So ``extractor serve`` settles them first (``EXTRACTOR_SETTLE_LIBRARY_PAGES``): every shared
library under the interpreter's site-packages is written back (``fsync``: pages just written
are dirty, and dirty pages are not dropped) and its cached pages are dropped
(``POSIX_FADV_DONTNEED``, which leaves alone the pages any process maps, this one's included).
The workers then read them back from disk, ~100 MB of files once.
"""

from __future__ import annotations

import ctypes
import os
import re
import sys
from contextlib import suppress
from pathlib import Path


def site_packages() -> list[Path]:
    """Every site-packages directory on ``sys.path`` (a layered venv has its base's too)."""
    found = {Path(entry) for entry in sys.path if entry.endswith("site-packages")}
    return sorted(path for path in found if path.is_dir())


def settle_library_pages(roots: list[Path] | None = None) -> int:
    """Write back and drop the cached pages of every shared library (``*.so``, ``*.so.N``)
    under ``roots`` (default: ``site_packages()``) that no process maps; how many files were
    advised (0 where the platform has no ``posix_fadvise``)."""
    if not hasattr(os, "posix_fadvise"):
        return 0
    advised = 0
    for root in site_packages() if roots is None else roots:
        for folder, _, names in os.walk(root):
            for name in names:
                if ".so" not in name:
                    continue
                try:
                    fd = os.open(os.path.join(folder, name), os.O_RDONLY)
                except OSError:
                    continue  # a dangling link, a file we may not read: nothing to drop
                try:
                    with suppress(OSError):  # a read-only filesystem has nothing to write back
                        os.fsync(fd)  # dirty pages are not dropped: write them back first
                    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
                    advised += 1
                except OSError:
                    continue  # a filesystem that refuses the advice: its pages stay as they are
                finally:
                    os.close(fd)
    return advised


# -- this process's own mappings ---------------------------------------------------------------

MADV_DONTNEED = 4  # Linux
_MAPPING = re.compile(r"^([0-9a-f]+)-([0-9a-f]+) (\S{4}) \S+ \S+ \S+\s*(.*)$")


def releasable_mappings(smaps: str) -> list[tuple[int, int, int]]:
    """``(start, end, resident kB)`` of each read-only private mapping of a file in ``smaps``
    (``/proc/self/smaps``) that holds no page of its own (no ``Anonymous`` page: none was
    copied on a write, as a library's relocated data is): every resident page is the file's
    page-cache page, so dropping it loses nothing a fault cannot bring back. Writable mappings,
    shared ones and anonymous memory are left."""
    found: list[tuple[int, int, int]] = []
    current: tuple[int, int] | None = None
    for line in smaps.splitlines():
        header = _MAPPING.match(line)
        if header is not None:
            start, end, perms, path = header.groups()
            fits = perms[0] == "r" and perms[1] == "-" and perms[3] == "p" and path.startswith("/")
            current = (int(start, 16), int(end, 16)) if fits else None
            if current is not None:
                found.append((*current, 0))
            continue
        if current is None or ":" not in line:
            continue
        key, _, value = line.partition(":")
        if key == "Rss":
            found[-1] = (*current, int(value.split()[0]))
        elif key == "Anonymous" and int(value.split()[0]):  # copies of its own: not to drop
            found.pop()
            current = None
    return found


def release_mapped_library_pages() -> int:
    """Unmap this process's resident pages of libraries and mapped files that are clean copies
    of the page cache (``releasable_mappings``); the kB released (0 where this is not Linux).

    After loading, a worker maps ~45 MB of library code it ran once (imports, initialisers,
    the CPU variants of kernels it does not use) and ~20 MB of read-only data, all counted in
    its RSS. ``MADV_DONTNEED`` takes them out of this process only: they stay in the page cache,
    shared with the other workers, and a page that is run again comes back on a minor fault, as
    after the kernel's own reclaim. Measured in-process: ready 204 -> 146 MB, a 2-minute
    transcription's peak 271 -> 240 MB once its pages are back (bench/memory.md).
    """
    try:
        smaps = Path("/proc/self/smaps").read_text()
        madvise = ctypes.CDLL(None, use_errno=True).madvise
    except (OSError, AttributeError):
        return 0
    madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    released = 0
    for start, end, resident in releasable_mappings(smaps):
        if resident and madvise(start, end - start, MADV_DONTNEED) == 0:
            released += resident
    return released

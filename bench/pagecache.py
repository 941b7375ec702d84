"""Measure a worker's RSS the same in a venv pip has just written as in one installed long ago.

A shared library's pages count in a process's RSS (and VmHWM) once it maps them. How many it
maps depends on the page cache, not on the process: pages that ``pip install`` has just written
stay cached in large folios (ext4 caches buffered writes so on recent kernels), and this kernel
(6.18) maps a whole cached folio on a fault, so touching one byte maps up to 1 MiB; pages read
back from disk on a fault come in small folios and map ~100 KB around the byte. A worker started
in a fresh clone right after ``make install-dev`` so held 233 MB ready where the same worker
over libraries read from disk held 204 MB: +15 MB libctranslate2, +3 MB each jsonschema_rs,
libavcodec and OpenBLAS, all of it clean file pages (``Private_Clean`` 60 against 16 MB), shared
by the workers that map them and reclaimable, none of it the worker's own memory.
``bench/memory.md`` has the figures and how they were taken.

``settle_library_pages`` drops the cached pages of the interpreter's site-packages libraries
(only those no process maps: ``POSIX_FADV_DONTNEED`` leaves mapped pages alone), so the next
server reads them back from disk and its figures match a machine where they were not just
written. Each file is written back first (``fsync``): right after ``pip install`` its pages are
still dirty, and ``POSIX_FADV_DONTNEED`` leaves dirty pages alone too. Without it, ``av``
installed by pip a moment before mapped 5.6 MB of libavcodec at import, after the advice
alone still 5.6 MB, after a write-back and the advice 1.7 MB; a clean clone's ``make bench``
worker held 11.8 MB of libavcodec where one over settled libraries held 2.8 MB. The cost is
reading those libraries again (~100 MB of files, a fraction of a second).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path


def site_packages() -> list[Path]:
    """Every site-packages directory on ``sys.path`` (a layered venv has its base's too)."""
    found = {Path(entry) for entry in sys.path if entry.endswith("site-packages")}
    return sorted(path for path in found if path.is_dir())


def settle_library_pages(roots: list[Path] | None = None) -> int:
    """Drop the page cache of every shared library (``*.so``, ``*.so.N``) under ``roots``
    (default: ``site_packages()``); returns how many files were advised."""
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
                    os.fsync(fd)  # dirty pages are not dropped: write them back first
                    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
                    advised += 1
                finally:
                    os.close(fd)
    return advised


if __name__ == "__main__":
    # `make test` runs this once after the install, before any test process maps a library.
    print(f"page cache dropped for {settle_library_pages()} shared libraries", file=sys.stderr)

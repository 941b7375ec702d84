"""Measure a worker's RSS the same in a venv pip has just written as in one installed long ago.

How many of a shared library's pages a worker maps depends on how the kernel cached the file
(``extractor/library_pages.py`` says how, ``bench/memory.md`` has the figures).
``extractor serve`` settles the libraries itself before it starts; the bench and the tests also
measure processes that are not a server (the bare engines in-process) and servers started in
other ways, so they settle the libraries before each measurement with the same function.
Without the write-back it now does first, ``av`` installed by pip a moment before still mapped
5.6 MB of libavcodec at import after the advice (1.7 MB after write-back and advice), and a clean
clone's ``make bench`` worker held 11.8 MB of libavcodec where a settled one held 2.8 MB.
"""

from __future__ import annotations

import sys

from extractor.library_pages import settle_library_pages, site_packages

__all__ = ["settle_library_pages", "site_packages"]

if __name__ == "__main__":
    # `make test` runs this once after the install, before any test process maps a library.
    print(f"page cache dropped for {settle_library_pages()} shared libraries", file=sys.stderr)

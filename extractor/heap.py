"""Handing freed heap memory back to the system (glibc's ``malloc_trim``), where it pays.

glibc keeps what a thread freed in that thread's arena for later, so a worker's RSS stays at its
high-water mark; and memory freed in one thread's arena cannot serve another thread, so a buffer
freed by the engine thread while CTranslate2's own thread allocates still counts toward the
peak. Trimming costs a millisecond or two, so it runs at a few chosen moments, never per call.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import sys
import threading
from collections.abc import Callable, Iterator


def _libc() -> ctypes.CDLL | None:
    try:
        libc = ctypes.CDLL("libc.so.6")
        libc.malloc_trim, libc.mallopt  # noqa: B018  # both exist: this is glibc
        return libc
    except (OSError, AttributeError):  # not glibc: nothing to tune
        return None


_LIBC = _libc()
_MALLOC_TRIM: Callable[[int], object] | None = _LIBC.malloc_trim if _LIBC is not None else None
M_TRIM_THRESHOLD, M_MMAP_THRESHOLD, M_ARENA_MAX = -1, -3, -8  # mallopt, from glibc's malloc.h
# Blocks from 4 MB up (CTranslate2's encoder activations, feature and page buffers) get pages of
# their own that go back to the system when freed; smaller ones (the decoder's per-step logits,
# about 1 MB for 5 beams) stay in the heap. Measured in-process on 60 s of speech: ready RSS 209
# -> 192 MB, peak 293 -> 276 MB, for ~5% more CPU (page faults); a 1 MB threshold cost 27%.
MMAP_THRESHOLD = 4 * 1024 * 1024  # bytes
TRIM_THRESHOLD = 2 * MMAP_THRESHOLD  # bytes of free heap top kept; glibc's own ratio
# One heap for every thread. glibc gives each thread its own arena, and what one thread freed
# (Tesseract's page, in a page thread) is of no use to another (CTranslate2's, transcribing
# next) while it still counts in the RSS: with one arena the speech after OCR reuses it.
# Measured in-process, 60 s of speech after A4 pages and a 10-page PDF: peak 302-307 MB with
# per-thread arenas, 291-298 MB with one, at the same CPU time (one engine job at a time per
# worker, so the shared lock is rarely contended).
ARENA_MAX = 1


def limit_heap_retention() -> None:
    """Set glibc's mmap and trim thresholds (see ``MMAP_THRESHOLD``); call before the models
    load, so that their loading garbage is not kept either. Fixing them also stops glibc from
    raising the mmap threshold by itself up to 32 MB, which is what made freed buffers linger."""
    if _LIBC is not None:
        _LIBC.mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD)
        _LIBC.mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD)
        _LIBC.mallopt(M_ARENA_MAX, ARENA_MAX)


# While a live session is open in a worker, blocks from 1 MB up get pages of their own too.
# The session's many small allocations between its decodes cut the heap into pieces, and a file
# transcription's 30 s encoder, whose 1-4 MB blocks would then land on that heap, peaked 85-106
# MB above its start instead of ~75-85 MB: a worker serving a stream beside files reached
# 303-322 MB, 285-295 MB with this. Only then: mapping those blocks costs a file transcription
# 4-15% more time (page faults; with the threshold always at 1 MB, a file alone cost 8-27%
# more CPU), see bench/memory.md.
LIVE_MMAP_THRESHOLD = 1024 * 1024  # bytes
_live_sessions = 0
_live_lock = threading.Lock()


def live_session_opened() -> None:
    """A live session began in this process: map blocks of ``LIVE_MMAP_THRESHOLD`` and up."""
    global _live_sessions
    with _live_lock:
        _live_sessions += 1
        if _live_sessions == 1 and _LIBC is not None:
            _LIBC.mallopt(M_MMAP_THRESHOLD, LIVE_MMAP_THRESHOLD)


def live_session_closed() -> None:
    """A live session ended: with none left, back to ``MMAP_THRESHOLD``."""
    global _live_sessions
    with _live_lock:
        _live_sessions = max(_live_sessions - 1, 0)
        if _live_sessions == 0 and _LIBC is not None:
            _LIBC.mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD)


def trim_heap() -> None:
    """Return every arena's free pages to the system (a no-op without glibc)."""
    if _MALLOC_TRIM is not None:
        _MALLOC_TRIM(0)


# glibc >= 2.35: madvise(MADV_HUGEPAGE) on the heap and on mmap'd blocks. CTranslate2 allocates
# and frees its encoder's buffers per layer (the attention scores of a 30 s window alone are
# 54 MB), and every such block comes back from the kernel as fresh 4 KB pages, each a page fault:
# measured in-process, a 6 s clip faulted 118k pages for 0.81 s of CPU, 19k for 0.63 s with
# huge pages, at the same text; peak RSS moved by 0-9 MB (2 MB granularity).
HUGE_PAGES_TUNABLE = "glibc.malloc.hugetlb=1"


def reexec_with_huge_pages() -> None:
    """Start this program again with ``HUGE_PAGES_TUNABLE`` in ``GLIBC_TUNABLES``, unless it is
    there already or this is not glibc: tunables are read once, when a process starts, and the
    workers are forked from this process, so it must already run with them."""
    tunables = os.environ.get("GLIBC_TUNABLES", "")
    if _LIBC is None or "glibc.malloc.hugetlb" in tunables:
        return
    os.environ["GLIBC_TUNABLES"] = ":".join(filter(None, [tunables, HUGE_PAGES_TUNABLE]))
    os.execv(sys.executable, sys.orig_argv)


PR_SET_THP_DISABLE = 41  # prctl, Linux >= 3.15
MADV_NOHUGEPAGE = 15


def huge_pages_on() -> bool:
    """This process's malloc backs its blocks with huge pages (``HUGE_PAGES_TUNABLE``)."""
    return _LIBC is not None and HUGE_PAGES_TUNABLE in os.environ.get("GLIBC_TUNABLES", "")


@contextlib.contextmanager
def loading_without_huge_pages() -> Iterator[None]:
    """Load models in 4 KB pages, then keep them out of huge pages for good.

    CTranslate2 allocates ~700 MB of blocks for tiny.en and writes ~100 MB of them. With
    ``HUGE_PAGES_TUNABLE`` every block is madvised for huge pages, so each write faults in a
    whole 2 MB page: on Linux 6.18 a ready worker held 410 MB instead of 238 MB. So the load
    runs with THP off for the process (``PR_SET_THP_DISABLE``), and every anonymous mapping it
    leaves, the heap included, is marked ``MADV_NOHUGEPAGE`` (else khugepaged could fill them
    out later); blocks allocated afterwards, a transcription's encoder buffers above all, get
    huge pages as before.
    Measured in-process on jfk.flac: ready RSS 169 MB (332 MB without this), page faults per
    transcription 4.8k (109k with no huge pages at all), peak 262 MB (427 MB).
    """
    global _loads
    if not huge_pages_on() or _LIBC is None:
        yield
        return
    # The switch is the process's: loads that overlap (a speaker model on a request thread, a
    # live decoder's own model on the scheduler's) turn it back on only when the last one ends.
    with _loads_lock:
        _loads += 1
        if _loads == 1:
            _LIBC.prctl(PR_SET_THP_DISABLE, 1, 0, 0, 0)
    try:
        yield
    finally:
        # The heap too: a ready worker's, sparse after the load's garbage is trimmed, would be
        # filled out by khugepaged while it waits for its first request.
        keep_idle_memory_in_small_pages()
        with _loads_lock:
            _loads -= 1
            if _loads == 0:
                _LIBC.prctl(PR_SET_THP_DISABLE, 0, 0, 0, 0)


def keep_idle_memory_in_small_pages() -> None:
    """Mark what the process holds between requests ``MADV_NOHUGEPAGE`` (call after a trim).

    The heap and the blocks that outlive a request are sparse once trimmed, and khugepaged
    (``max_ptes_none`` 511 on this kernel: one page present is enough) collapses any 2 MB of a
    huge-page-advised range into a whole huge page while the worker sits idle: measured on a
    one-worker server after 20 short mixed requests, the heap went from 35 to 41 MB of RSS and
    the process's huge pages from 0 to 46 MB in 40 s of idleness (a transcription's own peak
    did not move: it trims the heap first). Blocks mapped later (a transcription's encoder
    buffers) are advised for huge pages by glibc as before; the heap's existing range stays in
    4 KB pages.
    """
    if not huge_pages_on() or _LIBC is None:
        return
    for start, end in _anonymous_mappings():
        _LIBC.madvise(ctypes.c_void_p(start), ctypes.c_size_t(end - start), MADV_NOHUGEPAGE)


_loads = 0  # loads under way in this process (loading_without_huge_pages)
_loads_lock = threading.Lock()


def _anonymous_mappings() -> list[tuple[int, int]]:
    """The address ranges of this process's unnamed mappings and its brk heap (not a stack)."""
    ranges = []
    try:
        with open("/proc/self/maps") as maps:
            for line in maps:
                fields = line.split()
                if len(fields) == 5 or fields[-1] == "[heap]":
                    start, _, end = fields[0].partition("-")
                    ranges.append((int(start, 16), int(end, 16)))
    except OSError:  # no /proc: nothing to mark
        return []
    return ranges

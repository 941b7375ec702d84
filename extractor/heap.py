"""Handing freed heap memory back to the system (glibc's ``malloc_trim``), where it pays.

glibc keeps what a thread freed in that thread's arena for later, so a worker's RSS stays at its
high-water mark; and memory freed in one thread's arena cannot serve another thread, so a buffer
freed by the engine thread while CTranslate2's own thread allocates still counts toward the
peak. Trimming costs a millisecond or two, so it runs at a few chosen moments, never per call.
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable


def _load_trim() -> Callable[[int], object] | None:
    try:
        trim: Callable[[int], object] = ctypes.CDLL("libc.so.6").malloc_trim
        return trim
    except (OSError, AttributeError):  # not glibc: nothing to trim
        return None


_MALLOC_TRIM = _load_trim()


def trim_heap() -> None:
    """Return every arena's free pages to the system (a no-op without glibc)."""
    if _MALLOC_TRIM is not None:
        _MALLOC_TRIM(0)

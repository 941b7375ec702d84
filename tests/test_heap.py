"""The heap policy a live session switches on: blocks from 1 MB up mapped apart."""

from __future__ import annotations

import ctypes

import pytest

from extractor import heap

libc = heap._LIBC
pytestmark = pytest.mark.skipif(libc is None, reason="glibc's malloc only")


class MallInfo2(ctypes.Structure):
    _fields_ = [
        (name, ctypes.c_size_t)
        for name in (
            "arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks",
            "fordblks", "keepcost",
        )
    ]  # fmt: skip


def mapped_blocks() -> int:
    assert libc is not None
    libc.mallinfo2.restype = MallInfo2
    return int(libc.mallinfo2().hblks)


def is_mapped_apart(size: int) -> bool:
    """Whether glibc now gives blocks of ``size`` bytes pages of their own (an mmap) when the
    heap has no free space for them: the threshold counts only when the heap would grow, so
    blocks are taken until the free space in the heap is used up."""
    assert libc is not None
    libc.malloc.restype, libc.malloc.argtypes = ctypes.c_void_p, [ctypes.c_size_t]
    libc.free.argtypes = [ctypes.c_void_p]
    before, blocks = mapped_blocks(), []
    try:
        for _ in range(64):  # never touched: address space only
            blocks.append(libc.malloc(size))
            if mapped_blocks() > before:
                return True
        return False
    finally:
        for block in blocks:
            libc.free(block)
        heap.trim_heap()


def test_a_live_session_maps_blocks_from_1_mb_until_the_last_one_ends() -> None:
    two_mb = 2 * 1024 * 1024
    heap.limit_heap_retention()
    assert not is_mapped_apart(two_mb)  # the default: on the heap below MMAP_THRESHOLD
    assert is_mapped_apart(heap.MMAP_THRESHOLD)
    heap.live_session_opened()
    heap.live_session_opened()
    try:
        assert is_mapped_apart(two_mb)
        assert not is_mapped_apart(heap.LIVE_MMAP_THRESHOLD // 2)
        heap.live_session_closed()
        assert is_mapped_apart(two_mb)  # one session is still open
    finally:
        heap.live_session_closed()
    assert not is_mapped_apart(two_mb)
    heap.live_session_closed()  # one close too many changes nothing
    assert not is_mapped_apart(two_mb)
    heap.live_session_opened()
    heap.live_session_closed()
    assert not is_mapped_apart(two_mb)

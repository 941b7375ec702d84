"""The heap policy a live session switches on: blocks from 1 MB up mapped apart."""

from __future__ import annotations

import ctypes
import os
import resource
import subprocess
import sys
from pathlib import Path

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


IS_MMAPPED = 0x2  # glibc's chunk header: the size word before a block; this bit: mmap'd


def got_own_pages(block: int) -> bool:
    """Whether glibc gave ``block`` pages of its own (an mmap): its chunk header says so. Read
    per block, so that another thread mapping or freeing blocks meanwhile (a count of mapped
    blocks, mallinfo2's, is the whole process's) cannot make the answer wrong."""
    return bool(ctypes.c_size_t.from_address(block - ctypes.sizeof(ctypes.c_size_t)).value
                & IS_MMAPPED)  # fmt: skip


def is_mapped_apart(size: int) -> bool:
    """Whether glibc now gives blocks of ``size`` bytes pages of their own (an mmap) when the
    heap has no free space for them: the threshold counts only when the heap would grow, so
    blocks are taken until the free space in the heap is used up."""
    assert libc is not None
    libc.malloc.restype, libc.malloc.argtypes = ctypes.c_void_p, [ctypes.c_size_t]
    libc.free.argtypes = [ctypes.c_void_p]
    libc.mallinfo2.restype = MallInfo2
    blocks: list[int] = []
    try:
        # A block is mapped apart only once the heap has to grow: enough blocks to use up all
        # the free space the earlier tests left in every arena (mallinfo2's, the top included),
        # then one. Never touched: address space only. 256 blocks, enough for ~1 GB of it, were
        # too few once in CI (2 MB blocks after 4 MB ones had been mapped).
        for _ in range(libc.mallinfo2().fordblks // size + 2):
            block = libc.malloc(size)
            assert block, f"malloc({size}) failed"
            blocks.append(block)
            if got_own_pages(block):
                return True
        return False
    finally:
        for block in blocks:
            libc.free(block)
        heap.trim_heap()


def heap_state() -> str:
    """What a failure here needs to be understood: the heap's size and free space, the
    blocks mapped apart, the address-space limit (two clean-clone runs once failed the 4 MB
    check below, cause not found)."""
    assert libc is not None
    libc.mallinfo2.restype = MallInfo2
    info = libc.mallinfo2()
    limit = resource.getrlimit(resource.RLIMIT_AS)
    with open("/proc/self/maps") as maps:
        mappings = sum(1 for _ in maps)
    return (
        f"heap {info.arena >> 20} MB, free {info.fordblks >> 20} MB in {info.ordblks} chunks,"
        f" mapped apart {info.hblks} ({info.hblkhd >> 20} MB), RLIMIT_AS {limit},"
        f" {mappings} mappings, {heap._live_sessions} live sessions counted"
    )


def test_a_live_session_maps_blocks_from_1_mb_until_the_last_one_ends() -> None:
    two_mb = 2 * 1024 * 1024
    assert heap._live_sessions == 0, heap_state()  # no earlier test left a session counted
    heap.limit_heap_retention()
    assert not is_mapped_apart(two_mb), heap_state()  # default: on the heap below MMAP_THRESHOLD
    assert is_mapped_apart(heap.MMAP_THRESHOLD), heap_state()
    heap.live_session_opened()
    heap.live_session_opened()
    try:
        assert is_mapped_apart(two_mb), heap_state()
        assert not is_mapped_apart(heap.LIVE_MMAP_THRESHOLD // 2), heap_state()
        heap.live_session_closed()
        assert is_mapped_apart(two_mb), heap_state()  # one session is still open
    finally:
        heap.live_session_closed()
    assert not is_mapped_apart(two_mb), heap_state()
    heap.live_session_closed()  # one close too many changes nothing
    assert not is_mapped_apart(two_mb), heap_state()
    heap.live_session_opened()
    heap.live_session_closed()
    assert not is_mapped_apart(two_mb), heap_state()


def test_huge_pages_when_asked_restart_the_process_with_the_tunable() -> None:
    """``--malloc-huge-pages``: tunables are read at a process's start, so ``extractor serve``
    starts itself again with glibc's, once (the second start finds it set and goes on)."""
    code = (
        "import os; from extractor.heap import reexec_with_huge_pages;"
        " print('start', flush=True); reexec_with_huge_pages();"
        " print(os.environ['GLIBC_TUNABLES'])"
    )
    env = {k: v for k, v in os.environ.items() if k != "GLIBC_TUNABLES"}
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60
    ).stdout.split()
    assert out == ["start", "start", heap.HUGE_PAGES_TUNABLE]


SPARSE_BLOCK = """
import ctypes, sys
from extractor import heap
libc = ctypes.CDLL("libc.so.6")
libc.malloc.restype = ctypes.c_void_p
def sparse_block():  # 64 MB of which one byte per MB is written, as a model's blocks are
    block = libc.malloc(64 << 20)
    for offset in range(0, 64 << 20, 1 << 20):
        ctypes.c_char.from_address(block + offset).value = b"x"
    return block
if sys.argv[1] == "guarded":
    with heap.loading_without_huge_pages():
        kept = sparse_block()
elif sys.argv[1] == "overlapping":  # another load ends first; this one's block stays guarded
    with heap.loading_without_huge_pages():
        with heap.loading_without_huge_pages():
            pass
        kept = sparse_block()
else:
    kept = sparse_block()
rollup = open("/proc/self/smaps_rollup").read()
print(int(rollup.split("AnonHugePages:")[1].split()[0]) // 1024)
"""


def test_blocks_allocated_while_loading_stay_in_small_pages() -> None:
    """With glibc's huge pages on, a block written one byte per MB costs 2 MB of RSS per byte
    written; allocated while loading, it costs 4 KB per byte (extractor.heap)."""
    thp = Path("/sys/kernel/mm/transparent_hugepage/enabled")
    if not thp.is_file() or "[never]" in thp.read_text():
        pytest.skip("the kernel's transparent huge pages are off")
    env = {**os.environ, "GLIBC_TUNABLES": heap.HUGE_PAGES_TUNABLE}

    def huge_mb(mode: str) -> int:
        done = subprocess.run(
            [sys.executable, "-c", SPARSE_BLOCK, mode],
            env=env, capture_output=True, text=True, timeout=60, check=True,
        )  # fmt: skip
        return int(done.stdout)

    plain = huge_mb("plain")
    if plain < 32:
        pytest.skip(f"the kernel gave no huge pages to a madvised block ({plain} MB)")
    assert huge_mb("guarded") <= 4
    assert huge_mb("overlapping") <= 4


IDLE = """
import ctypes, sys
from extractor import heap
libc = ctypes.CDLL("libc.so.6")
libc.malloc.restype = ctypes.c_void_p
libc.malloc.argtypes = [ctypes.c_size_t]
heap.limit_heap_retention()
block = libc.malloc(512 * 1024)  # on the heap: below the mmap threshold
if sys.argv[1] == "idle":
    heap.keep_idle_memory_in_small_pages()
flags, inside = [], False
with open("/proc/self/smaps") as smaps:
    for line in smaps:
        head = line.split()
        if head[0] == "VmFlags:" and inside:
            flags = head[1:]
        elif "-" in head[0] and not head[0].endswith(":"):
            low, high = (int(x, 16) for x in head[0].split("-"))
            inside = low <= block < high
print("nh" in flags, "hg" in flags)
"""


def test_what_a_worker_keeps_between_requests_is_kept_out_of_huge_pages() -> None:
    """With glibc's huge pages on, the heap is advised for them, and khugepaged would fill its
    sparse, trimmed ranges out while the worker sits idle: after a request they are advised
    against (``MADV_NOHUGEPAGE``, smaps' ``nh``), and no longer for (``hg``)."""
    env = {**os.environ, "GLIBC_TUNABLES": heap.HUGE_PAGES_TUNABLE}

    def flags(when: str) -> list[str]:
        command = [sys.executable, "-c", IDLE, when]
        out = subprocess.run(command, env=env, capture_output=True, text=True, timeout=60)
        return out.stdout.split() or [out.stderr]

    assert flags("busy") == ["False", "True"]  # glibc advised the heap for huge pages
    assert flags("idle") == ["True", "False"]

"""The speech model's token embedding read from a file as tokens need it, not held in memory.

CTranslate2 reads every weight of ``model.bin`` into memory it allocates. Whisper's token
embedding is the largest (51864 x 384 int8 for tiny.en, 19.9 MB), and on an Intel CPU,
where CTranslate2 packs the output layer's copy of it for MKL, decoding reads only the rows of
the tokens it emits (a few hundred pages of 4 KB). So once the model is loaded, the pages of
that matrix are replaced by a private read-only-in-practice mapping of a file holding the same
bytes (``MAP_PRIVATE | MAP_FIXED`` over the very same addresses): a page is read from the page
cache when a token first needs it, the page cache is shared by every worker of the machine,
and the kernel can reclaim it, where each worker held all 19.9 MB as its own. Measured
in-process on this project's Intel machine: a loaded model's RSS 19 MB lower, a transcription's
peak 14-16 MB lower, the same text, words, times and log-probabilities (bench/memory.md).
Elsewhere (an AMD CPU, where CTranslate2 does not use MKL) the output layer multiplies by the
matrix itself, so each transcription reads all of it: the worker's own copy still goes, the
page cache's one is shared by every worker, and ``release`` drops it from RSS after each call.

Nothing is assumed about where CTranslate2 keeps the matrix: its bytes are looked for in the
process's resident anonymous memory, compared in full with the file before anything is
mapped, and only the whole pages inside the matrix are replaced (the allocator's own bytes
around it stay as they are). Where the matrix is not found as stored (a float16 model that
CTranslate2 converted at load, another allocator), or the file cannot be written, nothing
changes. Like any mapped model file, the file must be replaced, never rewritten in place
(this module writes a new file and renames it over the old one).
"""

from __future__ import annotations

import ctypes
import functools
import hashlib
import logging
import mmap
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path

from .ct2_convert import exclusive_lock
from .ct2_model import ModelConversionError, variable_span

log = logging.getLogger(__name__)

EMBEDDING = "decoder/embeddings/weight"
PAGE = mmap.PAGESIZE
_PROBE_BYTES = 256  # the matrix's first bytes, looked for in memory
_CHUNK = 1 << 20  # bytes compared or copied at a time (no second copy of the matrix)
_MADV_RANDOM = 1  # no fault-around: a page read is the page a token needs
_MADV_DONTNEED = 4
_MAP_FIXED = 0x10  # Linux (the mmap module does not export it)
_MINCORE_WINDOW = 1 << 30  # bytes of address space asked about at a time (a 256 KB vector)


class MappedEmbedding:
    """The address ranges of one loaded model's token embedding now mapped from a file. They
    are valid as long as that model is loaded: its owner keeps both together."""

    def __init__(self, ranges: list[tuple[int, int]]) -> None:
        self.ranges = ranges  # (start, length)

    @property
    def size(self) -> int:
        """Bytes of the matrix no longer held in memory."""
        return sum(length for _start, length in self.ranges)

    def release(self) -> None:
        """Unmap the pages of the file that decoding has read so far (after a transcription):
        the next one reads its tokens' rows again from the page cache, ~1,700 minor faults for
        a minute of speech, so a worker's RSS does not keep every row any transcription ever
        used. Safe under a reader in another thread: the pages are the file's unchanged bytes,
        and a page read meanwhile is read again."""
        libc = _libc()
        if libc is not None:
            for start, length in self.ranges:
                libc.madvise(start, length, _MADV_DONTNEED)


def map_token_embedding(model_dir: Path, cache_dir: Path | None) -> MappedEmbedding:
    """Replace the loaded copy of ``model_dir``'s token embedding (the model just loaded in
    this process) by a mapping of a file in ``cache_dir`` with the same bytes; what was
    mapped (nothing: the matrix stays as it was)."""
    libc = _libc()
    model_bin = Path(model_dir) / "model.bin"
    mapped = MappedEmbedding([])
    if libc is None or cache_dir is None or not model_bin.is_file():
        return mapped
    try:
        found = variable_span(model_bin, EMBEDDING)
        if found is None:
            return mapped
        offset, size = found
        with model_bin.open("rb") as fh:
            fh.seek(offset)
            probe = fh.read(_PROBE_BYTES)
        copies = [
            address
            for address in _copies_in_memory(libc, probe, size)
            if _equal(address, model_bin, offset, size)
        ]
        # Another model loaded from the same file may hold a copy too (a test's earlier app):
        # which one is the caller's cannot be told, and releasing pages of a copy freed since
        # would zero whatever memory took its place. So one copy, or none mapped.
        if len(copies) == 1:
            mapped.ranges.append(_map(libc, copies[0], size, model_bin, offset, cache_dir))
    except (OSError, ModelConversionError) as exc:  # an unwritable cache, a damaged model
        log.info("token embedding kept in memory", extra={"error": str(exc)})
        return mapped
    if mapped.size:
        log.info("token embedding mapped from a file", extra={"bytes": mapped.size})
    return mapped


@functools.cache
def _libc() -> ctypes.CDLL | None:
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.mmap.restype = ctypes.c_void_p
        libc.mmap.argtypes = [
            ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int,
            ctypes.c_long,
        ]  # fmt: skip
        libc.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p]
        libc.madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    except (OSError, AttributeError):  # not a POSIX libc
        return None
    return libc


def _copies_in_memory(libc: ctypes.CDLL, probe: bytes, size: int) -> Iterator[int]:
    """Addresses where a resident run of anonymous memory starts with ``probe`` and holds
    ``size`` bytes from there: candidates, each compared in full before it is used."""
    with open("/proc/self/maps") as maps:
        ranges = [line.split() for line in maps]
    for fields in ranges:
        if len(fields) != 5 or not fields[1].startswith("rw"):  # named or read-only: not it
            continue
        low, _, high = fields[0].partition("-")
        start, end = int(low, 16), int(high, 16)
        if end - start < size:
            continue
        for run_start, run_end in _resident_runs(libc, start, end):
            # The matrix need not start its run (a block before it may be resident too): the
            # run is searched where the matrix could start, a chunk at a time.
            last = run_end - size  # the latest start that leaves room for the whole matrix
            for chunk_start in range(run_start, last + 1, _CHUNK):
                chunk = ctypes.string_at(
                    chunk_start, min(_CHUNK + len(probe) - 1, run_end - chunk_start)
                )
                at = chunk.find(probe)
                while 0 <= at < _CHUNK and chunk_start + at <= last:
                    yield chunk_start + at
                    at = chunk.find(probe, at + 1)


def _resident_runs(libc: ctypes.CDLL, start: int, end: int) -> list[tuple[int, int]]:
    """The runs of resident pages in [start, end) (``mincore``): untouched pages are skipped,
    never faulted in by looking. Asked a window at a time, so that a large reservation of
    address space costs a small vector, and scanned at C speed (``bytes.find``)."""
    runs: list[tuple[int, int]] = []
    for window in range(start, end, _MINCORE_WINDOW):
        length = min(_MINCORE_WINDOW, end - window)
        vector = (ctypes.c_ubyte * (length // PAGE))()
        if libc.mincore(window, length, vector) != 0:
            continue
        resident = bytes(vector)  # 1 for a resident page, 0 for another (bit 0 of each byte)
        index = resident.find(1)
        while index >= 0:
            stop = resident.find(0, index)
            stop = len(resident) if stop < 0 else stop
            first, last = window + index * PAGE, window + stop * PAGE
            if runs and runs[-1][1] == first:  # a run going on from the previous window
                first = runs.pop()[0]
            runs.append((first, last))
            index = resident.find(1, stop)
    return runs


def _equal(address: int, path: Path, offset: int, size: int) -> bool:
    """Whether the ``size`` bytes at ``address`` are the file's from ``offset``."""
    memory = memoryview((ctypes.c_char * size).from_address(address)).cast("B")
    with path.open("rb") as fh:
        fh.seek(offset)
        for start in range(0, size, _CHUNK):
            chunk = fh.read(min(_CHUNK, size - start))
            if memory[start : start + len(chunk)] != chunk:
                return False
    return True


def _map(
    libc: ctypes.CDLL, address: int, size: int, model_bin: Path, offset: int, cache_dir: Path
) -> tuple[int, int]:
    """Map the whole pages of [address, address + size) from a file of the same bytes: the
    range mapped (start, length)."""
    first = -(-address // PAGE) * PAGE
    last = (address + size) // PAGE * PAGE
    if last <= first:  # not one whole page: nothing worth a file
        return first, 0
    lead = address % PAGE  # the file starts this many bytes before the matrix: page-aligned
    path = _file(model_bin, offset, size, lead, cache_dir)
    if not _equal(address, path, lead, size):  # written by something else, or damaged
        path.unlink(missing_ok=True)
        path = _file(model_bin, offset, size, lead, cache_dir)
        if not _equal(address, path, lead, size):
            raise OSError(f"{path} does not hold the token embedding")
    fd = os.open(path, os.O_RDONLY)
    try:
        # Both mappings hold the same bytes, so a thread reading the matrix meanwhile reads
        # the same values from one or the other; CTranslate2 never writes to a weight, and a
        # write would only make a private copy of that page.
        where = libc.mmap(
            first, last - first, mmap.PROT_READ | mmap.PROT_WRITE,
            mmap.MAP_PRIVATE | _MAP_FIXED, fd, lead + first - address,
        )  # fmt: skip
    finally:
        os.close(fd)
    if where != first:
        raise OSError(ctypes.get_errno(), "mmap of the token embedding failed")
    libc.madvise(first, last - first, _MADV_RANDOM)
    return first, last - first


def _file(model_bin: Path, offset: int, size: int, lead: int, cache_dir: Path) -> Path:
    """``lead`` zero bytes then the matrix, written once per model and layout into
    ``cache_dir`` (every worker of the machine maps the same file)."""
    stat = model_bin.stat()
    key = f"{model_bin.resolve()}\n{stat.st_size}:{stat.st_mtime_ns}\n{offset}:{size}"
    name = f"token-embedding-{hashlib.sha256(key.encode()).hexdigest()[:20]}-{lead}.bin"
    path = cache_dir / name
    if path.is_file() and path.stat().st_size == lead + size:
        return path
    cache_dir.mkdir(parents=True, exist_ok=True)
    with exclusive_lock(cache_dir / f".{name}.lock"):
        if path.is_file() and path.stat().st_size == lead + size:
            return path
        fd, temporary = tempfile.mkstemp(dir=cache_dir, prefix=f".{name}.")
        try:
            with os.fdopen(fd, "wb") as out, model_bin.open("rb") as source:
                out.write(bytes(lead))
                source.seek(offset)
                for start in range(0, size, _CHUNK):
                    out.write(source.read(min(_CHUNK, size - start)))
            os.replace(temporary, path)
        except BaseException:
            Path(temporary).unlink(missing_ok=True)
            raise
    return path

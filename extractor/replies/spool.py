"""A long document's lines on disk, a page at a time, so that no process holds them all.

A dense 300 dpi page is ~1,500 words: as ``Line`` and ``Word`` objects ~0.5 MB, and as much again
in each rendering of them. Held for a whole document until its reply was rendered, 100 such
pages took a server process to 386 MB (issue 19). ``PageSpool`` pickles each page's lines into
a file of the request's work directory as the page is read (then they are dropped);
``SpooledLines`` is the document's ``lines`` read back from it, one page in memory at a time, on
every pass a rendering makes. The file is ours, written by this process into a directory only it
uses, so unpickling it is no more trusting than reading our own memory.
"""

from __future__ import annotations

import pickle
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, BinaryIO, overload

from extractor.replies.importable import Line


class PageSpool:
    """Writes the pages' lines, in page order, to ``path``; ``close`` gives them back as a
    ``SpooledLines``."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._file: BinaryIO = path.open("wb")
        self._count = 0
        self._pages = 0

    def add(self, lines: Sequence[Line]) -> None:
        """Append one page's lines (any number, none too)."""
        pickle.dump(tuple(lines), self._file, protocol=pickle.HIGHEST_PROTOCOL)
        self._count += len(lines)
        self._pages += 1

    def close(self) -> SpooledLines:
        self._file.close()
        return SpooledLines(self.path, self._count, self._pages)

    def discard(self) -> None:
        """Close and remove the file (a failed extraction)."""
        self._file.close()
        self.path.unlink(missing_ok=True)


class SpooledLines(Sequence[Line]):
    """A document's lines as a read-only sequence over a ``PageSpool``'s file.

    Iterating reads one page's lines at a time; indexing reads up to the line asked for, so is
    only for the rare caller that wants one line (renderings iterate). The file must outlive
    every use: it lives in the request's work directory.
    """

    def __init__(self, path: Path, count: int, pages: int) -> None:
        self.path = path
        self._count = count
        self._pages = pages

    def __len__(self) -> int:
        return self._count

    def pages(self) -> Iterator[tuple[Line, ...]]:
        """Each page's lines, in order."""
        with self.path.open("rb") as file:
            for _ in range(self._pages):
                page: tuple[Line, ...] = pickle.load(file)  # our own file (see above)
                yield page

    def __iter__(self) -> Iterator[Line]:
        for page in self.pages():
            yield from page

    @overload
    def __getitem__(self, index: int) -> Line: ...
    @overload
    def __getitem__(self, index: slice) -> Sequence[Line]: ...
    def __getitem__(self, index: int | slice) -> Line | Sequence[Line]:
        if isinstance(index, slice):
            return tuple(self)[index]
        if index < 0:
            index += self._count
        if not 0 <= index < self._count:
            raise IndexError("line index out of range")
        for number, line in enumerate(self):
            if number == index:
                return line
        raise IndexError("line index out of range")  # pragma: no cover -- count is exact

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Sequence):
            return len(other) == self._count and all(
                a == b for a, b in zip(self, other, strict=True)
            )
        return NotImplemented

    __hash__: Any = None

    def __repr__(self) -> str:
        return f"SpooledLines({str(self.path)!r}, {self._count} lines, {self._pages} pages)"

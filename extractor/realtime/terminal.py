"""How ``extractor listen`` prints turns: each turn on a line, its words as their deltas come
and, on a terminal, the turn's revisable tail (``x_...tentative``: the words the server hears
after those sent, not yet confirmed) dimmed after them, redrawn in place as it changes.

Redrawing is cursor arithmetic: the writer knows how many cells of the turn's line it has
written and the terminal's width, so it moves back over the tail however many rows it wrapped
onto and erases from there (ANSI cursor up, carriage return, cursor forward, erase below).
Anything else written to the terminal meanwhile would break that count, so messages go
through ``say``. Piped or redirected output (and ``NO_COLOR``, ``TERM=dumb``) gets the words
alone, exactly as before the tail existed.
"""

from __future__ import annotations

import os
import shutil
import sys
import threading
import unicodedata
from collections.abc import Callable
from typing import IO

DIM, PLAIN = "\x1b[2m", "\x1b[0m"


def cells(text: str) -> int | None:
    """The terminal cells ``text`` takes (None: a character whose width is not sure)."""
    total = 0
    for char in text:
        if unicodedata.combining(char) or unicodedata.category(char)[0] == "C":
            return None  # combining marks, controls: zero width or worse
        total += 2 if unicodedata.east_asian_width(char) in "WF" else 1
    return total


class TurnWriter:
    """Prints turns to ``out``; with ``tails``, each open turn's tail after its words."""

    def __init__(
        self, out: IO[str], *, tails: bool, width: Callable[[], int] | None = None
    ) -> None:
        self.out, self.tails = out, tails
        self.width = width or (lambda: shutil.get_terminal_size().columns)
        self.column: int | None = 0  # cells of the open turn's line so far (None: unknown)
        self.shown = 0  # cells of the tail drawn after them
        # the cursor is at the start of the row after a full one (a tail drawn past the margin
        # and erased), not at its end awaiting the wrap: the newline is already there
        self.below = False
        self.lock = threading.Lock()

    @classmethod
    def to(cls, out: IO[str]) -> TurnWriter:
        """A writer for ``out``: tails only on a terminal that takes escape codes."""
        plain = "NO_COLOR" in os.environ or os.environ.get("TERM") in ("dumb", "")
        return cls(out, tails=out.isatty() and not plain)

    def delta(self, text: str) -> None:
        with self.lock:
            self._erase()
            self.out.write(text)
            self.below = self.below and not text
            width = cells(text)
            self.column = None if self.column is None or width is None else self.column + width
            self.out.flush()

    def tail(self, text: str) -> None:
        with self.lock:
            self._erase()
            width = cells(text)
            if self.tails and text and width is not None and self.column is not None:
                self.out.write(DIM + text + PLAIN)
                self.shown = width
            self.out.flush()

    def end_turn(self) -> None:
        """End the turn's line (a turn that printed no word: its tail erased, no line)."""
        with self.lock:
            self._erase()
            self._line_end()
            self.out.flush()

    def say(self, message: str) -> None:
        """``message`` on standard error, on a line of its own when the terminal shows both."""
        with self.lock:
            self._erase()
            if self.tails:
                self._line_end()  # the turn goes on below the message
            self.out.flush()
            print(message, file=sys.stderr, flush=True)

    def close(self) -> None:
        """Leave no tail on the screen."""
        with self.lock:
            self._erase()
            self.out.flush()

    def _line_end(self) -> None:
        """End the open line, if it holds anything and the wrap has not ended it already."""
        if self.column != 0 and not self.below:
            self.out.write("\n")
        self.column, self.below = 0, False

    def _erase(self) -> None:
        if not self.shown or self.column is None:
            return
        width = max(1, self.width())
        start, end = self.column, self.column + self.shown
        up = (end - 1) // width - start // width  # rows the tail wrapped onto
        back = f"\x1b[{up}A" if up > 0 else ""
        forward = f"\x1b[{start % width}C" if start % width else ""
        self.out.write(back + "\r" + forward + "\x1b[J")
        self.shown = 0
        self.below = start > 0 and start % width == 0

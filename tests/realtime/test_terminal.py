"""``extractor listen``'s turns on a terminal (pyte, a VT100 emulator, as the screen): each
turn's words, its revisable tail dimmed after them and redrawn in place however many rows it
wraps onto; piped output gets the words alone."""

from __future__ import annotations

import io

import pyte
import pytest

from extractor.realtime.terminal import DIM, TurnWriter

WIDTH, ROWS = 20, 12


class Screen(io.StringIO):
    """A terminal ``WIDTH`` cells wide: what is written goes through a tty's output
    processing ("\\n" as "\\r\\n") to an emulated screen."""

    def __init__(self) -> None:
        super().__init__()
        self.screen = pyte.Screen(WIDTH, ROWS)
        self.stream = pyte.Stream(self.screen)

    def write(self, text: str) -> int:
        self.stream.feed(text.replace("\n", "\r\n"))
        return super().write(text)

    def rows(self) -> list[str]:
        """The screen's text, row by row, up to the last row written."""
        shown = [row.rstrip() for row in self.screen.display]
        while shown and not shown[-1]:
            shown.pop()
        return shown


def wrapped(*lines: str) -> list[str]:
    """``lines`` as a WIDTH-cell screen shows them, each wrapped onto as many rows as it takes."""
    rows = []
    for line in lines:
        rows += [line[i : i + WIDTH] for i in range(0, max(len(line), 1), WIDTH)]
    while rows and not rows[-1]:
        rows.pop()
    return [row.rstrip() for row in rows]


def test_the_tail_is_redrawn_in_place_across_wrapped_rows() -> None:
    out = Screen()
    writer = TurnWriter(out, tails=True, width=lambda: WIDTH)
    said = ""
    # Each step: (delta, tail); lengths chosen to wrap the tail over zero, one and two rows,
    # to end the words exactly at the margin, and to shrink the tail to nothing.
    steps = [
        ("", "Hello"),
        ("Hello", " there, how are you doing today"),
        (" there,", " how are you"),
        ("", " how are you doing on this fine morning, friend"),
        (" how are", " you"),
        (" you doing", ""),  # 30 cells: the words end mid-row
        ("", " on this fine morning"),
        (" on this fi", "ne"),  # the words end exactly at the margin (40 cells)
        ("ne", " morning"),
    ]
    for delta, tail in steps:
        if delta:
            writer.delta(delta)
            said += delta
        writer.tail(tail)
        assert out.rows() == wrapped(said + tail), (delta, tail, out.rows())
    writer.end_turn()
    assert out.rows() == wrapped(said)
    # The next turn starts on the line below, its tail wrapping too; close leaves no tail.
    writer.delta("Second")
    writer.tail(" turn with a tail long enough to wrap twice over")
    assert out.rows() == wrapped(said, "Second turn with a tail long enough to wrap twice over")
    writer.close()
    assert out.rows() == wrapped(said, "Second")
    assert DIM in out.getvalue()


def test_a_message_goes_on_a_line_of_its_own_and_the_turn_below_it(
    capsys: pytest.CaptureFixture[str],
) -> None:
    out = Screen()
    writer = TurnWriter(out, tails=True, width=lambda: WIDTH)
    writer.delta("Ask not")
    writer.tail(" what your country")
    writer.say("extractor listen: stopped; finishing the last turn")
    writer.delta(" what")
    writer.end_turn()
    assert out.rows() == ["Ask not", " what"]
    assert capsys.readouterr().err == "extractor listen: stopped; finishing the last turn\n"


def test_piped_output_is_the_words_alone() -> None:
    out = io.StringIO()
    writer = TurnWriter.to(out)  # not a terminal
    assert not writer.tails
    writer.delta("And so")
    writer.tail(" my fellow")
    writer.delta(" my fellow Americans.")
    writer.end_turn()
    writer.close()
    assert out.getvalue() == "And so my fellow Americans.\n"


def test_a_tail_whose_width_is_unsure_is_not_drawn() -> None:
    """A combining mark would throw the cursor arithmetic off: such a tail is left out (its
    words still come as deltas); a wide character is counted as the two cells it takes."""
    out = Screen()
    writer = TurnWriter(out, tails=True, width=lambda: WIDTH)
    writer.delta("Cafe")
    writer.tail(" nai\u0308ve")  # a combining diaeresis
    assert out.rows() == ["Cafe"]
    writer.tail(" 東京 tower and more words")  # 30 cells: the two wide ones take four
    assert out.rows() == ["Cafe 東京 tower and", "more words"]
    writer.tail("")
    assert out.rows() == ["Cafe"]
    writer.delta(" 東京")
    writer.tail(" tower and more words, wrapped")
    assert out.rows() == ["Cafe 東京 tower and", "more words, wrapped"]
    writer.end_turn()
    assert out.rows() == ["Cafe 東京"]


def test_a_turn_that_ends_at_the_margin_leaves_no_blank_row(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Words that fill the row exactly leave the cursor past the margin; a tail drawn and
    erased there leaves it at the start of the next row, where the next turn begins."""
    out = Screen()
    writer = TurnWriter(out, tails=True, width=lambda: WIDTH)
    writer.delta("Ask not what your c")  # 19 cells
    writer.tail("ountry")
    writer.delta("o")  # 20 cells: the row is full
    writer.tail(" can do for you")
    writer.tail("")
    writer.end_turn()
    writer.delta("Next")
    writer.end_turn()
    assert out.rows() == ["Ask not what your co", "Next"]
    # With no tail in between, the newline is the one that ends the turn.
    writer.delta("A full row of words!")
    writer.end_turn()
    writer.delta("After")
    writer.tail(" it")
    writer.end_turn()
    assert out.rows() == ["Ask not what your co", "Next", "A full row of words!", "After"]
    # A message after a full row and an erased tail: the turn goes on right below it.
    writer.delta("Twenty cells exactly")
    writer.tail(" more")
    writer.say("extractor listen: stopped")
    writer.delta(" more")
    writer.end_turn()
    assert out.rows()[-3:] == ["After", "Twenty cells exactly", " more"]
    assert capsys.readouterr().err == "extractor listen: stopped\n"


def test_a_turn_with_no_words_leaves_no_line() -> None:
    """A turn that completes empty (or fails before a delta) after showing a tail: the tail
    goes, and no empty line is left; a turn with words still ends its line."""
    out = Screen()
    writer = TurnWriter(out, tails=True, width=lambda: WIDTH)
    writer.delta("First turn.")
    writer.end_turn()
    writer.tail("Uh")
    writer.end_turn()  # completed with an empty transcript
    writer.delta("Second.")
    writer.end_turn()
    assert out.rows() == ["First turn.", "Second."]
    piped = io.StringIO()
    plain = TurnWriter(piped, tails=False)
    plain.end_turn()
    plain.delta("Words.")
    plain.end_turn()
    assert piped.getvalue() == "Words.\n"

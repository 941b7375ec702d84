"""Whisper's repetition failure, caught before a hypothesis can confirm anything.

With beam search, tiny.en given a forced prefix it cannot continue from the audio tends to
say the prefix's last sentence again ("... on Sunday morning. I'm going to go on Sunday
morning."), or to loop within one hypothesis ("much much much"). A sent word is never taken
back, so such a hypothesis must be stopped before LocalAgreement sees it: the words from
where a repetition starts are dropped. Only a run that follows itself immediately counts,
and only when its copies span ``2 * least`` words or more (a run of ``least`` words said
twice, one word said ``2 * least`` times): a speaker repeating a short phrase
("no, no") or a sentence said again later in the turn is not touched.
"""

from __future__ import annotations

from .agreement import comparable


def unrepeated(sent: list[str], hypothesis: list[str], least: int) -> list[str]:
    """``hypothesis`` (the words after ``sent``) up to where a run of ``least`` or more words
    repeats the run just before it, in the hypothesis or across the end of ``sent``."""
    if least <= 0:
        return hypothesis
    tail = [comparable(w) for w in sent[-len(hypothesis) :]] if hypothesis else []
    words = tail + [comparable(w) for w in hypothesis]
    for end in range(len(tail) + 1, len(words) + 1):
        for size in range(1, end // 2 + 1):
            # A run ending at ``end`` said ``copies`` times in a row: a short run must repeat
            # until the copies span ``2 * least`` words ("much" six times for 3).
            copies = max(2, -(-2 * least // size))
            if copies * size > end:
                break
            run = words[end - size : end]
            if all(
                words[end - k * size : end - (k - 1) * size] == run for k in range(2, copies + 1)
            ):
                cut = max(end - (copies - 1) * size - len(tail), 0)
                return hypothesis[:cut]
    return hypothesis

"""LocalAgreement-2: a word is sent once two consecutive hypotheses agree on it.

Each hypothesis is what Whisper hears after the words already sent (the decoder is forced to
continue them), so agreement is the longest common prefix of this hypothesis and the previous
one, compared without case and punctuation ("dog," and "dog." agree). The agreed words are
sent in the newer hypothesis's spelling and are never taken back. Whisper's last word is often
a guess at a word still being spoken; requiring two hypotheses half a second apart to agree
keeps those guesses off the wire at the cost of about one decode step of latency.
"""

from __future__ import annotations

import re

_NOT_WORD = re.compile(r"[^\w']+")


def comparable(word: str) -> str:
    """``word`` as agreement compares it: lower case, without punctuation."""
    return _NOT_WORD.sub("", word.lower())


def _cut(*forms: str) -> bool:
    """A form is the start of a longer word ("ill-" of "ill-disposed", "some..."): Whisper
    writes a word still being spoken that way, and sending it would force the next
    hypothesis to continue mid-word ("ill" then "-sposed")."""
    return any(form.endswith(("-", "...", "…")) for form in forms)


class LocalAgreement:
    """The unconfirmed hypothesis of one window; ``update`` returns the words now confirmed."""

    def __init__(self, hold_back: int = 0) -> None:
        self.previous: list[str] = []  # last hypothesis, after the words confirmed so far
        self.hold_back = hold_back  # last words of a hypothesis never confirmed by it

    def update(self, hypothesis: list[str]) -> list[str]:
        """Confirm the common prefix of ``hypothesis`` and the previous one."""
        agreed = 0
        candidates = hypothesis[: max(0, len(hypothesis) - self.hold_back)]
        for old, new in zip(self.previous, candidates, strict=False):
            if comparable(old) != comparable(new) or _cut(old, new):
                break
            if not comparable(new) and old != new:  # punctuation alone: the same mark
                break
            agreed += 1
        self.previous = hypothesis[agreed:]
        return hypothesis[:agreed]

    def reset(self) -> None:
        """A new window: nothing pending."""
        self.previous = []

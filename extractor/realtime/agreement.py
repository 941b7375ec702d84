"""LocalAgreement-n: a word is sent once n consecutive hypotheses agree on it (the session's
default is 3; 2 with a margin, below, is the measured alternative: bench/realtime.md).

Each hypothesis is what Whisper hears after the words already sent (the decoder is forced to
continue them), so agreement is the longest common prefix of this hypothesis and the previous
one, compared without case and punctuation ("dog," and "dog." agree). The agreed words are
sent in the newer hypothesis's spelling and are never taken back. Whisper's last word is often
a guess at a word still being spoken; requiring two hypotheses half a second apart to agree
keeps those guesses off the wire at the cost of about one decode step of latency.

Two decodes can still agree on a wrong guess when both ended inside the word ("an ill-" heard
twice as "an old"): with word timings, a margin also asks that each agreeing decode heard
some audio after the word's end. In-process on the tuning set that made two agreeing decodes
more accurate than three without it, and sooner; over a WebSocket on a busy machine its
alignment pass made decodes fall further behind (bench/realtime.md), so it is off by default.

Agreement is a prefix: a word Whisper keeps hearing differently ("dry", "try", "dry" from one
espeak-ng voice) holds back every word after it for as long as it wavers, 7 s in one stream of
bench/realtime.py's espeak-ng talk. With ``patience``, once that many full comparisons in a
row confirmed nothing, the newest two hypotheses suffice (LocalAgreement-2) until a word goes
out. A window's first hypotheses never count: they guess from a second of audio, and two of
them agreeing sent LibriVox's "had he married" as "how do you marry". Chosen on
bench/realtime_eval.py's tuning set (patience 0, 2, 3, 4: 2 had the shortest waits and fewer
wrong words than none), reported on its held-out set (bench/realtime.md).
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
    """The unconfirmed hypotheses of one window; ``update`` returns the words now confirmed.

    ``hypotheses``: how many consecutive hypotheses must agree on a word (2: LocalAgreement-2);
    ``hold_back``: the last words of the newest hypothesis are never confirmed by it (the
    words nearest the audio's end, which Whisper most often guesses from a word half spoken).
    ``margin``: with each word's slack (seconds of audio its decode heard after the word's
    end), a word is confirmed only once it ended at least this long before the end of the
    audio of the newest hypothesis (``margin_all``: of every agreeing one): a word touching
    the end of what a decode heard may be a guess at a word still being spoken.
    """

    def __init__(
        self,
        hold_back: int = 0,
        hypotheses: int = 2,
        margin: float = 0.0,
        margin_all: bool = False,
        patience: int = 0,
    ) -> None:
        self.previous: list[str] = []  # last hypothesis, after the words confirmed so far
        self.older: list[list[str]] = []  # the ones before it, oldest first (LocalAgreement-n)
        self.slacks: list[list[float]] = []  # each kept hypothesis's words' slack, oldest first
        self.hold_back = hold_back
        self.hypotheses = max(2, hypotheses)
        self.margin, self.margin_all = margin, margin_all
        self.patience = patience  # updates without agreement before two hypotheses suffice
        self.blocked = 0  # full comparisons in a row that confirmed nothing of pending words
        self.updates = 0  # hypotheses since the window started

    def update(self, hypothesis: list[str], slack: list[float] | None = None) -> list[str]:
        """Confirm the common prefix of ``hypothesis`` and the previous ones (``slack``: each
        word's audio heard after it, when the policy has a margin)."""
        candidates = hypothesis[: max(0, len(hypothesis) - self.hold_back)]
        earlier = [*self.older, self.previous]
        slacks = [*self.slacks, list(slack or [])][-len(earlier) - 1 :]
        checked = slacks if self.margin_all else slacks[-1:]
        agreed = 0
        self.updates += 1
        full = self.updates >= self.hypotheses  # n hypotheses of this window to compare
        if full:
            agreed = self._agreed(candidates, earlier, slack, checked)
        if not agreed and self.patience and self.blocked >= self.patience:
            # n hypotheses in a row have not agreed for a while (a word Whisper keeps
            # hearing differently holds every word after it back): the newest two suffice.
            # Never at a window's start, where the first hypotheses (a second of audio) guess.
            agreed = self._agreed(candidates, earlier[-1:], slack, checked[-2:])
        self.blocked = 0 if agreed or not candidates or not full else self.blocked + 1
        history = [*earlier, hypothesis][-(self.hypotheses - 1) :]
        # What each kept hypothesis says after the words now confirmed.
        kept = [h[agreed:] for h in history]
        self.older, self.previous = kept[:-1], kept[-1]
        self.slacks = [s[agreed:] for s in slacks[-(self.hypotheses - 1) :]]
        return hypothesis[:agreed]

    def _agreed(
        self,
        candidates: list[str],
        earlier: list[list[str]],
        slack: list[float] | None,
        checked: list[list[float]],
    ) -> int:
        """How many of ``candidates`` every hypothesis of ``earlier`` agrees on (and, with a
        margin, that ended ``margin`` before the end of each decode of ``checked``)."""
        agreed = 0
        for index, new in enumerate(candidates):
            olds = [h[index] if index < len(h) else None for h in earlier]
            if not all(old is not None and _same(old, new) for old in olds):
                break
            if (
                self.margin > 0
                and slack is not None
                and not all(index < len(s) and s[index] >= self.margin for s in checked)
            ):
                break
            agreed += 1
        return agreed

    def reset(self) -> None:
        """A new window: nothing pending."""
        self.previous, self.older, self.slacks = [], [], []
        self.blocked = self.updates = 0


def _same(old: str, new: str) -> bool:
    """Two hypotheses' spellings of one word agree (case and punctuation aside)."""
    if comparable(old) != comparable(new) or _cut(old, new):
        return False
    return bool(comparable(new)) or old == new  # punctuation alone: the same mark

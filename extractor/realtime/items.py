"""A live session's decoding policy and its turns' conversation items (their audio span, and
the words sent for them)."""

from __future__ import annotations

from dataclasses import dataclass, field

from .agreement import LocalAgreement


@dataclass(frozen=True)
class DecodePolicy:
    """How a session decodes: every ``step_seconds`` of new audio a partial hypothesis with
    ``partial_beam``; a finished window with ``final_beam``."""

    # The defaults were chosen on bench/realtime_eval.py's tuning set (bench/realtime.md):
    # beam 5 with the repetition guard and LocalAgreement-3 every 0.4 s.
    step_seconds: float = 0.4
    partial_beam: int = 5
    final_beam: int = 5
    agreement: int = 3  # consecutive hypotheses that must agree on a word (LocalAgreement-n)
    hold_back: int = 0  # last words of a hypothesis it never confirms
    repeat_words: int = 3  # a hypothesis is cut where it repeats this many words (0: never)

    def new_agreement(self) -> LocalAgreement:
        return LocalAgreement(hold_back=self.hold_back, hypotheses=self.agreement)


@dataclass
class Item:
    """A turn's conversation item: its audio span and the words sent for it."""

    id: str
    start: int  # first sample (absolute, 16 kHz), prefix padding included
    window: int  # first sample of the window being decoded
    end: int | None = None  # set when committed
    speech_end: int = 0  # end of the last speech heard in it
    words: list[str] = field(default_factory=list)  # every word sent
    transcript: str = ""  # the deltas sent, joined
    window_text: str = ""  # of which in the current window: the decoder's forced prefix
    window_words: int = 0  # of which in the current window
    decoded_to: int = 0  # end of the audio the last decode heard
    agreement: LocalAgreement = field(default_factory=LocalAgreement)
    heard_speech: bool = True  # False: a committed buffer with no speech in it
    previous_id: str | None = None  # the item before it in the conversation
    # A final decode run during a pause, before VAD ends the turn: (window, window_words,
    # speech_end) it was made for, and its words; used if the turn ends with nothing new.
    ready: tuple[tuple[int, int, int], list[str]] | None = None
    sent_heard_at: int = 0  # end of the audio the decode that first had the last words sent heard
    stalled: int = 0  # partial decodes in a row that heard nothing after the window's words

    def new_window(self, start: int) -> None:
        """Decode from ``start`` on with nothing forced (the words sent become the prompt)."""
        self.window, self.window_words, self.window_text, self.stalled = start, 0, "", 0
        self.agreement.reset()

    @property
    def final_key(self) -> tuple[int, int, int]:
        return (self.window, self.window_words, self.speech_end)

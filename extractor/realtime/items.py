"""A live session's decoding policy and its turns' conversation items (their audio span, and
the words sent for them)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..config import Settings
from .agreement import LocalAgreement


def _declared(name: str) -> Any:
    """The default of the setting ``name`` as extractor/config declares it: the one place a
    live decoding default is written (the README's table comes from it too)."""
    return Settings.__dataclass_fields__[name].default


@dataclass(frozen=True)
class DecodePolicy:
    """How a session decodes: every ``step_seconds`` of new audio a partial hypothesis with
    ``partial_beam``; a finished window with ``final_beam``."""

    # The settings' defaults, chosen on bench/realtime_eval.py's tuning set (bench/realtime.md).
    step_seconds: float = _declared("realtime_step_seconds")
    partial_beam: int = _declared("realtime_beam_size")
    final_beam: int = _declared("realtime_beam_size")
    # consecutive hypotheses that must agree on a word (LocalAgreement-n)
    agreement: int = _declared("realtime_agreement")
    hold_back: int = 0  # last words of a hypothesis it never confirms
    repeat_words: int = 3  # a hypothesis is cut where it repeats this many words (0: never)
    prompt_words: int = 60  # words of the turn's text before the window given as the prompt
    # seconds a partial decode must have heard past a word's end to confirm it (0: no check,
    # no word timings); margin_all: every agreeing decode must have (else the newest only)
    margin: float = _declared("realtime_word_margin_seconds")
    margin_all: bool = True  # (both measured: bench/realtime.md)
    # partial decodes in a row without agreement after which the newest two suffice (0: never)
    patience: int = _declared("realtime_agreement_patience")

    @classmethod
    def from_settings(cls, settings: Settings) -> DecodePolicy:
        """A deployment's policy: its ``EXTRACTOR_REALTIME_*`` decoding settings."""
        return cls(
            step_seconds=settings.realtime_step_seconds,
            partial_beam=settings.realtime_beam_size,
            final_beam=settings.realtime_beam_size,
            agreement=settings.realtime_agreement,
            patience=settings.realtime_agreement_patience,
            margin=settings.realtime_word_margin_seconds,
        )

    def new_agreement(self) -> LocalAgreement:
        return LocalAgreement(
            hold_back=self.hold_back,
            hypotheses=self.agreement,
            margin=self.margin,
            margin_all=self.margin_all,
            patience=self.patience,
        )


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

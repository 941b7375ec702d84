"""A live session's decoding policy and its turns' conversation items (their audio span, and
the words sent for them)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..config import Settings
from ..config.extraction import SLIDE_KEEP_SECONDS
from . import events as ev
from .agreement import LocalAgreement, comparable
from .audio import SAMPLE_RATE


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
    partial_beam: int = _declared("realtime_partial_beam_size")
    final_beam: int = _declared("realtime_beam_size")
    # consecutive hypotheses that must agree on a word (LocalAgreement-n)
    agreement: int = _declared("realtime_agreement")
    hold_back: int = 0  # last words of a hypothesis it never confirms
    repeat_words: int = 3  # a hypothesis is cut where it repeats this many words (0: never)
    prompt_words: int = 60  # words of the turn's text before the window given as the prompt
    # the last words of the session's finished turns, ahead of those in the prompt (0: none)
    history_words: int = _declared("realtime_history_words")
    # seconds a partial decode must have heard past a word's end to confirm it (0: no check,
    # no word timings); margin_all: every agreeing decode must have (else the newest only)
    margin: float = _declared("realtime_word_margin_seconds")
    margin_all: bool = True  # (both measured: bench/realtime.md)
    # partial decodes in a row without agreement after which the newest two suffice (0: never)
    patience: int = _declared("realtime_agreement_patience")
    # seconds of the previous turn's end (its audio, its words forced as the decoder's
    # prefix) heard before a turn's first window (0: each turn heard alone)
    context_seconds: float = _declared("realtime_context_seconds")
    # seconds of audio past which a window starts anew at a word sent in its last
    # ``slide_keep`` seconds, those words forced (0: never)
    slide_seconds: float = _declared("realtime_slide_seconds")
    slide_keep: float = SLIDE_KEEP_SECONDS
    tentative: bool = _declared("realtime_tentative")  # send the revisable tail (x_ events)

    @classmethod
    def from_settings(cls, settings: Settings) -> DecodePolicy:
        """A deployment's policy: its ``EXTRACTOR_REALTIME_*`` decoding settings."""
        return cls(
            step_seconds=settings.realtime_step_seconds,
            partial_beam=settings.realtime_partial_beam_size,
            final_beam=settings.realtime_beam_size,
            agreement=settings.realtime_agreement,
            patience=settings.realtime_agreement_patience,
            margin=settings.realtime_word_margin_seconds,
            context_seconds=settings.realtime_context_seconds,
            history_words=settings.realtime_history_words,
            slide_seconds=settings.realtime_slide_seconds,
            tentative=settings.realtime_tentative,
        )

    def new_agreement(self) -> LocalAgreement:
        return LocalAgreement(
            hold_back=self.hold_back,
            hypotheses=self.agreement,
            margin=self.margin,
            margin_all=self.margin_all,
            patience=self.patience,
        )


@dataclass(frozen=True)
class Context:
    """The end of the turn before: its last words, each word's first sample in ``audio``, and
    that audio (16 kHz), from the first word's start to the turn's end."""

    words: list[str]
    starts: list[int]
    audio: np.ndarray

    @classmethod
    def of(
        cls, audio: np.ndarray, words: list[str], ends: list[float], seconds: float
    ) -> Context | None:
        """The words of ``audio`` (each ending at ``ends``, s) in its last ``seconds``."""
        whole = cls(words, [0, *(int(end * SAMPLE_RATE) for end in ends[:-1])], audio)
        kept = whole.last(int(seconds * SAMPLE_RATE))
        return None if kept is None else Context(kept.words, kept.starts, kept.audio.copy())

    def last(self, samples: int) -> Context | None:
        """The words of the last ``samples`` at most (None: not even the last word's)."""
        first = next((i for i, s in enumerate(self.starts) if len(self.audio) - s <= samples), None)
        if first is None:
            return None
        start = self.starts[first]
        return Context(self.words[first:], [s - start for s in self.starts[first:]],
                       self.audio[start:])  # fmt: skip


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
    context: Context | None = None  # the previous turn's end, heard before the first window
    slide_tried: tuple[int, int] = (-1, -1)  # (window, window_words) a slide was last tried at
    tentative: str = ""  # the revisable tail the client was last sent (a delta clears it)
    held: str = ""  # the end of ``transcript`` not sent yet (``turn_detection: null``: all of it)

    def new_window(self, start: int) -> None:
        """Decode from ``start`` on with nothing forced (the words sent become the prompt)."""
        self.window, self.window_words, self.window_text, self.stalled = start, 0, "", 0
        self.context = None
        self.agreement.reset()

    def following(self, words: list[str]) -> str:
        """``words`` as the text that follows the transcript: a space before each, but not
        before a mark Whisper wrote apart (", but") nor the turn's first word."""
        text = ""
        for word in words:
            glued = not comparable(word) or not (self.transcript or text)
            text += word if glued else " " + word
        return text

    def withdrawn(self) -> list[dict[str, Any]]:
        """The events voiding what a client was shown of the item, its audio cleared before
        its commit: ``failed`` when deltas were sent, else an empty tail when one was."""
        if len(self.transcript) > len(self.held):
            message = "the turn's audio was cleared before it was committed: the words sent"
            return [ev.transcription_failed(self.id, "invalid_request_error",
                    "input_audio_buffer_cleared", message + " for it are withdrawn")]  # fmt: skip
        return [ev.transcription_tentative(self.id, "")] if self.tentative else []

    @property
    def final_key(self) -> tuple[int, int, int]:
        return (self.window, self.window_words, self.speech_end)

"""One live transcription session: client events in, server events out, audio work in steps.

A session is driven by its worker's scheduler thread, one ``step()`` at a time: a step reads
one client message, or runs half a second of audio through the VAD, or decodes once (a
partial hypothesis, a window's final words, or a committed turn's end), so several sessions
share one decoding thread fairly and a client sending audio faster than real time only gets
through its own backlog sooner. Partial decodes run only when a session has caught up with
what it was sent: a backlog is worked through turn by turn, final decodes only.

Turns. With ``server_vad`` a turn starts where Silero hears speech (less
``prefix_padding_ms``) and ends after ``silence_duration_ms`` of silence; the turn is then
committed and its final words decoded. With ``turn_detection: null`` the client commits; the
VAD still runs, so silence is never decoded and a pause finalizes what came before it. A
committed buffer with no speech in it completes with an empty transcript and no decode at
all: no "Thank you." out of silence. A turn longer than ``LONG_WINDOW_SECONDS`` is decoded in
windows cut at its pauses (Whisper hears at most 30 s at once), the text before a window
being the decoder's prompt.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..errors import EngineFailure
from . import events as ev
from .agreement import LocalAgreement
from .audio import SAMPLE_RATE, AudioInput
from .decoder import WindowDecoder
from .events import ProtocolError, ServerVad, SessionConfig
from .turns import TurnDetector

log = logging.getLogger(__name__)

FEED_SAMPLES = SAMPLE_RATE // 2  # audio run through the VAD per step
LONG_WINDOW_SECONDS = 20.0  # past this, a window is cut at the next pause
HARD_WINDOW_SECONDS = 28.0  # and here without one
TAIL_SECONDS = 0.25  # audio kept after the last speech for a turn's final decode
MIN_COMMIT_MS = 100  # OpenAI's smallest committable buffer
PROMPT_WORDS = 60  # words of earlier text given to the decoder as its prompt


@dataclass(frozen=True)
class DecodePolicy:
    """How a session decodes: every ``step_seconds`` of new audio a partial hypothesis with
    ``partial_beam``; a finished window with ``final_beam``."""

    step_seconds: float = 0.5
    partial_beam: int = 1
    final_beam: int = 1


@dataclass
class Item:
    """A turn's conversation item: its audio span and the words sent for it."""

    id: str
    start: int  # first sample (absolute, 16 kHz), prefix padding included
    window: int  # first sample of the window being decoded
    end: int | None = None  # set when committed
    speech_end: int = 0  # end of the last speech heard in it
    words: list[str] = field(default_factory=list)  # every word sent
    window_words: int = 0  # of which in the current window
    decoded_to: int = 0  # end of the audio the last decode heard
    agreement: LocalAgreement = field(default_factory=LocalAgreement)
    heard_speech: bool = True  # False: a committed buffer with no speech in it
    previous_id: str | None = None  # the item before it in the conversation


class Session:
    """A transcription session's state; every method but ``__init__`` runs on the scheduler
    thread. ``emit`` gets each server event (a dict) in order."""

    def __init__(
        self,
        decoder: WindowDecoder,
        emit: Callable[[dict[str, Any]], None],
        *,
        policy: DecodePolicy | None = None,
        expires_at: float | None = None,
        max_append_bytes: int = ev.MAX_APPEND_BYTES,
    ) -> None:
        self.decoder, self.emit = decoder, emit
        self.policy = policy or DecodePolicy()
        self.max_append_bytes = max_append_bytes
        self.id = ev.new_id("sess")
        self.expires_at = expires_at or time.time() + 3600
        self.config = SessionConfig()
        self.input = AudioInput(*self.config.format)
        self.detector = TurnDetector(self.config.turn_detection or ServerVad())
        self.messages: deque[str | bytes] = deque()  # client messages not yet handled
        self.backlog_bytes = 0  # their size: the connection stops reading past a limit
        self._backlog_lock = threading.Lock()
        self.on_step: Callable[[Session], None] = lambda _session: None  # after each step
        self.broken = False  # a step raised: the connection ends the session
        self.cpu_seconds = 0.0  # spent in steps, for the metrics and the bench
        self.samples: deque[np.ndarray] = deque()  # converted audio not yet through the VAD
        self.audio = np.zeros(0, np.float32)  # samples from ``self.base`` on
        self.base = 0  # absolute index of ``self.audio[0]``
        self.position = 0  # samples through the VAD so far
        self.buffer_start = 0  # where the uncommitted input buffer begins
        self.item: Item | None = None  # the turn being heard
        self.finishing: deque[Item] = deque()  # committed turns awaiting their final decode
        self.previous_item_id: str | None = None
        self.audio_seconds = 0.0  # received, for usage and metrics
        self.history: list[str] = []  # words of the items before, for the next one's prompt
        self.emit(ev.server_event("session.created", session=self._document()))

    # -- the scheduler's interface ------------------------------------------------------------
    def receive(self, message: str | bytes) -> None:
        """Queue a client message (any thread)."""
        with self._backlog_lock:
            self.backlog_bytes += len(message)
        self.messages.append(message)

    @property
    def busy(self) -> bool:
        """There is work a step would do now (a due partial decode aside)."""
        return bool(self.finishing or self.samples or self.messages or self._cut_due())

    def step(self) -> bool:
        """Do one piece of work; False when there was none."""
        if self.finishing:
            self._finish(self.finishing.popleft())
        elif self._cut_due():
            self._cut_window()
        elif self.samples:
            self._feed(self.samples.popleft())
        elif self.messages:
            message = self.messages.popleft()
            with self._backlog_lock:
                self.backlog_bytes -= len(message)
            self._handle(message)
        elif self._partial_due():
            self._partial()
        else:
            return False
        return True

    def next_partial(self) -> bool:
        return self._partial_due()

    # -- client events -------------------------------------------------------------------------
    def _handle(self, message: str | bytes) -> None:
        try:
            event = ev.parse_message(message)
            kind = event["type"]
            if kind == "input_audio_buffer.append":
                self._append(ev.audio_bytes(event, self.max_append_bytes))
            elif kind == "input_audio_buffer.commit":
                self._commit(event.get("event_id"))
            elif kind == "input_audio_buffer.clear":
                self._clear()
            else:
                self._update(event)
        except ProtocolError as error:
            self.emit(error.event())

    def _update(self, event: dict[str, Any]) -> None:
        config = ev.apply_update(self.config, event)
        if config.format != self.config.format:
            self._queue(self.input.flush())
            self.input = AudioInput(*config.format)
        if config.turn_detection != self.config.turn_detection:
            self.detector.config = config.turn_detection or ServerVad()
        self.config = config
        if event["type"] == "session.update":
            self.emit(ev.server_event("session.updated", session=self._document()))
        else:
            beta = ev.beta_session_document(config, self.id, self.expires_at)
            self.emit(ev.server_event("transcription_session.updated", session=beta))

    def _document(self) -> dict[str, Any]:
        return ev.session_document(self.config, self.id, self.expires_at)

    def _append(self, data: bytes) -> None:
        self.audio_seconds += self.input.seconds(len(data))
        self._queue(self.input.convert(data))

    def _queue(self, samples: np.ndarray) -> None:
        for start in range(0, len(samples), FEED_SAMPLES):
            self.samples.append(samples[start : start + FEED_SAMPLES])

    def _commit(self, event_id: str | None) -> None:
        self._queue(self.input.flush())
        while self.samples:  # the commit covers everything appended before it
            self._feed(self.samples.popleft())
        if (self.position - self.buffer_start) * 1000 < MIN_COMMIT_MS * SAMPLE_RATE:
            raise ProtocolError(
                "input_audio_buffer_commit_empty",
                f"the buffer holds less than {MIN_COMMIT_MS} ms of audio",
                event_id=event_id,
            )
        item = self.item or Item(ev.new_id("item"), self.buffer_start, self.position)
        if self.item is None:
            item.heard_speech = False  # nothing to decode: it completes empty
        self.item = None
        self.detector.restart()  # speech going on after a commit is a new turn
        self._committed(item, self.position)

    def _clear(self) -> None:
        self.item = None
        self.samples.clear()
        self.input.flush()
        self.buffer_start = self.position
        self.detector = TurnDetector(self.detector.config)
        self.detector.position = self.position
        self.emit(ev.server_event("input_audio_buffer.cleared"))

    # -- audio -----------------------------------------------------------------------------------
    def _feed(self, samples: np.ndarray) -> None:
        self.audio = np.concatenate([self.audio, samples])
        self.position += len(samples)
        vad = self.config.turn_detection
        for change in self.detector.feed(samples):
            if change.kind == "started":
                self._speech_started(change.start, vad)
            elif vad is not None and self.item is not None:
                self.item.speech_end = change.speech_end
                self.emit(
                    ev.server_event(
                        "input_audio_buffer.speech_stopped",
                        audio_end_ms=_ms(change.end),
                        item_id=self.item.id,
                    )
                )
                item, self.item = self.item, None
                self._committed(item, change.end)
            elif self.item is not None:  # the client commits: a pause ends only a window
                self.item.speech_end = change.speech_end
                self._cut_window(until=change.speech_end)
        if self.item is not None and self.detector.speaking:
            self.item.speech_end = self.detector.speech_end
        self._trim()

    def _speech_started(self, start: int, vad: ServerVad | None) -> None:
        padding = (vad or self.detector.config).prefix_padding_ms * SAMPLE_RATE // 1000
        begin = max(start - padding, self.buffer_start, self.base)
        item = self.item
        if item is not None:  # speech again within a client-committed buffer
            if item.window_words == 0 and not item.agreement.previous:
                item.window = item.decoded_to = max(begin, item.window)  # skip the pause
            return
        first = begin if vad is not None else self.buffer_start  # usage: the whole buffer
        self.item = Item(ev.new_id("item"), first, begin, decoded_to=begin)
        if vad is not None:
            self.emit(
                ev.server_event(
                    "input_audio_buffer.speech_started",
                    audio_start_ms=_ms(begin),
                    item_id=self.item.id,
                )
            )

    def _committed(self, item: Item, end: int) -> None:
        item.end, item.previous_id = end, self.previous_item_id
        self.buffer_start = end
        added = {"previous_item_id": self.previous_item_id, "item": ev.user_item(item.id)}
        self.emit(
            ev.server_event(
                "input_audio_buffer.committed",
                previous_item_id=self.previous_item_id,
                item_id=item.id,
            )
        )
        self.emit(ev.server_event("conversation.item.added", **added))
        self.previous_item_id = item.id
        self.finishing.append(item)

    def _trim(self) -> None:
        """Forget audio no turn can need: before the open and finishing turns' windows, and
        before the prefix padding of a turn that has not started yet."""
        padding = (self.config.turn_detection or ServerVad()).prefix_padding_ms
        keep = self.position - padding * SAMPLE_RATE // 1000 - SAMPLE_RATE // 2
        windows = [i.window for i in (self.item, *self.finishing) if i is not None]
        keep = max(min([keep, *windows]), self.base)
        if keep > self.base:
            self.audio = self.audio[keep - self.base :].copy()
            self.base = keep

    def _span(self, start: int, end: int) -> np.ndarray:
        return self.audio[max(start - self.base, 0) : max(end - self.base, 0)]

    # -- decoding --------------------------------------------------------------------------------
    def _prompt(self, item: Item) -> str:
        earlier = item.words[: len(item.words) - item.window_words]
        words = [*self.history, *earlier][-PROMPT_WORDS:]
        return " ".join([self.config.prompt, *words]).strip()

    def _decode(self, item: Item, end: int, beam: int) -> list[str]:
        audio = self._span(item.window, end)
        item.decoded_to = end
        prefix = item.words[len(item.words) - item.window_words :]
        return self.decoder.decode(audio, prefix=prefix, prompt=self._prompt(item), beam_size=beam)

    def _send(self, item: Item, words: list[str]) -> None:
        if not words:
            return
        text = " ".join(words)
        delta = text if not item.words else " " + text
        item.words.extend(words)
        item.window_words += len(words)
        self.emit(
            ev.server_event(
                "conversation.item.input_audio_transcription.delta",
                item_id=item.id,
                content_index=0,
                delta=delta,
            )
        )

    def _partial_due(self) -> bool:
        item = self.item
        if item is None or self.samples or self.messages:
            return False
        return self.position - item.decoded_to >= self.policy.step_seconds * SAMPLE_RATE

    def _partial(self) -> None:
        item = self.item
        assert item is not None
        try:
            hypothesis = self._decode(item, self.position, self.policy.partial_beam)
        except EngineFailure as exc:  # the turn's final decode will say it failed
            log.warning("a live partial decode failed", extra={"error": str(exc)})
            return
        self._send(item, item.agreement.update(hypothesis))

    def _cut_due(self) -> bool:
        item = self.item
        if item is None:
            return False
        length = (self.position - item.window) / SAMPLE_RATE
        return length >= HARD_WINDOW_SECONDS or (
            length >= LONG_WINDOW_SECONDS and self.detector.pausing
        )

    def _cut_window(self, until: int | None = None) -> None:
        """Send the rest of the current window's words and start a new window after it."""
        item = self.item
        assert item is not None
        end = min(self.position, (until or self.position) + int(TAIL_SECONDS * SAMPLE_RATE))
        try:
            self._send(item, self._decode(item, end, self.policy.final_beam))
        except EngineFailure as exc:
            log.warning("a live window decode failed", extra={"error": str(exc)})
        item.window, item.window_words = end, 0
        item.agreement.reset()

    def _finish(self, item: Item) -> None:
        assert item.end is not None
        failure = None
        if item.heard_speech and item.speech_end > item.window:
            end = min(item.end, item.speech_end + int(TAIL_SECONDS * SAMPLE_RATE))
            try:
                self._send(item, self._decode(item, end, self.policy.final_beam))
            except EngineFailure as exc:
                failure = exc
        item.window = item.end  # its audio may go
        self._trim()
        if failure is not None:
            error = {
                "type": "transcription_error",
                "code": "decode_failed",
                "message": str(failure),
            }
            self.emit(
                ev.server_event(
                    "conversation.item.input_audio_transcription.failed",
                    item_id=item.id,
                    content_index=0,
                    error=error,
                )
            )
            return
        transcript = " ".join(item.words)
        self.history = [*self.history, *item.words][-PROMPT_WORDS:]
        seconds = (item.end - item.start) / SAMPLE_RATE
        self.emit(
            ev.server_event(
                "conversation.item.input_audio_transcription.completed",
                item_id=item.id,
                content_index=0,
                transcript=transcript,
                usage={"type": "duration", "seconds": round(seconds, 3)},
            )
        )
        done = ev.user_item(item.id)
        done["content"][0]["transcript"] = transcript
        self.emit(
            ev.server_event("conversation.item.done", previous_item_id=item.previous_id, item=done)
        )


def _ms(sample: int) -> int:
    return sample * 1000 // SAMPLE_RATE

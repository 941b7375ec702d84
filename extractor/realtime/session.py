"""One live transcription session: client events in, server events out, audio work in steps.

A session is driven by its worker's scheduler thread, one ``step()`` at a time: a step reads
one client message, or runs half a second of audio through the VAD, or decodes once (a
partial hypothesis, a window's final words, or a committed turn's end), so sessions share one
decoding thread fairly and a client sending audio faster than real time only gets through its
own backlog sooner: partial decodes run only once a session has caught up (a backlog gets
final decodes only). Each partial sends the words agreed on as deltas and, as an ``x_`` event,
the rest of what it heard (``realtime_tentative``).

Turns. With ``server_vad`` a turn starts where Silero hears speech (less
``prefix_padding_ms``) and ends after ``silence_duration_ms`` of silence; the turn is then
committed and its final words decoded. With ``turn_detection: null`` the client commits; the
VAD still runs, so silence is never decoded and a pause finalizes what came before it, and the
buffer is decoded as it comes, but its words are held until the commit: as OpenAI's, no delta
(nor ``x_`` tail) of a buffer goes out before it is committed, so a cleared one shows nothing. A
committed buffer with no speech in it completes with an empty transcript and no decode at
all: no "Thank you." out of silence. A turn longer than ``LONG_WINDOW_SECONDS`` is decoded in
windows cut at its pauses (Whisper hears at most 30 s at once), the text before a window
being the decoder's prompt; with ``DecodePolicy.slide_seconds``, sooner (``hypotheses.slide``).
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Any

import numpy as np

from ..errors import EngineFailure
from . import events as ev
from . import metrics
from .audio import SAMPLE_RATE, Arrivals, AudioInput, milliseconds
from .decoder import WindowDecoder
from .events import ProtocolError, ServerVad, SessionConfig
from .hypotheses import hypothesis, slide, turn_end
from .items import Context, DecodePolicy, Item
from .turns import TurnDetector
from .updates import apply_update, beta_session_document, session_document

log = logging.getLogger(__name__)

FEED_SAMPLES = SAMPLE_RATE // 2  # audio run through the VAD per step
LONG_WINDOW_SECONDS = 20.0  # past this, a window is cut at the next pause
HARD_WINDOW_SECONDS = 28.0  # and here without one
TAIL_SECONDS = 0.4  # audio after the last speech a final decode hears (Silero ends "ships" early)
MIN_COMMIT_MS = 100  # OpenAI's smallest committable buffer
# tiny.en can end its text right after a forced prefix ending a sentence while speech goes on:
STALLED_DECODES = 3  # partials in a row hearing nothing then restart the window (unforced)
RESTART_BACK = SAMPLE_RATE // 2  # this much before the audio that held the last words sent


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
        # Client messages not yet handled, with their arrival.
        self.messages: deque[tuple[str | bytes | ProtocolError, float]] = deque()
        self.arrivals = Arrivals()  # when each append arrived
        self.queued_end = 0  # absolute end of the samples converted so far
        self.backlog_bytes = 0  # their size: the connection stops reading past a limit
        self._backlog_lock = threading.Lock()
        self.on_step: Callable[[Session], None] = lambda _session: None  # after each step
        self.broken = False  # a step raised: the connection ends the session
        # Audio not yet through the VAD: pieces of an append as sent (converted one at a time,
        # so a 15 MiB append is never held as float samples), or samples already converted.
        self.samples: deque[memoryview | np.ndarray] = deque()
        self.audio = np.zeros(0, np.float32)  # samples from ``self.base`` on
        self.base = 0  # absolute index of ``self.audio[0]``
        self.position = 0  # samples through the VAD so far
        self.buffer_start = 0  # where the uncommitted input buffer begins
        self.item: Item | None = None  # the turn being heard
        self.finishing: deque[Item] = deque()  # committed turns awaiting their final decode
        self.previous_item_id: str | None = None
        # the last finished turn's end, for the next turn's first window (policy.context_seconds)
        self.context: Context | None = None
        self.said: deque[str] = deque(maxlen=self.policy.history_words)  # for the prompt
        self.audio_seconds = 0.0  # received, for usage and metrics
        self.emit(ev.server_event("session.created", session=self._document()))

    # -- the scheduler's interface ------------------------------------------------------------
    def receive(self, message: str | bytes | ProtocolError) -> None:
        """Queue a client message, or an error about one the connection refused (any
        thread): its ``error`` event then comes in order with the others."""
        with self._backlog_lock:
            self.backlog_bytes += _size(message)
        self.messages.append((message, time.monotonic()))

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
            message, arrived = self.messages.popleft()
            with self._backlog_lock:
                self.backlog_bytes -= _size(message)
            self._handle(message, arrived)
        elif self.partial_due():
            self._partial()
        else:
            return False
        return True

    # -- client events -------------------------------------------------------------------------
    def _handle(self, message: str | bytes | ProtocolError, arrived: float) -> None:
        try:
            if isinstance(message, ProtocolError):
                raise message
            event = ev.parse_message(message)
            kind = event["type"]
            if kind == "input_audio_buffer.append":
                self._append(ev.audio_bytes(event, self.max_append_bytes), arrived)
            elif kind == "input_audio_buffer.commit":
                self._commit(event.get("event_id"))
            elif kind == "input_audio_buffer.clear":
                self._clear()
            else:
                self._update(event)
        except ProtocolError as error:
            self.emit(error.event())

    def _update(self, event: dict[str, Any]) -> None:
        config = apply_update(self.config, event)
        if config.format != self.config.format:  # what came before is in the old format
            self.samples = deque(self._converted(piece) for piece in self.samples)
            self._queue(self.input.flush())
            self.input = AudioInput(*config.format)
        if config.turn_detection != self.config.turn_detection:
            self.detector.config = config.turn_detection or ServerVad()
        self.config = config
        if event["type"] == "session.update":
            self.emit(ev.server_event("session.updated", session=self._document()))
        else:
            beta = beta_session_document(config, self.id, self.expires_at)
            self.emit(ev.server_event("transcription_session.updated", session=beta))

    def _document(self) -> dict[str, Any]:
        return session_document(self.config, self.id, self.expires_at)

    def _append(self, data: bytes, arrived: float) -> None:
        seconds = self.input.seconds(len(data))
        self.audio_seconds += seconds
        metrics.AUDIO_SECONDS.inc(seconds)
        step = max(2, self.input.bytes_per_second // 2 // 2 * 2)  # half a second, whole samples
        view = memoryview(data)
        for start in range(0, len(view), step):
            self.samples.append(view[start : start + step])
        self.queued_end += round(seconds * SAMPLE_RATE)
        self.arrivals.add(self.queued_end, arrived)

    def _queue(self, samples: np.ndarray) -> None:
        self.queued_end += len(samples)
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
        """Drop the uncommitted buffer (its audio still counts in the session's timeline, as
        OpenAI's offsets do) and what was heard of it; what a client was shown of its turn is
        voided (``Item.withdrawn``). With ``turn_detection: null`` nothing was."""
        item, self.item = self.item, None
        for event in item.withdrawn() if item is not None else []:
            self.emit(event)
        self.input.flush()
        self.buffer_start = self.position
        self.detector = TurnDetector(self.detector.config)
        self.detector.position = self.position
        self.emit(ev.server_event("input_audio_buffer.cleared"))

    # -- audio -----------------------------------------------------------------------------------
    def _converted(self, piece: memoryview | np.ndarray) -> np.ndarray:
        return piece if isinstance(piece, np.ndarray) else self.input.convert(bytes(piece))

    def _feed(self, piece: memoryview | np.ndarray) -> None:
        samples = self._converted(piece)
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
                        audio_end_ms=milliseconds(change.end),
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
        self.item.agreement = self.policy.new_agreement()
        self.item.context, self.context = self.context, None
        if vad is not None:
            self.emit(
                ev.server_event(
                    "input_audio_buffer.speech_started",
                    audio_start_ms=milliseconds(begin),
                    item_id=self.item.id,
                )
            )

    def _committed(self, item: Item, end: int) -> None:
        item.end, item.previous_id = end, self.previous_item_id
        self.buffer_start = end
        previous = {"previous_item_id": self.previous_item_id}
        self.emit(ev.server_event("input_audio_buffer.committed", **previous, item_id=item.id))
        self.emit(
            ev.server_event("conversation.item.added", **previous, item=ev.user_item(item.id))
        )
        self.previous_item_id = item.id
        self._release(item)  # the words a client-committed buffer held
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
        self.arrivals.forget(self.base)  # bounded by the audio kept, not the session's length

    def _span(self, start: int, end: int) -> np.ndarray:
        return self.audio[max(start - self.base, 0) : max(end - self.base, 0)]

    # -- decoding --------------------------------------------------------------------------------
    def _decode(
        self, item: Item, end: int, beam: int, *, timed: bool = False
    ) -> tuple[list[str], list[float] | None]:
        """The words after those sent in the item's window up to ``end`` (``hypotheses``)."""
        audio = self._span(item.window, end)
        item.decoded_to = end
        prompt = " ".join([self.config.prompt, *self.said]).strip()  # as Whisper's, text before
        return hypothesis(self.decoder, self.policy, item, audio, beam, prompt, timed=timed)

    def _send(self, item: Item, words: list[str], heard_at: int) -> None:
        """Send ``words``, first heard by the decode that ran up to sample ``heard_at`` (with
        ``turn_detection: null``, held until the turn is committed)."""
        if not words:
            return
        delta = item.following(words)
        item.transcript += delta
        item.held += delta
        item.window_text += delta
        item.words.extend(words)
        item.window_words += len(words)
        item.sent_heard_at = heard_at
        if self.config.turn_detection is not None or item.end is not None:
            self._release(item)

    def _release(self, item: Item) -> None:
        """Send the item's held words as a delta."""
        if not item.held:
            return
        lag = time.monotonic() - self.arrivals.of(item.sent_heard_at, self.base)
        for _word in item.held.split():
            metrics.WORD_LATENCY.observe(lag)
        delta, item.held = item.held, ""
        item.tentative = ""  # the client drops the tail on a delta
        self.emit(ev.transcription_delta(item.id, delta))

    def partial_due(self) -> bool:
        """A partial decode (or a pause's final one) is due: the scheduler's other question."""
        item = self.item
        if item is None or self.samples or self.messages:
            return False
        if self.config.turn_detection is not None and self.detector.pausing:
            # The speaker paused: decode the turn's end now rather than when VAD ends it.
            tail_in = self.position >= item.speech_end + int(TAIL_SECONDS * SAMPLE_RATE)
            return tail_in and (item.ready is None or item.ready[0] != item.final_key)
        return self.position - item.decoded_to >= self.policy.step_seconds * SAMPLE_RATE

    def _partial(self) -> None:
        item = self.item
        assert item is not None
        heard_at = item.decoded_to  # the previous decode: agreed words were in its hypothesis
        if self.config.turn_detection is not None and self.detector.pausing:
            key, end = item.final_key, item.speech_end + int(TAIL_SECONDS * SAMPLE_RATE)
            try:
                item.ready = (key, self._decode(item, end, self.policy.final_beam)[0])
                self._tentative(item, item.ready[1])  # the words ``_finish`` will send
            except EngineFailure as exc:
                log.warning("a live final decode failed", extra={"error": str(exc)})
            return
        slide(self.decoder, self.policy, item, self._span(item.window, self.position))
        try:
            heard, slack = self._decode(item, self.position, self.policy.partial_beam, timed=True)
        except EngineFailure as exc:  # the turn's final decode will say it failed
            log.warning("a live partial decode failed", extra={"error": str(exc)})
            return
        if not heard and item.window_words and self.detector.speaking:
            item.stalled += 1
            if item.stalled >= STALLED_DECODES:
                item.new_window(max(item.window, item.sent_heard_at - RESTART_BACK))
            return
        item.stalled = 0
        self._send(item, item.agreement.update(heard, slack), heard_at)
        self._tentative(item, item.agreement.previous)

    def _tentative(self, item: Item, words: list[str]) -> None:
        """Send the words heard after those sent as the turn's revisable tail, if changed
        (not from under a second of its window: tiny.en guesses there, words out of a breath)."""
        shown = self.policy.tentative and self.position - item.window >= SAMPLE_RATE
        shown = shown and self.config.turn_detection is not None  # null: nothing before commit
        text = item.following(words) if shown else ""
        if text != item.tentative:
            item.tentative = text
            self.emit(ev.transcription_tentative(item.id, text))

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
            self._send(item, self._decode(item, end, self.policy.final_beam)[0], end)
        except EngineFailure as exc:
            log.warning("a live window decode failed", extra={"error": str(exc)})
        item.new_window(end)

    def _keep_context(self, audio: np.ndarray, text: str) -> None:
        """The end of a finished turn (``audio``, its words ``text``), for the next turn."""
        try:
            context = turn_end(self.decoder, audio, text, self.policy.context_seconds)
        except EngineFailure as exc:
            log.warning("a live turn's alignment failed: the next is heard alone",
                        extra={"error": str(exc)})  # fmt: skip
            return
        if self.item is not None and not self.item.words and self.item.agreement.updates == 0:
            self.item.context = context  # the next turn began before this one was finished
        else:
            self.context = context

    def _finish(self, item: Item) -> None:
        assert item.end is not None
        failure = None
        last = None  # the audio and words of the turn's last window, for the next turn
        if item.heard_speech and item.speech_end > item.window:
            end = min(item.end, item.speech_end + int(TAIL_SECONDS * SAMPLE_RATE))
            try:
                ready = item.ready
                if ready is not None and ready[0] == item.final_key:
                    words = ready[1]  # decoded during the pause: nothing was said since
                else:
                    words = self._decode(item, end, self.policy.final_beam)[0]
                self._send(item, words, end)
                if self.policy.context_seconds > 0 and item.window_text.strip():
                    last = (self._span(item.window, end), item.window_text)
            except EngineFailure as exc:
                failure = exc
        item.window = item.end  # its audio may go (``last`` holds what the context needs)
        self._trim()
        if failure is not None:
            self.emit(ev.transcription_failed(item.id, "transcription_error", "decode_failed",
                                              str(failure)))  # fmt: skip
            return
        if item.heard_speech:
            metrics.COMPLETED_LATENCY.observe(
                time.monotonic() - self.arrivals.of(item.speech_end, self.base)
            )
        seconds = (item.end - item.start) / SAMPLE_RATE
        for event in ev.transcription_completed(
            item.id, item.previous_id, item.transcript, seconds
        ):
            self.emit(event)
        self.said.extend(item.transcript.split())
        if last is not None:
            self._keep_context(*last)


def _size(message: str | bytes | ProtocolError) -> int:
    return 0 if isinstance(message, ProtocolError) else len(message)

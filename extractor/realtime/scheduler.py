"""The one thread per worker that does every live session's audio work, a step at a time.

The worker's main loop only moves bytes (``extractor.realtime.connection``); everything that
costs CPU (JSON and base64, resampling, Silero, Whisper) runs here. One thread, not one per
session: Whisper decodes one window at a time per model anyway, and taking turns step by step
(one message, half a second of VAD, or one decode each) keeps a session sending an hour of
audio at once from starving the others. A worker's CPU goes to at most
EXTRACTOR_REALTIME_SESSIONS streams; more are refused (close 1013) rather than all slowing down.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

from .. import heap
from . import metrics
from .decoder import WindowDecoder
from .events import ProtocolError
from .items import DecodePolicy
from .session import Session

log = logging.getLogger(__name__)


class Scheduler:
    """A worker's live sessions and the thread that steps them."""

    def __init__(
        self,
        decoder: WindowDecoder,
        policy: DecodePolicy,
        *,
        max_sessions: int,
        max_append_bytes: int,
    ) -> None:
        self.decoder, self.policy = decoder, policy
        self.max_sessions, self.max_append_bytes = max_sessions, max_append_bytes
        self._sessions: list[Session] = []
        self._ready = threading.Condition()
        self._thread: threading.Thread | None = None
        self.stopping = False
        # Called with the streams it would still take whenever that changes (in the main loop).
        self.on_room: Callable[[int], None] = lambda _room: None

    @property
    def room(self) -> int:
        return max(self.max_sessions - len(self._sessions), 0)

    @property
    def open_sessions(self) -> int:
        return len(self._sessions)

    def open(
        self, emit: Callable[[dict[str, Any]], None], on_step: Callable[[Session], None], *,
        expires_at: float,
    ) -> Session | None:  # fmt: skip
        """A new session, or None past ``max_sessions``."""
        with self._ready:
            if len(self._sessions) >= self.max_sessions:
                return None
            session = Session(
                self.decoder,
                emit,
                policy=self.policy,
                expires_at=expires_at,
                max_append_bytes=self.max_append_bytes,
            )
            session.on_step = on_step
            self._sessions.append(session)
            metrics.OPEN_STREAMS.inc()
            heap.live_session_opened()
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="realtime", daemon=True)
                self._thread.start()
            self._ready.notify()
        self.on_room(self.room)
        return session

    def close(self, session: Session) -> None:
        with self._ready:
            if session in self._sessions:
                self._sessions.remove(session)
                metrics.OPEN_STREAMS.dec()
                heap.live_session_closed()
        self.on_room(self.room)

    def deliver(self, session: Session, message: str | bytes | ProtocolError) -> None:
        """A client message for ``session`` (from the main loop)."""
        session.receive(message)
        with self._ready:
            self._ready.notify()

    def stop(self) -> None:
        with self._ready:
            self.stopping = True
            self._ready.notify()

    def _run(self) -> None:
        self.decoder.load()  # in this thread: the main loop never waits for a model
        while True:
            with self._ready:
                while not self.stopping and not any(
                    s.busy or s.partial_due() for s in self._sessions
                ):
                    self._ready.wait()
                if self.stopping:
                    return
                sessions = list(self._sessions)
            for session in sessions:  # one step each, in turn
                try:
                    worked = session.step()
                except Exception:  # a bug must not take the other sessions down
                    log.exception("a live session failed")
                    session.broken = True
                    worked = True
                if worked:
                    session.on_step(session)

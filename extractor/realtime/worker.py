"""The gunicorn worker's side of live transcription: WebSocket upgrades to /v1/realtime are
kept in the main loop (``extractor.realtime.connection``) instead of going to a thread.

``RealtimeWorkerMixin`` goes before the buffering worker in a worker class's bases; it reads
the extractor's settings from the app the worker loaded and builds the worker's scheduler
(its decoder loads on the first live session, so workers that never see one pay nothing).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from ..credentials import credentials
from .connection import RealtimeLimits, RealtimeServer
from .decoder import WindowDecoder
from .handshake import serves
from .items import DecodePolicy
from .room import LiveRoom
from .scheduler import Scheduler

log = logging.getLogger(__name__)


def realtime_server(worker: Any, settings: Any) -> RealtimeServer | None:
    """The live transcription of a worker serving ``settings`` (None: switched off)."""
    if settings is None or settings.realtime_sessions < 1:
        return None
    limits = RealtimeLimits(
        sessions=settings.realtime_sessions,
        session_seconds=settings.realtime_session_seconds,
        idle_timeout=settings.realtime_idle_timeout,
        first_audio_seconds=settings.realtime_first_audio_seconds,
        sessions_per_client=settings.realtime_sessions_per_client,
        max_append_bytes=settings.realtime_max_append_bytes,
        buffer_bytes=settings.realtime_buffer_bytes,
        send_buffer_bytes=settings.realtime_send_buffer_bytes,
    )
    model = settings.asr_model if settings.asr_engine == "faster-whisper" else None
    decoder = WindowDecoder(
        model,
        threads=settings.realtime_threads,
        compute_type=settings.asr_compute_type,
        min_window_seconds=settings.realtime_min_window_seconds,
        cache_dir=settings.model_cache_dir,
        shared=_file_engine_model(worker, settings),
    )
    policy = DecodePolicy.from_settings(settings)
    scheduler = Scheduler(
        decoder,
        policy,
        max_sessions=limits.sessions,
        max_append_bytes=limits.max_append_bytes,
    )
    return RealtimeServer(worker, scheduler, limits, credentials(settings))


def _file_engine_model(worker: Any, settings: Any) -> Callable[[], Any] | None:
    """The file engine's ``WhisperModel`` getter when live sessions share it (the settings'
    ``live_shares_speech_model``: its engine was built with a CTranslate2 worker for them)."""
    if not settings.live_shares_speech_model:
        return None
    app = getattr(worker, "wsgi", None)
    extractor = getattr(app, "extensions", {}).get("extractor")
    speech = getattr(extractor, "speech", None)
    return getattr(speech, "whisper_model", None)


class RealtimeWorkerMixin:
    """Serves ``WS /v1/realtime`` in a buffering gthread worker's main loop."""

    realtime: RealtimeServer | None = None
    live_room: LiveRoom | None = None  # set by the master before the fork (pre_fork)
    live_slot: int | None = None

    def run(self) -> None:
        app = getattr(self, "wsgi", None)
        settings = getattr(app, "config", {}).get("SETTINGS") if app is not None else None
        self.realtime = realtime_server(self, settings)
        if self.realtime is not None:
            self.realtime.scheduler.on_room = self.publish_room
            self.publish_room(self.realtime.scheduler.room)
            if self.live_room is not None:
                room, slot = self.live_room, self.live_slot
                self.realtime.clients_elsewhere = lambda address: room.clients_elsewhere(
                    slot, address
                )
                self.realtime.on_clients = lambda addresses: room.publish_clients(slot, addresses)
        try:
            super().run()  # type: ignore[misc]
        finally:
            if self.realtime is not None:
                self.realtime.scheduler.stop()

    def hand_over_upgrade(self, conn: Any) -> None:
        intake = conn.intake
        if self.realtime is None or intake is None or not serves(intake.head.path):
            super().hand_over_upgrade(conn)  # type: ignore[misc]
            return
        intake.spool.seek(0)
        raw = intake.spool.read()
        intake.close()
        conn.intake = None
        self.realtime.accept(conn, raw)

    def murder_pending(self) -> None:
        super().murder_pending()  # type: ignore[misc]
        if self.realtime is not None:
            stopping = not getattr(self, "alive", True)
            if stopping:
                self.publish_room(0)
            self.realtime.tick(stopping=stopping)

    def publish_room(self, free: int) -> None:
        """Tell the sibling workers how many more streams this one takes (none once it stops
        accepting), in the server's ``LiveRoom`` when the master gave it a slot."""
        if self.live_room is not None:
            self.live_room.publish(self.live_slot, free if getattr(self, "alive", True) else 0)

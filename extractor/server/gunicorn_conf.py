"""gunicorn settings for the extractor: settings only, each non-obvious choice explained."""

from __future__ import annotations

import json
import os
import time
from contextlib import suppress
from functools import partial
from typing import Any

from extractor.config import Settings
from extractor.credentials import REFUSED, Credentials, credentials
from extractor.errors import Unauthorized
from extractor.library_pages import release_mapped_library_pages
from extractor.media.workdirs import sweep
from extractor.realtime.room import LiveRoom
from extractor.realtime.worker import RealtimeWorkerMixin
from extractor.server.buffering_worker import BufferingThreadWorker
from extractor.server.intake import Head, IntakeLimits, Refusal
from extractor.web.app import MULTIPART_SLACK
from extractor.web.error_replies import error_document

# How long a worker waits before competing for a new connection, per extraction it already has,
# and at most: the least loaded worker wins, and a health check waits no longer than the cap.
BUSY_ACCEPT_DELAY = 0.005  # seconds per pending extraction
MAX_ACCEPT_DELAY = 0.025  # seconds
# A worker holding all the live streams it takes leaves new connections to a sibling with room
# (extractor.realtime.room), looking again this often, and takes them itself after this long
# (the sibling may be stuck): a stream is then refused only when no worker has room.
FULL_ACCEPT_PAUSE = 0.01  # seconds
FULL_DEFER_SECONDS = 1.0


class EngineAwareThreadWorker(RealtimeWorkerMixin, BufferingThreadWorker):
    """A gthread worker that receives requests whole before a thread serves them (see
    extractor.server.buffering_worker), serves live transcription's WebSockets in its main loop
    (extractor.realtime.worker) and lets an idle sibling take new connections first.

    Every worker's main loop waits on the same listening socket and the kernel wakes them all,
    so which one accepts is a coin toss: two requests can queue behind one engine while another
    worker's engine sits idle. A worker with extractions pending hesitates a few milliseconds
    per pending extraction before accepting, so an idle worker wins the race and, when all are
    busy, the least loaded one does (health checks wait at most ``MAX_ACCEPT_DELAY``).

    It hesitates by leaving the listening socket out of its selector for that long, not by
    sleeping: the same loop receives every request's bytes, and a sleep per accepted connection
    (64 at once: 1.6 s) would stall them all.
    """

    def init_process(self) -> None:
        self.accept_paused_until = 0.0  # the listening socket is left alone until then
        self.hesitated = False  # the pause before the next accept is over
        self.deferring_since: float | None = None  # leaving a connection to a sibling since
        super().init_process()

    def accept(self, listener: Any) -> None:
        if self.defers_to_sibling():
            return
        extensions = getattr(self.wsgi, "extensions", {})
        extractor = extensions.get("extractor")
        pending = extractor.gate.pending if extractor is not None else 0
        # A live stream is work too: spread streams over the workers, one decoder each.
        pending += self.realtime.scheduler.open_sessions if self.realtime is not None else 0
        # And so is a connection whose request is still arriving: connections that came at
        # once were otherwise all taken by the first worker to wake (none counted yet), so four
        # streams opened together on two workers of two sessions lost one (bench.realtime).
        pending += len(self.intakes)
        if pending and not self.hesitated:
            self.hesitated = True
            delay = min(BUSY_ACCEPT_DELAY * pending, MAX_ACCEPT_DELAY)
            self.accept_paused_until = time.monotonic() + delay
            self.set_accept_enabled(False)
            return
        # After the pause the connection is taken (unless a sibling took it meanwhile).
        self.hesitated = False
        super().accept(listener)

    def defers_to_sibling(self) -> bool:
        """Whether to leave the pending connection to a sibling worker: this one holds all the
        live streams it takes and another has room. A connection still waiting after
        ``FULL_DEFER_SECONDS`` of such pauses is taken here."""
        now = time.monotonic()
        scheduler = self.realtime.scheduler if self.realtime is not None else None
        full = scheduler is not None and scheduler.room == 0
        if not full or self.live_room is None or not self.live_room.elsewhere(self.live_slot):
            self.deferring_since = None
            return False
        # Called again right after the previous pause: the same connection is still waiting.
        waiting = now - self.accept_paused_until < FULL_ACCEPT_PAUSE * 10
        if self.deferring_since is None or not waiting:
            self.deferring_since = now
        elif now - self.deferring_since >= FULL_DEFER_SECONDS:
            self.deferring_since = None
            return False
        self.accept_paused_until = now + FULL_ACCEPT_PAUSE
        self.set_accept_enabled(False)
        return True

    def set_accept_enabled(self, enabled: bool) -> None:
        """gthread's main loop re-enables accepting whenever it has room: not while paused."""
        if enabled and time.monotonic() < self.accept_paused_until:
            enabled = False
        super().set_accept_enabled(enabled)

    def wait_for_and_dispatch_events(self, timeout: float) -> None:
        """Wake up when a pause ends, to take the connection if no sibling did."""
        left = self.accept_paused_until - time.monotonic()
        super().wait_for_and_dispatch_events(min(timeout, left) if left > 0 else timeout)


def intake_limits(settings: Settings) -> IntakeLimits:
    """How requests may arrive: deadlines, how many at once, how large (413 before the body
    is spooled; the app's own limit stays the authority)."""
    keys = credentials(settings)  # forked into the workers, each re-reading a changed file
    return IntakeLimits.of(
        settings,
        max_body_bytes=settings.max_upload_bytes + MULTIPART_SLACK,
        spool_dir=settings.tmp_dir,
        admit=partial(_require_credential, keys) if keys.required else None,
    )


def _require_credential(keys: Credentials, head: Head) -> Refusal | None:
    """Refuse an upload without a credential (``Authorization: Bearer <secret or key>``)
    before its body arrives: every endpoint that takes a body needs one (views.authorize
    checks it again, with the same ``Credentials``), so a client without one cannot make the
    server receive and spool 200 MB."""
    if keys.identify(head.fields.get("authorization")) is not None:
        return None
    # The same error the app raises (views.authorize), rendered as the app renders it for
    # this path: OpenAI's shape under /v1 (code "invalid_api_key"), ours elsewhere.
    error = Unauthorized(REFUSED)
    document = error_document(error, head.path)
    return Refusal(
        error.status,
        error.code,
        error.message,
        headers=tuple(error.headers.items()),
        body=json.dumps(document, ensure_ascii=False).encode(),
    )


def gunicorn_options(settings: Settings) -> dict[str, Any]:
    """The gunicorn configuration that serves ``settings``."""
    # Replacement workers start while old ones finish: room for twice the configured count.
    room = LiveRoom(2 * settings.worker_count + 2) if settings.realtime_sessions >= 1 else None
    return {
        "bind": settings.bind,
        "workers": settings.worker_count,
        # gthread: one thread runs the engine while the others answer /healthz and queue, so a
        # busy worker still looks alive; the engine gate bounds how many actually wait. The
        # subclass receives each request whole in the main loop before a thread sees it (slow
        # clients hold no thread) and steers new connections to idle workers.
        "worker_class": "extractor.server.gunicorn_conf.EngineAwareThreadWorker",
        "threads": settings.threads,
        # No preload: neither torch nor CTranslate2 survives a fork, so each worker builds its
        # app and loads its models after forking (post_worker_init below).
        "preload_app": False,
        # The master only kills a worker whose main loop stops heartbeating; request threads do
        # not block it, but keep it well above the longest extraction anyway.
        "timeout": int(settings.request_timeout) + 120,
        # An idle kept-alive connection waits in the main loop, not in a thread: outlast the
        # clients' and proxies' idle limits so they close first (a request sent as the server
        # closes would be lost).
        "keepalive": settings.keepalive_timeout,
        "graceful_timeout": 60,
        # Recycle workers now and then so a slow leak in a native library cannot grow forever;
        # jitter keeps them from all reloading models at the same moment.
        "max_requests": 2000,
        "max_requests_jitter": 200,
        # The heartbeat file lives in memory rather than on a possibly slow disk.
        "worker_tmp_dir": "/dev/shm",
        "post_worker_init": _load_engines,
        # Running jobs are handed back when a worker stops (restart, max_requests, SIGTERM).
        "worker_exit": lambda _server, worker: _stop_jobs(worker),
        # A worker killed mid-request (SIGKILL, OOM, timeout) cannot remove its request files:
        # the master sweeps the directories of dead processes when it reaps one, a new worker
        # when it starts (in case the master itself died) and the master once more on the way
        # out, so neither a crash nor a stop leaves temporary files behind (see workdirs.py).
        "child_exit": lambda _server, worker: _worker_exited(worker, settings.tmp_dir),
        "pre_fork": partial(_give_live_slot, room),
        "post_fork": lambda _server, _worker: sweep(settings.tmp_dir),
        "on_exit": lambda server: _sweep_on_exit(server, settings.tmp_dir),
        "accesslog": None,  # the app logs one structured line per request itself
        "errorlog": "-",
        "loglevel": settings.log_level,
        "proc_name": "extractor",
        # gunicorn 27's control socket defaults to one path per user, shared by every server
        # started by that user; nothing here uses it.
        "control_socket_disable": True,
    }


def _load_engines(worker: Any) -> None:
    """Load (and warm) this worker's engines before it accepts its first request."""
    app = worker.wsgi
    extractor = app.extensions.get("extractor") if hasattr(app, "extensions") else None
    if extractor is not None:
        extractor.load()
    runtime = app.extensions.get("job_runtime") if hasattr(app, "extensions") else None
    if runtime is not None:
        runtime.start()  # asynchronous jobs, once the engines they use are ready
    if extractor is not None and extractor.settings.release_library_pages:
        release_mapped_library_pages()  # what loading ran once (library_pages.py)


def _stop_jobs(worker: Any) -> None:
    """Hand this worker's running jobs back to the queue and stop sending webhooks."""
    app = worker.wsgi
    runtime = app.extensions.get("job_runtime") if hasattr(app, "extensions") else None
    if runtime is not None:
        runtime.stop()


def _give_live_slot(room: LiveRoom | None, server: Any, worker: Any) -> None:
    """In the master, before forking ``worker``: its slot in the server's ``LiveRoom``."""
    if room is not None:
        worker.live_room = room
        worker.live_slot = room.free_slot(w.live_slot for w in server.WORKERS.values())


def _worker_exited(worker: Any, tmp_dir: str | None) -> None:
    """Sweep a dead worker's request files; drop its live gauges from the metrics (its
    counters stay in the sums); empty its slot in the ``LiveRoom``."""
    from extractor.metrics import worker_exited

    room = getattr(worker, "live_room", None)
    if room is not None:
        room.release(worker.live_slot)
    sweep(tmp_dir)
    worker_exited(worker.pid)


def _sweep_on_exit(server: Any, tmp_dir: str | None) -> None:
    """Sweep once every worker is gone: gunicorn SIGKILLs the workers still busy after the
    graceful timeout but calls ``on_exit`` without waiting for them to die, and a dying worker's
    directory would still look owned."""
    for pid in list(getattr(server, "WORKERS", {})):
        with suppress(ChildProcessError):
            os.waitpid(pid, 0)  # already SIGKILLed: returns at once
    sweep(tmp_dir)

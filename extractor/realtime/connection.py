"""The WebSocket of a live session, served from the gunicorn worker's main loop with wsproto.

The worker (``extractor.server``'s buffering gthread worker) receives every request head in
its main loop, non-blocking, and hands a protocol switch to ``hand_over_upgrade``. The
WebSocket stays there: wsproto is sans-I/O (it turns bytes into events and events into bytes
and does no I/O of its own), so the same selector that receives HTTP requests reads and writes
every live session's socket, and no request thread is ever held by a stream that may last an
hour. The measured alternatives (bench/realtime.md): a thread per WebSocket (simple-websocket,
websockets' sync server) would take one of the worker's 4 request threads per stream.

The main loop does only framing: a finished text message is queued for the session's
scheduler thread (``extractor.realtime.scheduler``), which parses and transcribes; its events
come back through gunicorn's method queue (a pipe the selector watches) and are written
non-blocking. Bounds, each a setting (``RealtimeLimits``):

- a message larger than ``max_message_bytes`` is dropped as it arrives and answered with an
  ``error`` (the session goes on); the socket is read in 64 KiB pieces;
- messages queued past ``buffer_bytes`` stop the reading (TCP slows the client down) until
  the scheduler catches up: a client sending an hour of audio in a second holds at most that
  much memory, and the worker's other streams keep their share of the decoder;
- events a client leaves unread past ``send_buffer_bytes``: the connection is dropped;
- no audio within ``first_audio_seconds`` of opening, or for ``idle_timeout`` s after (other
  messages do not count): ``error`` ``idle_timeout``, close 1001; a session older than
  ``session_seconds``: ``error`` ``session_expired``, close 1001; one stream more than
  ``sessions``: ``error`` ``session_limit_reached``, close 1013; one more than
  ``sessions_per_client`` from one client address or one named API key, over all the workers
  (``room``): ``error`` ``client_session_limit_reached``, close 1013; the worker stopping:
  1012; a frame that breaks the protocol (wsproto cannot parse it): 1002; a session whose
  decoding failed: 1011.

A session's place is given back (to the scheduler, and to the address's count) as soon as its
connection starts closing, whoever closes it and why, not when the close handshake ends.
"""

from __future__ import annotations

import contextlib
import json
import logging
import selectors
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from wsproto import ConnectionState, ConnectionType, WSConnection
from wsproto.events import (
    AcceptConnection,
    BytesMessage,
    CloseConnection,
    Message,
    Ping,
    RejectConnection,
    RejectData,
    Request,
    TextMessage,
)
from wsproto.utilities import LocalProtocolError, RemoteProtocolError

from ..credentials import Credentials
from . import handshake, metrics
from .events import EDGE_CHARS, ProtocolError, audio_too_large, event_id_in
from .scheduler import Scheduler
from .session import Session

log = logging.getLogger(__name__)

READ_BYTES = 64 * 1024
GOING_AWAY, PROTOCOL_ERROR, POLICY, RESTART, TRY_LATER = 1001, 1002, 1008, 1012, 1013


@dataclass(frozen=True)
class RealtimeLimits:
    """What one live session may do (every field is an EXTRACTOR_REALTIME_* setting)."""

    sessions: int
    session_seconds: float
    idle_timeout: float
    first_audio_seconds: float
    sessions_per_client: int
    max_append_bytes: int
    buffer_bytes: int
    send_buffer_bytes: int

    @property
    def max_message_bytes(self) -> int:
        """An append's base64 and its JSON around it."""
        return (self.max_append_bytes + 2) // 3 * 4 + 64 * 1024


class LiveConnection:
    """One accepted WebSocket and its session; every method runs in the main loop."""

    def __init__(self, server: RealtimeServer, conn: Any, ws: WSConnection, key: str) -> None:
        self.server, self.conn, self.ws = server, conn, ws
        self.address = handshake.client_address(conn)
        # Whom its stream counts against: its address, and its named key's name if it has one.
        self.clients = (self.address, f"key:{key}") if key else (self.address,)
        self.session: Session | None = None
        self.released = False  # the session's place is given back (the connection is closing)
        self.out = bytearray()  # bytes for the socket not yet taken by it
        self.outbox: deque[dict[str, Any]] = deque()  # events from the scheduler thread
        self.flush_pending = False
        self.parts: list[str | bytes] = []  # the message being received
        self.part_bytes = 0
        self.oversized = False  # the message being received is past the limit: dropped
        self.edges = ["", ""]  # its first and last EDGE_CHARS characters (text messages)
        self.paused = False  # not reading: the session's backlog is full
        self.closing = False  # a close frame is sent or being sent
        self.opened = self.last_message = self.last_audio = time.monotonic()
        self.audio_seen = 0.0  # the session's audio seconds at the last tick
        self.registered = 0  # the selector events this socket is watched for

    @property
    def holds(self) -> bool:
        """The connection holds one of the worker's places for a session."""
        return self.session is not None and not self.released

    # -- events out ---------------------------------------------------------------------------
    def emit(self, event: dict[str, Any]) -> None:
        """Queue a server event (any thread)."""
        self.outbox.append(event)

    def after_step(self, _session: Session) -> None:
        """Scheduler thread: have the main loop send what the step emitted."""
        if not self.flush_pending:
            self.flush_pending = True
            self.server.defer(self.flush)

    def flush(self) -> None:
        self.flush_pending = False
        if self.closing:
            return
        while self.outbox:
            self.out += self.ws.send(Message(data=json.dumps(self.outbox.popleft())))
        session = self.session
        if session is not None and session.broken:
            self.close(1011, "internal error")
            return
        if self.paused and session and session.backlog_bytes < self.server.limits.buffer_bytes:
            self.paused = False
        self.write()

    def write(self) -> None:
        if self.out:
            try:
                sent = self.conn.sock.send(self.out)
            except (BlockingIOError, InterruptedError):
                sent = 0
            except OSError:
                self.drop()
                return
            del self.out[:sent]
        if len(self.out) > self.server.limits.send_buffer_bytes:
            log.info("a live client did not read its events: connection dropped")
            self.drop()
            return
        if self.closing and not self.out:
            self.server.end(self, linger=True)
            return
        self.watch()

    def watch(self) -> None:
        events = (0 if self.paused or self.closing else selectors.EVENT_READ) | (
            selectors.EVENT_WRITE if self.out else 0
        )
        if events == self.registered:
            return
        poller = self.server.worker.poller
        try:
            if not events:
                poller.unregister(self.conn.sock)
            elif not self.registered:
                poller.register(self.conn.sock, events, self.on_ready)
            else:
                poller.modify(self.conn.sock, events, self.on_ready)
        except (KeyError, ValueError, OSError):
            self.drop()
            return
        self.registered = events

    # -- bytes in -----------------------------------------------------------------------------
    def on_ready(self, _sock: Any) -> None:
        if self.registered & selectors.EVENT_WRITE:
            self.write()
        if self.registered & selectors.EVENT_READ:
            self.read()

    def read(self) -> None:
        try:
            data: bytes | None = self.conn.sock.recv(READ_BYTES)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            data = b""
        self.receive(data or None)

    def receive(self, data: bytes | None) -> None:
        try:
            self.ws.receive_data(data)
            for event in self.ws.events():
                self.on_event(event)
        except (RemoteProtocolError, LocalProtocolError) as exc:
            self.close(PROTOCOL_ERROR, str(exc)[:100])
            return
        if data is None or self.ws.state is ConnectionState.CLOSED:
            self.server.end(self, linger=False)
            return
        if not self.closing:
            self.write()

    def on_event(self, event: Any) -> None:
        if isinstance(event, TextMessage | BytesMessage):
            self.last_message = time.monotonic()
            self.on_message_part(event)
        elif isinstance(event, Ping):
            self.out += self.ws.send(event.response())
        elif isinstance(event, CloseConnection):
            if self.ws.state is ConnectionState.OPEN:  # a frame wsproto could not parse: 1002
                self.close(event.code, (event.reason or "")[:100])
                return
            if self.ws.state is ConnectionState.REMOTE_CLOSING:
                self.out += self.ws.send(event.response())
            self.closing = True
            self.server.release(self)
            self.write()

    def on_message_part(self, event: TextMessage | BytesMessage) -> None:
        if self.closing:  # the session is gone: what the client still sends is dropped
            return
        if isinstance(event, TextMessage):
            if not self.part_bytes:
                self.edges[0] = event.data[:EDGE_CHARS]
            self.edges[1] = (self.edges[1] + event.data[-EDGE_CHARS:])[-EDGE_CHARS:]
        self.part_bytes += len(event.data)
        if self.part_bytes > self.server.limits.max_message_bytes:
            self.oversized, self.parts = True, []
        elif not self.oversized:
            data = event.data
            self.parts.append(data if isinstance(data, str) else bytes(data))
        if not event.message_finished:
            return
        parts, oversized, edges = self.parts, self.oversized, self.edges
        self.parts, self.part_bytes, self.oversized, self.edges = [], 0, False, ["", ""]
        if oversized:
            error = audio_too_large(event_id_in(*edges), self.server.limits.max_append_bytes)
            error.message = (
                f"a message may be at most {self.server.limits.max_message_bytes} bytes (an"
                f" append of {self.server.limits.max_append_bytes} bytes of audio); it was"
                " dropped"
            )
            assert self.session is not None
            self.server.scheduler.deliver(self.session, error)  # in order with the others
            return
        message: str | bytes = "".join(parts) if isinstance(event, TextMessage) else b"".join(parts)  # type: ignore[arg-type]
        assert self.session is not None
        self.server.scheduler.deliver(self.session, message)
        if self.session.backlog_bytes >= self.server.limits.buffer_bytes:
            self.paused = True  # resumed by flush() once the scheduler has caught up
            self.watch()

    # -- ending -------------------------------------------------------------------------------
    def fail(self, error: ProtocolError) -> None:
        """Send ``error`` and close with its code."""
        if self.closing:
            return
        metrics.REFUSED.labels(error.code).inc()
        self.out += self.ws.send(Message(data=json.dumps(error.event())))
        self.close(error.close_code or POLICY, error.message[:120])

    def close(self, code: int, reason: str) -> None:
        if self.closing:
            return
        self.closing = True
        self.server.release(self)
        if self.ws.state is ConnectionState.OPEN:
            self.out += self.ws.send(CloseConnection(code=code, reason=reason))
        self.write()

    def drop(self) -> None:
        self.server.end(self, linger=False)

    def tick(self, now: float) -> None:
        """Idle and length limits (called from the worker's main loop about once a second)."""
        limits = self.server.limits
        if self.closing:
            if now - self.last_message > 5.0:  # a close handshake that never finishes
                self.drop()
            return
        session = self.session
        if session is not None and session.audio_seconds > self.audio_seen:
            self.audio_seen, self.last_audio = session.audio_seconds, now
        # Messages not handled yet may be audio: not idle while the session has some.
        waiting = self.paused or (session is not None and session.backlog_bytes > 0)
        if now - self.opened > limits.session_seconds:
            self.fail(
                ProtocolError(
                    "session_expired",
                    f"the session reached its maximum length of {limits.session_seconds:g} s"
                    " (EXTRACTOR_REALTIME_SESSION_SECONDS)",
                    close_code=GOING_AWAY,
                )
            )
        elif waiting:
            return
        elif not self.audio_seen and now - self.opened > limits.first_audio_seconds:
            self.fail(
                ProtocolError(
                    "idle_timeout",
                    f"no audio within {limits.first_audio_seconds:g} s of opening"
                    " (EXTRACTOR_REALTIME_FIRST_AUDIO_SECONDS)",
                    close_code=GOING_AWAY,
                )
            )
        elif now - self.last_audio > limits.idle_timeout:
            self.fail(
                ProtocolError(
                    "idle_timeout",
                    f"no audio for {limits.idle_timeout:g} s (EXTRACTOR_REALTIME_IDLE_TIMEOUT)",
                    close_code=GOING_AWAY,
                )
            )


class RealtimeServer:
    """A worker's live sessions: the handshake, the connections, their limits."""

    def __init__(
        self, worker: Any, scheduler: Scheduler, limits: RealtimeLimits, keys: Credentials
    ) -> None:
        self.worker, self.scheduler, self.limits, self.keys = worker, scheduler, limits, keys
        self.connections: dict[LiveConnection, None] = {}
        # The streams a client address holds on the other workers, and where this worker tells
        # them the addresses of its own (the server's ``LiveRoom``; alone: none, nowhere).
        self.clients_elsewhere: Callable[[str], int] = lambda _address: 0
        self.on_clients: Callable[[list[str]], None] = lambda _addresses: None

    def defer(self, callback: Any) -> None:
        self.worker.method_queue.defer(callback)

    def accept(self, conn: Any, raw: bytes) -> None:
        """Answer the handshake in ``raw`` (the head and whatever followed it)."""
        conn.sock.setblocking(False)
        ws = WSConnection(ConnectionType.SERVER)
        try:
            ws.receive_data(raw)
            request = next((e for e in ws.events() if isinstance(e, Request)), None)
        except RemoteProtocolError as exc:
            self.refuse(conn, ws, handshake.Refused(400, "bad_handshake", str(exc)))
            return
        if request is None:
            self.refuse(conn, ws, handshake.Refused(400, "bad_handshake", "no WebSocket request"))
            return
        headers = {
            k.decode("latin-1").lower(): v.decode("latin-1") for k, v in request.extra_headers
        }
        verdict = handshake.check(request.target, headers, request.subprotocols, self.keys)
        if isinstance(verdict, handshake.Refused):
            self.refuse(conn, ws, verdict)
            return
        identity = verdict.identity
        live = LiveConnection(self, conn, ws, identity.name if identity.keyed else "")
        self.connections[live] = None
        live.out += ws.send(AcceptConnection(subprotocol=verdict.subprotocol))
        # A full worker says so first: the address's (or key's) cap is then moot.
        held = max(len(self.holders(c)) + self.clients_elsewhere(c) for c in live.clients)
        session = None
        if self.scheduler.room and held < self.limits.sessions_per_client:
            session = self.scheduler.open(
                live.emit, live.after_step, expires_at=time.time() + self.limits.session_seconds
            )
        if session is None and self.scheduler.room:
            live.fail(
                ProtocolError(
                    "client_session_limit_reached",
                    f"this client address or API key holds {held} live sessions, the most"
                    " one may (EXTRACTOR_REALTIME_SESSIONS_PER_CLIENT); close one first",
                    close_code=TRY_LATER,
                )
            )
            return
        if session is None:
            live.fail(
                ProtocolError(
                    "session_limit_reached",
                    f"this worker serves {self.limits.sessions} live sessions at once"
                    " (EXTRACTOR_REALTIME_SESSIONS); try again later",
                    kind="server_error",
                    close_code=TRY_LATER,
                )
            )
            return
        live.session = session
        self.on_clients([name for c in self.connections if c.holds for name in c.clients])
        live.receive(b"")  # frames that came with the handshake
        live.flush()

    def refuse(self, conn: Any, ws: WSConnection, refused: handshake.Refused) -> None:
        body = refused.body()
        headers = [(b"content-type", b"application/json"), (b"connection", b"close")]
        if refused.status == 401:
            headers.append((b"www-authenticate", b'Bearer realm="extractor"'))
        try:
            data = ws.send(
                RejectConnection(status_code=refused.status, headers=headers, has_body=True)
            )
            data += ws.send(RejectData(data=body))
        except LocalProtocolError:  # the handshake was too broken to answer in its terms
            data = (
                f"HTTP/1.1 {refused.status} Refused\r\ncontent-type: application/json\r\n"
                f"content-length: {len(body)}\r\nconnection: close\r\n\r\n"
            ).encode() + body
        with contextlib.suppress(OSError):
            conn.sock.send(data)
        self.worker.linger_close(conn)

    def holders(self, client: str) -> list[LiveConnection]:
        """This worker's connections holding a session for ``client`` (address or key)."""
        return [c for c in self.connections if c.holds and client in c.clients]

    def release(self, live: LiveConnection) -> None:
        """Give back ``live``'s place at once (its connection is closing or gone)."""
        if live.session is None or live.released:
            return
        live.released = True
        self.scheduler.close(live.session)
        self.on_clients([name for c in self.connections if c.holds for name in c.clients])

    def end(self, live: LiveConnection, *, linger: bool) -> None:
        if live not in self.connections:
            return
        self.release(live)
        del self.connections[live]
        if live.registered:
            with contextlib.suppress(KeyError, ValueError, OSError):
                self.worker.poller.unregister(live.conn.sock)
            live.registered = 0
        if linger:  # the close frame is out: shut our side, read what the client still sends
            self.worker.linger_close(live.conn)
        else:
            self.worker.close(live.conn)

    def tick(self, stopping: bool) -> None:
        now = time.monotonic()
        for live in list(self.connections):
            if stopping:
                live.close(RESTART, "the server is restarting")
            live.tick(now)

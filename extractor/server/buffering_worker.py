"""A gunicorn worker whose request threads only ever see requests that arrived whole.

gunicorn's ``gthread`` worker hands a connection to a thread as soon as its first bytes arrive;
the thread then reads the rest with blocking reads. A client that sends its headers and then one
byte every few seconds holds that thread for as long as it likes, and a handful of such clients
hold them all: measured on the labeling service (4 threads), four dribbling connections left
every other client without an answer for 60 s (bench/slow_clients.md has the comparison with
the alternatives).

:class:`BufferingThreadWorker` receives each request in the worker's main loop instead, with
non-blocking reads multiplexed by the selector gthread already runs (``extractor.server.intake``):

- a request is handed to a thread only once its head and whole body are in (the body spooled
  in memory up to 64 KiB, then in an unlinked temporary file that nothing can leave behind);
- a head that does not arrive within ``header_timeout``, or a body slower than its deadline
  (``body_timeout`` plus 1 s per ``min_body_rate`` bytes received), gets 408 and the
  connection is closed; a connection that never sent a byte is just closed;
- past ``max_pending`` requests being received at once, a new connection gets 503 with
  ``Retry-After`` rather than queueing behind them;
- a reply must be read within ``send_timeout`` plus 1 s per ``min_body_rate`` bytes, or the
  connection is closed and the thread freed (``extractor.server.reply_deadline``).

Protocol switches (``Upgrade:`` without a body, as a WebSocket handshake is) are not buffered:
:meth:`BufferingThreadWorker.hand_over_upgrade` is called as soon as their head is in. By default
it gives the request to a thread like any other, with the socket readable after the head, so the
app can answer it (a WebSocket endpoint would switch protocols there; without one the app's 404
or 400 is the answer). A WebSocket endpoint on this port should override it and move the
connection to whatever serves long-lived sockets, so that no request thread is held by it.

TLS is terminated by a proxy in every deployment this project documents; a worker configured
with a certificate falls back to gthread's reading in threads.
"""

from __future__ import annotations

import errno
import logging
import selectors
import socket
import time
from concurrent.futures import Future
from contextlib import suppress
from functools import partial
from typing import Any

from gunicorn.http.parser import RequestParser
from gunicorn.workers.gthread import TConn, ThreadWorker

from extractor.server.intake import (
    IntakeLimits,
    Refusal,
    RequestIntake,
    SpooledSource,
    Stage,
    refusal_bytes,
)
from extractor.server.reply_deadline import DeadlineSocket

log = logging.getLogger(__name__)

READ_BYTES = 256 * 1024  # one non-blocking read of a request being received
LINGER_SECONDS = 2.0  # how long a refused connection is read (and discarded) before closing
RETRY_AFTER_SECONDS = 1  # the Retry-After of a 503 for too many requests being received


class BufferedConn(TConn):
    """A gthread connection that may carry a request received whole by the main loop."""

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self.intake: RequestIntake | None = None  # the request being received or handed over
        self.received = False  # the intake is complete: a thread may serve it
        self.pipelined = b""  # bytes after the request handed over: the next request's start
        self.unsent = b""  # the part of a refusal the socket has not taken yet


class BufferingThreadWorker(ThreadWorker):
    """gthread whose threads get whole requests; see the module's docstring."""

    def init_process(self) -> None:
        # The app object (extractor.server.application.FactoryApplication) carries the limits; base
        # init_process ends by running the main loop, so everything is set up before it.
        self.limits: IntakeLimits = getattr(self.app, "intake_limits", None) or IntakeLimits()
        self.intakes: dict[BufferedConn, None] = {}  # requests being received, oldest first
        self.lingering: dict[BufferedConn, float] = {}  # refused connections: close-by time
        super().init_process()

    # -- connections in -------------------------------------------------------------------
    def accept(self, listener: Any) -> None:
        try:
            sock, client = listener.accept()
        except OSError as exc:
            if exc.errno not in (errno.EAGAIN, errno.ECONNABORTED, errno.EWOULDBLOCK):
                raise
            return
        self.nr_conns += 1
        self.enqueue_req(BufferedConn(self.cfg, sock, client, listener.getsockname()))

    def enqueue_req(self, conn: Any) -> None:
        """A new or kept-alive connection has bytes: receive its request before a thread
        sees it (gthread calls this for both); a received request goes to the thread pool."""
        if not isinstance(conn, BufferedConn) or conn.received or self.cfg.is_ssl:
            super().enqueue_req(conn)
            return
        self.start_intake(conn, b"")

    def start_intake(self, conn: BufferedConn, data: bytes) -> None:
        """Begin receiving a request on ``conn``, ``data`` being its first bytes if any."""
        conn.sock.setblocking(False)
        if len(self.intakes) >= self.limits.max_pending:
            busy = Refusal(503, "busy", "too many requests are arriving at once; retry shortly")
            self.refuse(conn, busy, retry_after=RETRY_AFTER_SECONDS)
            return
        conn.intake = RequestIntake(self.limits, time.monotonic())
        self.intakes[conn] = None
        if data and not self.take(conn, data):
            return
        self.poller.register(
            conn.sock, selectors.EVENT_READ, partial(self.on_intake_readable, conn)
        )

    def on_intake_readable(self, conn: BufferedConn, _sock: Any) -> None:
        try:
            data = conn.sock.recv(READ_BYTES)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            data = b""
        if not data:  # the client went away before its request was in
            self.drop_intake(conn)
            self.close(conn)
            return
        self.take(conn, data)

    def take(self, conn: BufferedConn, data: bytes) -> bool:
        """Feed ``data`` to the request being received; False once it left the intake."""
        assert conn.intake is not None
        try:
            stage = conn.intake.feed(data, time.monotonic())
        except Refusal as refusal:
            self.unwatch(conn)
            self.drop_intake(conn)
            self.refuse(conn, refusal)
            return False
        if stage is Stage.HEAD or stage is Stage.BODY:
            if stage is Stage.BODY and conn.intake.head and conn.intake.head.expects_continue:
                self.send_continue(conn)
            return True
        self.unwatch(conn)
        intake = conn.intake
        del self.intakes[conn]
        conn.pipelined = intake.pipelined
        if stage is Stage.UPGRADE:
            self.hand_over_upgrade(conn)
        else:
            self.hand_to_thread(conn, then_socket=False)
        return False

    def send_continue(self, conn: BufferedConn) -> None:
        """Answer ``Expect: 100-continue`` once, so the client sends its body now."""
        intake = conn.intake
        if intake is not None and not intake.continued:
            intake.continued = True
            with suppress(OSError):
                conn.sock.send(b"HTTP/1.1 100 Continue\r\n\r\n")

    def hand_to_thread(self, conn: BufferedConn, *, then_socket: bool) -> None:
        """Give a received request to a request thread: gunicorn's parser reads it from the
        spool (``then_socket``: and from the socket after it), as gthread would have."""
        assert conn.intake is not None
        source = SpooledSource(conn.intake.spool, conn.sock, then_socket=then_socket)
        conn.parser = RequestParser(self.cfg, source, conn.client)
        conn.initialized = conn.data_ready = conn.received = True
        super().enqueue_req(conn)

    def hand_over_upgrade(self, conn: BufferedConn) -> None:
        """The hook for a protocol switch (``Upgrade:``, a WebSocket handshake): called in the
        main loop as soon as the head is in, nothing after it buffered.

        The default serves it in a request thread like any request, the socket readable after
        the head, so the app answers it. A WebSocket endpoint should override this and move the
        connection to whatever serves long-lived sockets rather than hold a request thread.
        """
        self.hand_to_thread(conn, then_socket=True)

    # -- requests out ---------------------------------------------------------------------
    def handle_request(self, req: Any, conn: Any) -> Any:
        """Serve a received request (in a thread), its reply written within the send deadline
        (extractor.server.reply_deadline); a protocol switch handed over keeps the bare socket."""
        intake = getattr(conn, "intake", None)
        if intake is None or intake.stage is Stage.UPGRADE:
            return super().handle_request(req, conn)
        if intake.continued:
            req._expected_100_continue = False  # the main loop has sent it already
        sock = conn.sock
        conn.sock = DeadlineSocket(sock, self.limits.send_timeout, self.limits.min_body_rate)
        try:
            return super().handle_request(req, conn)
        except TimeoutError:
            log.info("a client did not read its reply in time: connection closed")
            return False
        finally:
            conn.sock = sock

    def _keepalive_after(self, conn: Any, keepalive: bool) -> bool:
        """Whether a connection stays open after its response (gthread asks, gunicorn 27+).

        gthread drains what the app left unread of the body from the socket, at most 64 KiB,
        and closes the connection past that, after a response that announced keep-alive: the
        client then sends its next request into a closed connection. A request received whole
        has its body in the spool, not on the socket, and the next request is received afresh
        (bytes pipelined behind it kept aside), so there is nothing to drain: the connection is
        kept exactly when the response said so."""
        intake = getattr(conn, "intake", None)
        if intake is None or intake.stage is Stage.UPGRADE:
            return bool(super()._keepalive_after(conn, keepalive))
        # What the parser read ahead of the body is the spool's, not a next request's.
        conn.parser.unreader.take_buffered()
        return keepalive

    def finish_request(self, conn: Any, fs: Future[Any]) -> None:
        """Free the request's spool; a request the client pipelined behind it is received
        next, since the socket will not signal bytes already read. A connection that ends is
        closed without blocking: gthread's graceful close waits up to 2 s in the main loop for
        the client to close its side, and a client that never does would stall every other."""
        if not isinstance(conn, BufferedConn):
            super().finish_request(conn, fs)
            return
        if conn.intake is not None:
            conn.intake.close()
            conn.intake = None
        conn.received = False
        pipelined, conn.pipelined = conn.pipelined, b""
        kept = not fs.cancelled() and fs.exception() is None and fs.result() is True
        if pipelined and kept and self.alive:
            self.start_intake(conn, pipelined)
        elif kept:
            super().finish_request(conn, fs)  # back to the poller, kept alive
        else:
            self.linger_close(conn)

    # -- deadlines and refusals -------------------------------------------------------------
    def wait_for_and_dispatch_events(self, timeout: float) -> None:
        """Wake up for the nearest intake deadline rather than once a second."""
        deadlines = [c.intake.deadline for c in self.intakes if c.intake is not None]
        deadlines.extend(self.lingering.values())
        if deadlines:
            timeout = max(0.0, min(timeout, min(deadlines) - time.monotonic()))
        super().wait_for_and_dispatch_events(timeout)

    def murder_pending(self) -> None:
        """gthread's expiry of deferred connections, plus the intakes' deadlines (408) and
        the end of lingering closes; called by the main loop after every wake-up."""
        super().murder_pending()
        now = time.monotonic()
        for conn in [c for c in self.intakes if c.intake is not None and c.intake.deadline <= now]:
            assert conn.intake is not None
            refusal = conn.intake.timeout()
            self.unwatch(conn)
            self.drop_intake(conn)
            if refusal is None:
                self.close(conn)
            else:
                self.refuse(conn, refusal)
        if not self.alive:  # stopping: idle connections need not be waited for
            for conn in [c for c in self.intakes if c.intake and c.intake.received == 0]:
                self.unwatch(conn)
                self.drop_intake(conn)
                self.close(conn)
        for conn in [c for c, until in self.lingering.items() if until <= now]:
            self.end_linger(conn)

    def unwatch(self, conn: BufferedConn) -> None:
        """Stop watching ``conn`` for reads (if it was: a request may complete on its first
        bytes, before the socket was ever registered)."""
        with suppress(KeyError, ValueError):
            self.poller.unregister(conn.sock)

    def drop_intake(self, conn: BufferedConn) -> None:
        self.intakes.pop(conn, None)
        if conn.intake is not None:
            conn.intake.close()
            conn.intake = None

    def refuse(self, conn: BufferedConn, refusal: Refusal, retry_after: int | None = None) -> None:
        """Answer ``refusal`` (its response says ``Connection: close``) and close the
        connection once the response is sent."""
        if refusal.status == 507:  # the operator's business: the temporary folder is full
            log.warning("refused a request: %s %s", refusal.status, refusal.message)
        elif refusal.status != 503:
            log.info("refused a request: %s %s", refusal.status, refusal.message)
        response = refusal_bytes(self.limits, refusal, retry_after)
        try:
            conn.sock.setblocking(False)
            sent = conn.sock.send(response)
        except (BlockingIOError, InterruptedError):
            sent = 0
        except OSError:  # the client is gone
            self.close(conn)
            return
        conn.unsent = response[sent:]
        if not conn.unsent:  # the usual case: a small response, an empty socket buffer
            self.linger_close(conn)
            return
        # The buffer is still full of an earlier response the client has not read (it
        # pipelined): the rest goes out as the buffer drains, within LINGER_SECONDS, and the
        # write side is shut only after it, so the client gets the whole answer.
        try:
            events = selectors.EVENT_READ | selectors.EVENT_WRITE
            self.poller.register(conn.sock, events, partial(self.on_unsent, conn))
        except (OSError, ValueError, KeyError):
            self.close(conn)
            return
        self.lingering[conn] = time.monotonic() + LINGER_SECONDS

    def on_unsent(self, conn: BufferedConn, _sock: Any) -> None:
        """Send more of a refusal; what the client sends meanwhile is read and dropped, so a
        client that writes before it reads cannot deadlock with us."""
        try:
            if not conn.sock.recv(READ_BYTES):  # the client shut its side: only write now
                self.poller.modify(conn.sock, selectors.EVENT_WRITE, partial(self.on_unsent, conn))
        except (BlockingIOError, InterruptedError):
            pass
        except OSError:
            self.end_linger(conn)
            return
        try:
            sent = conn.sock.send(conn.unsent)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            self.end_linger(conn)
            return
        conn.unsent = conn.unsent[sent:]
        if not conn.unsent:
            self.unwatch(conn)
            del self.lingering[conn]
            self.linger_close(conn)

    def end_linger(self, conn: BufferedConn) -> None:
        """Close a lingering connection now."""
        self.lingering.pop(conn, None)
        self.close(conn)

    def linger_close(self, conn: BufferedConn) -> None:
        """Close after the response, in the main loop without waiting: the write side is shut
        (the client reads the answer, then end of stream) and what the client still sends is
        read and dropped for up to LINGER_SECONDS, since closing a socket with unread bytes
        would reset it and the client might lose the answer."""
        try:
            conn.sock.setblocking(False)
            conn.sock.shutdown(socket.SHUT_WR)
            self.poller.register(conn.sock, selectors.EVENT_READ, partial(self.on_linger, conn))
        except (OSError, ValueError, KeyError):
            self.close(conn)
            return
        self.lingering[conn] = time.monotonic() + LINGER_SECONDS

    def on_linger(self, conn: BufferedConn, _sock: Any) -> None:
        try:
            data = conn.sock.recv(READ_BYTES)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            data = b""
        if not data:
            self.end_linger(conn)

    def close(self, conn: BufferedConn) -> None:
        """Close a connection the main loop owns (never one a thread is serving)."""
        self.unwatch(conn)
        self.nr_conns -= 1
        conn.close()

"""Receiving one HTTP/1.1 request whole, without a thread: framing, deadlines, spooling.

A request thread that reads a body from a slow client is a thread lost for as long as the
client likes: four connections sending one byte every 5 s used to stall a server of four
threads. :class:`RequestIntake` is the state of one request being received by the worker's
main loop (``extractor.server.buffering_worker``) with non-blocking reads: it finds where the head
ends, how the body is framed (``Content-Length`` or chunked) and where it ends, spools the raw
bytes (in memory up to :data:`SPOOL_MEMORY_BYTES`, then in an unlinked temporary file) and
keeps two deadlines, one for the head and one for the body. Only a request received whole is
handed to a thread, which parses it again with gunicorn's own parser from the spool.

Framing is decided conservatively: anything gunicorn might read differently (two lengths, a
length and chunked together, a transfer coding other than chunked) is refused with 400 here
rather than risk the two parsers disagreeing about where the next request starts.
"""

from __future__ import annotations

import json
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum
from typing import IO, Any

from extractor.config.intake import IntakeSettings
from extractor.errors import NO_ROOM_ERRNOS, ExtractorError, InsufficientStorage, ServiceBusy

SPOOL_MEMORY_BYTES = 64 * 1024  # a body up to this size stays in memory; larger ones go to disk
MAX_HEAD_BYTES = 64 * 1024  # request line and headers together (431 above)
MAX_CHUNK_LINE_BYTES = 4096  # one chunk-size line, extensions included

REASONS = {
    400: "Bad Request",
    408: "Request Timeout",
    413: "Content Too Large",
    431: "Request Header Fields Too Large",
    503: "Service Unavailable",
    507: "Insufficient Storage",
}


def json_error(status: int, code: str, message: str) -> bytes:
    """The extractor's error body, ``{"error": {"code", "message"}}``."""
    return json.dumps({"error": {"code": code, "message": message}}).encode()


@dataclass(frozen=True)
class IntakeLimits:
    """How long and how much a request may take to arrive, and how many may be arriving.

    ``min_body_rate`` makes the body deadline grow with what has arrived: a body has
    ``body_timeout`` seconds plus one second per ``min_body_rate`` bytes received, so an upload
    at least that fast never times out while a dribbling one is cut after ``body_timeout``.
    """

    # The settings' defaults (``config/intake.py``), for a worker or a test given no settings.
    header_timeout: float = IntakeSettings.header_timeout
    body_timeout: float = IntakeSettings.body_timeout
    min_body_rate: int = IntakeSettings.body_min_rate
    max_pending: int = IntakeSettings.max_pending_connections
    send_timeout: float = IntakeSettings.send_timeout  # a reply's, as body_timeout a request's
    max_body_bytes: int | None = None
    spool_dir: str | None = None
    error_body: Callable[[int, str, str], bytes] = json_error
    # Looks at a head whose body is coming and may refuse it before the body is received:
    # the extractor refuses an upload without its shared secret (401) there.
    admit: Callable[[Head], Refusal | None] | None = None

    @classmethod
    def of(cls, settings: IntakeSettings, **own: Any) -> IntakeLimits:
        """The limits a service's settings declare, with what is the service's own (its largest
        body, its error shape, its early refusal)."""
        return cls(
            header_timeout=settings.header_timeout,
            body_timeout=settings.body_timeout,
            min_body_rate=settings.body_min_rate,
            max_pending=settings.max_pending_connections,
            send_timeout=settings.send_timeout,
            **own,
        )


class Refusal(Exception):
    """The request cannot be received: answer ``status`` and close the connection."""

    def __init__(
        self,
        status: int,
        code: str,
        message: str,
        headers: tuple[tuple[str, str], ...] = (),
        body: bytes | None = None,
    ) -> None:
        super().__init__(message)
        self.status, self.code, self.message = status, code, message
        self.headers = headers
        self.body = body  # the JSON to answer, when not the limits' error_body (an admit's)


def refusal_bytes(limits: IntakeLimits, refusal: Refusal, retry_after: int | None = None) -> bytes:
    """The whole HTTP response for ``refusal``, announcing that the connection closes."""
    body = refusal.body
    if body is None:
        body = limits.error_body(refusal.status, refusal.code, refusal.message)
    head = [
        f"HTTP/1.1 {refusal.status} {REASONS.get(refusal.status, 'Error')}",
        "Content-Type: application/json",
        f"Content-Length: {len(body)}",
        "Connection: close",
    ]
    if retry_after is not None:
        head.append(f"Retry-After: {retry_after}")
    head.extend(f"{name}: {value}" for name, value in refusal.headers)
    return ("\r\n".join(head) + "\r\n\r\n").encode("latin-1") + body


def no_room(exc: OSError) -> Refusal:
    """507 for a request whose bytes the server had no room to keep (a full disk or quota);
    503 when the spool failed otherwise (out of file descriptors, an I/O error)."""
    retry = InsufficientStorage.headers["Retry-After"]
    error: ExtractorError = InsufficientStorage.of(exc)
    if exc.errno not in NO_ROOM_ERRNOS:
        reason = f"the server could not keep this request now ({exc.strerror or exc})"
        error = ServiceBusy(f"{reason}; try again in {retry} s", headers={"Retry-After": retry})
    return Refusal(error.status, error.code, error.message, headers=tuple(error.headers.items()))


class Stage(Enum):
    """Where a request being received stands."""

    HEAD = "head"  # the request line and headers are still arriving
    BODY = "body"  # the head is in, the body is arriving
    COMPLETE = "complete"  # everything is in: hand it to a thread
    UPGRADE = "upgrade"  # a protocol switch (WebSocket): hand it over after the head


@dataclass(frozen=True)
class Head:
    """What the intake needs to know of a request's head (gunicorn parses it fully later)."""

    content_length: int | None
    chunked: bool
    expects_continue: bool
    upgrade: str | None
    fields: dict[str, str]  # every header, its name in lower case (the last one of a name)
    path: str  # the request target without its query string


def parse_head(head: bytes) -> Head:
    """The framing of a request head (request line and headers, without the final CRLF CRLF)."""
    lines = head.split(b"\r\n")
    request_line = lines[0].split(b" ")
    if len(request_line) != 3:
        raise Refusal(400, "bad_request", "malformed request line")
    lengths: list[bytes] = []
    codings: list[bytes] = []
    expect = upgrade = None
    fields: dict[str, str] = {}
    for line in lines[1:]:
        name, colon, value = line.partition(b":")
        if not colon or not name or name != name.strip():
            raise Refusal(400, "bad_request", "malformed header line")
        key, value = name.lower(), value.strip()
        fields[key.decode("latin-1")] = value.decode("latin-1")
        if key == b"content-length":
            lengths.append(value)
        elif key == b"transfer-encoding":
            codings.extend(c.strip().lower() for c in value.split(b","))
        elif key == b"expect":
            expect = value.lower()
        elif key == b"upgrade":
            upgrade = value.decode("latin-1")
    if codings and (lengths or codings != [b"chunked"]):
        raise Refusal(400, "bad_request", "only 'Transfer-Encoding: chunked' alone is accepted")
    if len(set(lengths)) > 1 or any(not v.isdigit() or len(v) > 18 for v in lengths):
        raise Refusal(400, "bad_request", "invalid Content-Length")
    return Head(
        content_length=int(lengths[0]) if lengths else None,
        chunked=bool(codings),
        expects_continue=expect == b"100-continue",
        upgrade=upgrade,
        fields=fields,
        path=request_line[1].partition(b"?")[0].decode("latin-1"),
    )


class ChunkScanner:
    """Finds where a chunked body ends, without decoding it (gunicorn decodes it later)."""

    def __init__(self) -> None:
        self._line = bytearray()  # a chunk-size or trailer line being read
        self._data_left = 0  # bytes of chunk data still to come (plus its CRLF)
        self._in_trailer = False

    def feed(self, data: memoryview) -> int | None:
        """How many bytes of ``data`` end the body, or None if all of it belongs to the body."""
        i = 0
        while i < len(data):
            if self._data_left:
                step = min(self._data_left, len(data) - i)
                self._data_left -= step
                i += step
                continue
            end = bytes(data[i : i + MAX_CHUNK_LINE_BYTES]).find(b"\n")
            if end < 0:
                self._line += data[i:]
                if len(self._line) > MAX_CHUNK_LINE_BYTES:
                    raise Refusal(400, "bad_request", "chunk-size or trailer line too long")
                return None
            self._line += data[i : i + end + 1]
            i += end + 1
            line = bytes(self._line).rstrip(b"\r\n")
            self._line.clear()
            if self._in_trailer:
                if not line:
                    return i
                continue
            try:
                size = int(line.split(b";")[0].strip() or b"x", 16)
            except ValueError:
                raise Refusal(400, "bad_request", "invalid chunk size") from None
            if size == 0:
                self._in_trailer = True
            else:
                self._data_left = size + 2  # the data and its CRLF
        return None


class RequestIntake:
    """One request being received on one connection, fed whatever bytes the socket gives."""

    def __init__(self, limits: IntakeLimits, now: float) -> None:
        self.limits = limits
        self.stage = Stage.HEAD
        self.deadline = now + limits.header_timeout
        self.received = 0  # bytes of this request so far, head included
        self.head: Head | None = None
        self.pipelined = b""  # bytes past the end of this request: the next one's start
        self.continued = False  # '100 Continue' was sent for it
        self._head_bytes = bytearray()
        self._body_started = now
        self._body_received = 0
        self._body_left: int | None = None
        self._chunks: ChunkScanner | None = None
        self._spool: IO[bytes] | None = None

    @property
    def spool(self) -> IO[bytes]:
        """The raw request (head and body), rewound once the request is complete."""
        if self._spool is None:
            self._spool = tempfile.SpooledTemporaryFile(  # noqa: SIM115 -- closed by close()
                max_size=SPOOL_MEMORY_BYTES, dir=self.limits.spool_dir, prefix="request-"
            )
        return self._spool

    def close(self) -> None:
        """Free the spool (its temporary file, if it had rolled over to disk)."""
        if self._spool is not None:
            self._spool.close()
            self._spool = None

    def feed(self, data: bytes, now: float) -> Stage:
        """Take bytes read from the socket; the stage the request reached (Refusal if bad).

        A spool that cannot be written (the temporary folder's disk or quota is full) refuses
        this request with 507; the worker and its other connections go on."""
        self.received += len(data)
        try:
            if self.stage is Stage.HEAD:
                return self._feed_head(data, now)
            return self._feed_body(memoryview(data), now)
        except OSError as exc:
            raise no_room(exc) from exc

    def _feed_head(self, data: bytes, now: float) -> Stage:
        start = max(0, len(self._head_bytes) - 3)  # CRLF CRLF may straddle two reads
        self._head_bytes += data
        end = self._head_bytes.find(b"\r\n\r\n", start)
        if end < 0:
            if len(self._head_bytes) > MAX_HEAD_BYTES:
                raise Refusal(431, "headers_too_large", f"request head over {MAX_HEAD_BYTES} bytes")
            return self.stage
        if end > MAX_HEAD_BYTES:
            raise Refusal(431, "headers_too_large", f"request head over {MAX_HEAD_BYTES} bytes")
        self.head = head = parse_head(bytes(self._head_bytes[:end]))
        rest = bytes(self._head_bytes[end + 4 :])
        self.spool.write(self._head_bytes[: end + 4])
        self._head_bytes = bytearray()
        limit = self.limits.max_body_bytes
        if limit is not None and (head.content_length or 0) > limit:
            raise self._too_large()
        if not head.chunked and not head.content_length:
            # No body. A protocol switch is handed over now: what follows is not HTTP.
            self.stage = Stage.UPGRADE if head.upgrade else Stage.COMPLETE
            if self.stage is Stage.UPGRADE:
                self.spool.write(rest)
            else:
                self.pipelined = rest
            self.spool.seek(0)
            return self.stage
        refusal = self.limits.admit(head) if self.limits.admit is not None else None
        if refusal is not None:
            raise refusal
        self.stage = Stage.BODY
        self._body_started = now
        self._body_left = head.content_length
        self._chunks = ChunkScanner() if head.chunked else None
        self.deadline = now + self.limits.body_timeout
        return self._feed_body(memoryview(rest), now) if rest else self.stage

    def _feed_body(self, data: memoryview, now: float) -> Stage:
        if self._chunks is not None:
            end = self._chunks.feed(data)
        else:
            assert self._body_left is not None
            end = self._body_left if len(data) >= self._body_left else None
            self._body_left -= min(len(data), self._body_left)
        body_part = data if end is None else data[:end]
        self._body_received += len(body_part)
        limit = self.limits.max_body_bytes
        if limit is not None and self._body_received > limit:
            raise self._too_large()
        self.spool.write(body_part)
        rate = max(self.limits.min_body_rate, 1)
        self.deadline = self._body_started + self.limits.body_timeout + self._body_received / rate
        if end is None:
            return self.stage
        self.pipelined = bytes(data[end:])
        self.stage = Stage.COMPLETE
        self.spool.seek(0)
        return self.stage

    def _too_large(self) -> Refusal:
        return Refusal(
            413,
            "payload_too_large",
            f"the request body is larger than the limit of {self.limits.max_body_bytes} bytes",
        )

    def timeout(self) -> Refusal | None:
        """The 408 to answer when the deadline passes, or None to close without a word: a
        connection that never sent a byte (a browser's preconnect, say) gets no reply."""
        if self.received == 0:
            return None
        what = "request head" if self.stage is Stage.HEAD else "request body"
        seconds = self.limits.header_timeout if self.stage is Stage.HEAD else None
        limit = f"{seconds:g} s" if seconds is not None else self._body_allowance()
        return Refusal(408, "request_timeout", f"the {what} did not arrive within {limit}")

    def _body_allowance(self) -> str:
        return (
            f"{self.limits.body_timeout:g} s plus 1 s per {self.limits.min_body_rate} bytes"
            f" received"
        )


class SpooledSource:
    """What gunicorn's parser reads a received request from: its spool, then nothing more.

    For a protocol switch handed over (``then_socket``) the socket follows the spool, so the
    handler reads what the client sends next from where the head ended. Timeouts go to the
    socket: gunicorn bounds a body drain with them.
    """

    def __init__(self, spool: IO[bytes], sock: Any, then_socket: bool = False) -> None:
        self.spool, self.sock, self.then_socket = spool, sock, then_socket

    def recv(self, size: int) -> bytes:
        data = self.spool.read(size)
        if data or not self.then_socket:
            return data
        return bytes(self.sock.recv(size))

    def gettimeout(self) -> float | None:
        return self.sock.gettimeout()

    def settimeout(self, value: float | None) -> None:
        self.sock.settimeout(value)

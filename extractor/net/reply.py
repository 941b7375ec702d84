"""An outbound call's reply: read whole within the size limit (gzip/deflate undone with a
bound), or, for an error status, only its first bytes for diagnostics; or, where only the
status counts, read raw to the limit and dropped."""

from __future__ import annotations

import logging
import zlib
from collections.abc import Mapping
from dataclasses import dataclass

import httpx

from extractor.net.errors import OutboundError, OutboundHTTPStatus, OutboundReplyTooLarge

logger = logging.getLogger(__name__)

#: How much of an error reply's body OutboundHTTPStatus keeps.
EXCERPT_BYTES = 2048


@dataclass(frozen=True)
class OutboundReply:
    """The final answer of a call: a 2xx read completely within the size limit, or another
    status (one not retried, or the last attempt's) with the first bytes of its body."""

    # HTTP status code.
    status: int
    # Media type, lowercase, without parameters ("application/json"); "" when none was sent.
    content_type: str
    # A 2xx's body (gzip/deflate content-encoding undone), at most max_reply_bytes long; an
    # excerpt of another's (EXCERPT_BYTES, raw); nothing where only the status counts.
    content: bytes
    # Reply headers: names lowercase, repeated headers joined with ", ".
    headers: Mapping[str, str]
    # 'POST https://host/path' (no credentials, no query string), for messages.
    where: str = ""
    # Whether the body went past max_reply_bytes (read only where the status is the answer).
    over_limit: bool = False

    @property
    def raw(self) -> bytes:
        """The body bytes; another name for ``content``."""
        return self.content

    def raise_for_status(self) -> OutboundReply:
        """This reply if it is a 2xx, else :class:`OutboundHTTPStatus` with its excerpt."""
        if not 200 <= self.status < 300:
            raise OutboundHTTPStatus(
                f"{self.where} answered {self.status}", status=self.status, body=self.content
            )
        return self


class BoundedBody:
    """Collects a reply body, undoing gzip/deflate, and stops once it would pass ``limit``.

    We ask for identity encoding, but a server may compress anyway; decompressing with a bound
    keeps a small compressed reply from expanding without limit.
    """

    def __init__(self, encoding: str | None, limit: int, where: str) -> None:
        codings = [c.strip().lower() for c in (encoding or "").split(",")]
        codings = [c for c in codings if c and c != "identity"]
        if len(codings) > 1 or (codings and codings[0] not in ("gzip", "x-gzip", "deflate")):
            raise OutboundError(
                f"{where} replied with unsupported Content-Encoding {encoding!r:.40}"
            )
        # wbits=47 (32 + 15): a gzip or a zlib header, detected from the data.
        self._inflate = zlib.decompressobj(wbits=47) if codings else None
        self._limit = limit
        self._where = where
        self._parts: list[bytes] = []
        self._size = 0

    def feed(self, chunk: bytes) -> None:
        if self._inflate is None:
            self._add(chunk)
            return
        data = chunk
        try:
            while data:
                # One byte over what is left: enough to notice the limit is passed.
                self._add(self._inflate.decompress(data, self._limit - self._size + 1))
                data = self._inflate.unconsumed_tail
        except zlib.error as exc:
            raise OutboundError(f"{self._where} replied with a corrupt compressed body") from exc

    def finish(self) -> bytes:
        if self._inflate is not None:
            try:
                self._add(self._inflate.flush(self._limit - self._size + 1))
            except zlib.error as exc:
                raise OutboundError(
                    f"{self._where} replied with a corrupt compressed body"
                ) from exc
        return b"".join(self._parts)

    def _add(self, data: bytes) -> None:
        self._size += len(data)
        if self._size > self._limit:
            raise OutboundReplyTooLarge(
                f"{self._where} replied with more than {self._limit} bytes", limit=self._limit
            )
        if data:
            self._parts.append(data)


def read_body(response: httpx.Response, limit: int, where: str) -> bytes:
    """The whole body, streamed and bounded; refuses at once if Content-Length is over the limit."""
    encoding = response.headers.get("content-encoding")
    declared = response.headers.get("content-length", "")
    if not encoding and declared.isdigit() and int(declared) > limit:
        raise OutboundReplyTooLarge(
            f"{where} announced {int(declared)} bytes, more than the limit of {limit}", limit=limit
        )
    body = BoundedBody(encoding, limit, where)
    for chunk in response.iter_raw():
        body.feed(chunk)
    return body.finish()


def read_excerpt(response: httpx.Response) -> bytes:
    """The first bytes of an error reply (raw), for diagnostics; never reads further."""
    parts: list[bytes] = []
    size = 0
    for chunk in response.iter_raw():
        parts.append(chunk)
        size += len(chunk)
        if size >= EXCERPT_BYTES:
            break
    return b"".join(parts)[:EXCERPT_BYTES]


def drop_body(response: httpx.Response, limit: int) -> int:
    """Read and drop the body up to ``limit`` bytes (a short one leaves its connection
    reusable): the bytes read, ``limit + 1`` when there were more. Closing the response after
    closes a connection left mid-body instead of reading on. A failure while reading (the
    call's deadline, a reset) ends the reading: the status has arrived, and is the answer."""
    read = 0
    try:
        for chunk in response.iter_raw():
            read += len(chunk)
            if read > limit:
                return limit + 1
    except Exception as exc:  # the deadline or a broken connection after the status line
        logger.debug("reply body not read to its end: %s", type(exc).__name__)
    return read

"""The errors of outbound calls: one base, one subclass per kind of failure.

Messages may name internal addresses and are for the operator's log; what a user sees is decided
by each caller at the one boundary that turns them into its errors (the labeling service's
``clients.describe``, an extraction job's webhook attempts).
"""

from __future__ import annotations


class OutboundError(Exception):
    """Base of every failure of an outbound call; the message is safe to log (no secrets)."""


class OutboundRefused(OutboundError):
    """The policy forbids the destination (scheme, host name or resolved address); not retried."""


class OutboundTimeout(OutboundError):
    """A connect, read or write time limit, or the whole call's time limit, ran out."""


class OutboundConnectError(OutboundError):
    """The connection could not be made or broke (refused, reset, DNS or TLS failure)."""


class OutboundHTTPStatus(OutboundError):
    """The server answered with a non-2xx status (after retries, for the retryable ones)."""

    def __init__(self, message: str, *, status: int, body: bytes = b"") -> None:
        super().__init__(message)
        self.status = status
        # The reply's first bytes, for diagnostics; kept out of the message, which gets logged.
        self.body = body


class OutboundReplyTooLarge(OutboundError):
    """The reply body passed ``OutboundSettings.max_reply_bytes``; reading stopped there."""

    def __init__(self, message: str, *, limit: int) -> None:
        super().__init__(message)
        self.limit = limit

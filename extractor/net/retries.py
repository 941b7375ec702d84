"""Transport exceptions translated, at one boundary, into ``OutboundError``s that say whether
the failure is transient, and a server's Retry-After read; what is retried and how long to
wait is the use's :class:`~extractor.net.policies.RetryPolicy`."""

from __future__ import annotations

import email.utils
import ssl
import time
from dataclasses import dataclass

import httpcore
import httpx

from extractor.net.errors import OutboundConnectError, OutboundError, OutboundTimeout


@dataclass(frozen=True)
class Retry:
    """An attempt failed in a way the policy retries; ``error`` is raised if it can't be."""

    error: OutboundError
    cause: Exception


def parse_retry_after(value: str | None) -> float | None:
    """Seconds a Retry-After header asks for (delta-seconds or an HTTP-date), or None."""
    if not value:
        return None
    value = value.strip()
    if value.isascii() and value.isdigit():
        return float(int(value))
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError):
        return None
    return max(0.0, when.timestamp() - time.time())


def caused_by(exc: BaseException, kind: type[BaseException]) -> BaseException | None:
    """The first exception of ``kind`` in ``exc``'s cause/context chain."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        if isinstance(current, kind):
            return current
        seen.add(id(current))
        current = current.__cause__ or current.__context__
    return None


def translate(exc: Exception, where: str, limits: str) -> tuple[OutboundError, bool] | None:
    """Our error for a transport exception, and whether it is transient; None if not ours.

    Transient: connecting failed or the connection broke, before or while the request went;
    a read timeout is not (a server busy with the request), nor a certificate problem.
    """
    if isinstance(exc, httpcore.ConnectTimeout | httpx.ConnectTimeout):
        return OutboundTimeout(f"connecting for {where} timed out ({limits}): {exc}"), True
    if isinstance(exc, httpcore.PoolTimeout | httpx.PoolTimeout):
        return OutboundTimeout(f"no free connection for {where} in time ({limits})"), False
    if isinstance(exc, httpcore.TimeoutException | httpx.TimeoutException | TimeoutError):
        return OutboundTimeout(f"{where} timed out ({limits}): {exc}"), False
    if isinstance(exc, httpcore.ConnectError | httpx.ConnectError):
        tls = caused_by(exc, ssl.SSLError)
        if tls is not None:  # a certificate problem does not fix itself in a second
            reason = getattr(tls, "verify_message", None) or getattr(tls, "reason", None) or tls
            return OutboundConnectError(f"TLS with {where} failed: {reason}"), False
        return OutboundConnectError(f"cannot connect for {where}: {exc}"), True
    if isinstance(
        exc,
        httpcore.NetworkError
        | httpcore.RemoteProtocolError
        | httpx.NetworkError
        | httpx.RemoteProtocolError
        | OSError,
    ):
        return OutboundConnectError(f"connection for {where} broke: {exc}"), True
    if isinstance(exc, httpcore.ProtocolError | httpcore.UnsupportedProtocol | httpx.HTTPError):
        # Local protocol errors may quote header values: name the kind only.
        return OutboundError(f"{where} failed: {type(exc).__name__}"), False
    if isinstance(exc, httpx.InvalidURL | httpx.StreamError):
        return OutboundError(f"{where} failed: {type(exc).__name__}"), False
    return None

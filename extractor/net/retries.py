"""Whether a failed attempt is worth another: transport exceptions translated into
``OutboundError``s that say so, and how long to wait (Retry-After, or backoff with jitter,
never past the call's total time)."""

from __future__ import annotations

import email.utils
import logging
import random
import ssl
import time
from dataclasses import dataclass

import httpcore
import httpx

from extractor.labeling.outbound.settings import OutboundSettings
from extractor.net.errors import OutboundConnectError, OutboundError, OutboundTimeout
from extractor.net.guarded import call_deadline

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Retry:
    """An attempt failed in a way that retrying may fix; ``error`` is raised if it can't be."""

    error: OutboundError
    cause: Exception | None
    retry_after: float | None


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
    """Our error for a transport exception, and whether retrying can help; None if not ours.

    Only exceptions before the request could have reached the server, or where the connection
    broke, are worth retrying; a read timeout means a server that is busy with the request.
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


def retry_delay(
    settings: OutboundSettings, retries: int, retry_after: float | None
) -> float | None:
    """Seconds to wait before the next attempt, or None when retries or time are used up."""
    if retries >= settings.retries:
        return None
    if retry_after is not None:
        delay = min(retry_after, settings.retry_after_max)
    else:
        # Exponential backoff with jitter, so many clients hit by one outage spread out.
        ceiling = min(settings.backoff_max, settings.backoff_base * 2**retries)
        delay = random.uniform(ceiling / 2, ceiling)
    deadline = call_deadline.get()
    if deadline is not None and time.monotonic() + delay >= deadline:
        logger.info("not retrying: a %.2f s wait would pass the total time limit", delay)
        return None
    return delay

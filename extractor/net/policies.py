"""What one use of the outbound client may cost and when it tries again, as two small frozen
dataclasses (httpx's ``Limits`` and ``Timeout`` are its model): the client's mechanics stay one,
each use states its numbers. The labeling service's calls take theirs from its settings; the
extraction jobs' webhooks from theirs. Standard library only, so a server that never sends a
webhook loads no HTTP client to read them.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass


def _seconds(owner: str, values: dict[str, float], *, zero: bool) -> None:
    for name, value in values.items():
        if not (math.isfinite(value) and (value >= 0 if zero else value > 0)):
            kind = "zero or more seconds" if zero else "a positive number of seconds"
            raise ValueError(f"{owner}.{name} must be {kind}")


@dataclass(frozen=True)
class Limits:
    """Time, reply size, redirects and connections of one use's calls."""

    # Seconds for one connection: DNS resolution, then the TCP (and TLS) handshake.
    connect_timeout: float = 10.0
    # Seconds the server may stay silent while we wait for more of its reply.
    read_timeout: float = 60.0
    # Seconds one send of request bytes may block.
    write_timeout: float = 60.0
    # Seconds for the whole call: every attempt, redirect hop and backoff wait together.
    total_timeout: float = 120.0
    # Bytes of reply body (after undoing gzip/deflate) read; past them see ``status_only``.
    max_reply_bytes: int = 64 * 1024
    # False: the body is the answer, a longer one is OutboundReplyTooLarge. True: the status is
    # the answer, the body is read raw up to max_reply_bytes and dropped (a receiver streaming
    # gigabytes costs nothing, and a body cut short is no failure).
    status_only: bool = False
    # Redirect hops followed (each checked against the policy again); 0: a 3xx is the answer.
    max_redirects: int = 5
    # Connections open at once across all destinations; more callers wait (connect_timeout).
    max_connections: int = 20
    # Threads resolving host names: a lookup that hangs holds one past its call's timeout.
    dns_threads: int = 4

    def __post_init__(self) -> None:
        _seconds(
            "Limits",
            {
                "connect_timeout": self.connect_timeout,
                "read_timeout": self.read_timeout,
                "write_timeout": self.write_timeout,
                "total_timeout": self.total_timeout,
            },
            zero=False,
        )
        if min(self.max_reply_bytes, self.max_connections, self.dns_threads) < 1:
            raise ValueError("Limits.max_reply_bytes, max_connections, dns_threads must be >= 1")
        if self.max_redirects < 0:
            raise ValueError("Limits.max_redirects must be >= 0")

    def described(self) -> str:
        """'connect 10 s, read 60 s, total 120 s', for error messages."""
        return (
            f"connect {self.connect_timeout:g} s, read {self.read_timeout:g} s, "
            f"total {self.total_timeout:g} s"
        )


@dataclass(frozen=True)
class RetryPolicy:
    """When a failed attempt is tried again, how often, and after how long."""

    # Attempts in all, the first included; 1 never retries.
    attempts: int = 3
    # Seconds before the first retry; doubles per retry.
    backoff_base: float = 0.5
    # Seconds: the most one backoff wait grows to.
    backoff_max: float = 10.0
    # Fraction of each wait that is random (0.5: between half and all of it), so clients hit
    # by one outage spread out.
    jitter: float = 0.5
    # Seconds: the most a server's Retry-After makes us wait; longer asks are waited this long.
    retry_after_max: float = 60.0
    # Statuses retried besides every 5xx.
    statuses: frozenset[int] = frozenset({429})
    # False: only transient transport failures (connecting, a connection that broke) are
    # retried: a read timeout means a server busy with the request, which a repeat would ask
    # twice. True: every transport failure (timeouts, TLS) is, for receivers that handle a
    # repeat once (a webhook-id).
    any_failure: bool = False

    def __post_init__(self) -> None:
        if self.attempts < 1:
            raise ValueError("RetryPolicy.attempts must be >= 1 (retries >= 0)")
        _seconds(
            "RetryPolicy",
            {
                "backoff_base": self.backoff_base,
                "backoff_max": self.backoff_max,
                "retry_after_max": self.retry_after_max,
            },
            zero=True,
        )
        if not 0 <= self.jitter <= 1:
            raise ValueError("RetryPolicy.jitter must be between 0 and 1")

    def retries_status(self, status: int) -> bool:
        """Whether an answer with ``status`` is worth another attempt."""
        return status >= 500 or status in self.statuses

    def retries_failure(self, transient: bool) -> bool:
        """Whether a transport failure is worth another attempt (``transient``: connecting
        failed or the connection broke, which a repeat may well not meet again)."""
        return transient or self.any_failure

    def wait(self, retries: int, retry_after: float | None = None) -> float:
        """Seconds before the next attempt after ``retries`` retries: the server's Retry-After
        (bounded), else backoff with jitter."""
        if retry_after is not None:
            return min(retry_after, self.retry_after_max)
        ceiling = min(self.backoff_max, self.backoff_base * 2**retries)
        return ceiling * (1 - self.jitter * random.random())

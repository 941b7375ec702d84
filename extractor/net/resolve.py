"""What callers of the guarded transport need without loading it (httpx, httpcore and what
they import cost a server process ~4 MB of RSS): the resolver and the per-call context. A
worker checks callback URLs with these on every job submitted, and imports ``guarded`` only
when it has webhooks to send."""

from __future__ import annotations

import contextvars
import socket
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout

#: Turns (host, port) into IP address strings; injectable so tests never touch real DNS.
Resolver = Callable[[str, int], list[str]]

# Monotonic time by which the current call must end; set per call, read by every socket
# operation. A context variable, so concurrent calls from several threads each see their own.
call_deadline: contextvars.ContextVar[float | None] = contextvars.ContextVar(
    "outbound_deadline", default=None
)
# The scheme of the request being sent, which the allow-list entries may restrict; the network
# backend only sees host and port. The pool keys connections by scheme, host and port, so a
# connection checked for one scheme is never reused for another.
request_scheme: contextvars.ContextVar[str | None] = contextvars.ContextVar(
    "outbound_scheme", default=None
)


def system_resolver(host: str, port: int) -> list[str]:
    """Every address ``host`` resolves to, in the system's order (socket.getaddrinfo)."""
    infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return list(dict.fromkeys(str(info[4][0]) for info in infos))


# Lookups made while a client waits (a callback URL checked at submit) run here, so a name
# server that never answers holds one of these few threads, never the request's own past its
# deadline; once all are stuck, further lookups wait their deadline out and are refused.
_LOOKUPS = ThreadPoolExecutor(max_workers=4, thread_name_prefix="submit-dns")


def resolve_within(resolver: Resolver, host: str, port: int, seconds: float) -> list[str]:
    """``resolver(host, port)``, or ``TimeoutError`` (an ``OSError``) after ``seconds``."""
    lookup = _LOOKUPS.submit(resolver, host, port)
    try:
        return lookup.result(timeout=seconds)
    except FutureTimeout:
        lookup.cancel()  # not started yet: it never will be
        raise TimeoutError(f"no answer in {seconds:g} s") from None


__all__ = ["Resolver", "call_deadline", "request_scheme", "resolve_within", "system_resolver"]

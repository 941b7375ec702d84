"""The guarded transport: resolving a host, checking every address against an
:class:`~extractor.net.ssrf.OutboundPolicy` and connecting to exactly an address that passed are
one step inside an httpcore network backend, so DNS rebinding has no gap to use and a refused
destination is never connected to. Every socket operation also stops at the call's total
deadline (``call_deadline``), so a server dripping one byte at a time cannot hold a call.

Callers set ``call_deadline`` and ``request_scheme`` (context variables, so concurrent calls on
several threads each see their own) around each request they send through a
:class:`GuardedTransport`.
"""

from __future__ import annotations

import concurrent.futures
import logging
import ssl
import time
from collections.abc import Iterable, Iterator
from typing import Any

import httpcore
import httpx

from extractor.net.errors import OutboundRefused
from extractor.net.resolve import Resolver, call_deadline, request_scheme
from extractor.net.resolve import system_resolver as system_resolver  # callers' old home of it
from extractor.net.ssrf import OutboundPolicy, parse_ip

logger = logging.getLogger(__name__)

_WRITE_SLICE = 64 * 1024  # bytes per socket write, so the total deadline is re-checked often


def capped(timeout: float | None, exc_type: type[Exception]) -> float | None:
    """``timeout`` shortened to what is left of the call's total time; raises when none is."""
    deadline = call_deadline.get()
    if deadline is None:
        return timeout
    remaining = deadline - time.monotonic()
    if remaining <= 0:
        raise exc_type("the call's total time limit was reached")
    return remaining if timeout is None else min(timeout, remaining)


class DeadlineStream(httpcore.NetworkStream):
    """A connected stream whose reads and writes also stop at the call's total deadline.

    Per-read timeouts alone let a server that drips one byte at a time hold a call forever.
    """

    def __init__(self, inner: httpcore.NetworkStream) -> None:
        self._inner = inner

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        return self._inner.read(max_bytes, capped(timeout, httpcore.ReadTimeout))

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        view = memoryview(buffer)
        for start in range(0, len(view), _WRITE_SLICE):
            chunk = bytes(view[start : start + _WRITE_SLICE])
            self._inner.write(chunk, capped(timeout, httpcore.WriteTimeout))

    def close(self) -> None:
        self._inner.close()

    def start_tls(
        self,
        ssl_context: ssl.SSLContext,
        server_hostname: str | None = None,
        timeout: float | None = None,
    ) -> httpcore.NetworkStream:
        # server_hostname is the URL's host name (httpcore passes it), so the certificate is
        # checked against the name even though the socket was opened to a bare IP address.
        tls = self._inner.start_tls(
            ssl_context, server_hostname, capped(timeout, httpcore.ConnectTimeout)
        )
        return DeadlineStream(tls)

    def get_extra_info(self, info: str) -> Any:
        return self._inner.get_extra_info(info)


class GuardedBackend(httpcore.NetworkBackend):
    """Resolves, checks and connects in one step, so sockets only go to addresses that passed."""

    def __init__(self, policy: OutboundPolicy, resolver: Resolver, dns_threads: int = 4) -> None:
        self._policy = policy
        self._resolver = resolver
        self._inner = httpcore.SyncBackend()
        # getaddrinfo has no timeout of its own; running it here lets connect_timeout bound it.
        # A lookup that hangs (a client's own slow name server) holds its thread past the
        # call's timeout: callers that must not queue behind one give a thread per call.
        self._dns = concurrent.futures.ThreadPoolExecutor(
            max_workers=dns_threads, thread_name_prefix="outbound-dns"
        )

    def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore.NetworkStream:
        scheme = request_scheme.get()
        self._policy.check_host(host, scheme, port)
        addresses = self._resolve(host, port, capped(timeout, httpcore.ConnectTimeout))
        self._policy.check_addresses(host, addresses, scheme=scheme, port=port)
        last_error: Exception | None = None
        for address in addresses:
            try:
                stream = self._inner.connect_tcp(
                    address,  # the checked address itself, never the name again
                    port,
                    timeout=capped(timeout, httpcore.ConnectTimeout),
                    local_address=local_address,
                    socket_options=socket_options,
                )
            except (httpcore.ConnectError, httpcore.ConnectTimeout) as exc:
                logger.debug("connecting to %s (%s) port %d failed: %s", host, address, port, exc)
                last_error = exc
                continue
            return DeadlineStream(stream)
        assert last_error is not None  # _resolve never returns an empty list
        raise last_error

    def _resolve(self, host: str, port: int, timeout: float | None) -> list[str]:
        """The addresses to try for ``host``: the literal itself, or what the resolver says."""
        literal = parse_ip(host)
        if literal is not None:
            return [str(literal)]
        future = self._dns.submit(self._resolver, host, port)
        try:
            addresses = list(future.result(timeout=timeout))
        except TimeoutError as exc:  # before OSError: TimeoutError is one
            future.cancel()
            raise httpcore.ConnectTimeout(f"resolving {host} took over {timeout:.1f} s") from exc
        except (OSError, UnicodeError) as exc:
            raise httpcore.ConnectError(f"cannot resolve {host}: {exc}") from exc
        if not addresses:
            raise httpcore.ConnectError(f"{host} resolved to no address")
        return addresses

    def connect_unix_socket(
        self,
        path: str,
        timeout: float | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore.NetworkStream:
        raise OutboundRefused("refusing a unix socket: outbound calls use TCP only")

    def sleep(self, seconds: float) -> None:
        time.sleep(seconds)

    def close(self) -> None:
        self._dns.shutdown(wait=False, cancel_futures=True)


class CoreStream(httpx.SyncByteStream):
    """An httpcore reply body as httpx wants it; httpcore's exceptions are translated later."""

    def __init__(self, stream: Iterable[bytes]) -> None:
        self._stream = stream

    def __iter__(self) -> Iterator[bytes]:
        yield from self._stream

    def close(self) -> None:
        close = getattr(self._stream, "close", None)
        if close is not None:
            close()


class GuardedTransport(httpx.BaseTransport):
    """An httpx transport over an httpcore pool whose only way to a socket is the guarded backend.

    httpx's own HTTPTransport cannot take a network backend, and has proxy and env handling that
    could route around the checks; this one has neither.
    """

    def __init__(self, backend: GuardedBackend, ssl_context: ssl.SSLContext, size: int) -> None:
        self._pool = httpcore.ConnectionPool(
            ssl_context=ssl_context,
            max_connections=size,
            max_keepalive_connections=size,
            keepalive_expiry=30.0,
            http1=True,
            http2=False,
            retries=0,  # retries are ours, with backoff and budget
            network_backend=backend,
        )

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        core_request = httpcore.Request(
            method=request.method,
            url=httpcore.URL(
                scheme=request.url.raw_scheme,
                host=request.url.raw_host,
                port=request.url.port,
                target=request.url.raw_path,
            ),
            headers=request.headers.raw,
            content=request.stream,
            extensions=request.extensions,
        )
        core_response = self._pool.handle_request(core_request)
        body = core_response.stream
        assert isinstance(body, Iterable)
        return httpx.Response(
            status_code=core_response.status,
            headers=core_response.headers,
            stream=CoreStream(body),
            extensions=core_response.extensions,
            request=request,
        )

    def close(self) -> None:
        self._pool.close()

"""The one door through which the labeling service calls customer-supplied URLs.

Customers give us URLs (their text-extraction API, their prediction API). Calling an arbitrary URL
from inside our network is a server-side request forgery (SSRF) risk, so every such call goes
through ``OutboundClient``: it resolves the host name, checks every address against an
``OutboundPolicy`` and connects to exactly the address it checked (resolution, check and connect
are one step inside a custom httpcore network backend, so DNS rebinding has no gap to use). The
same happens on every redirect hop, judged by its own scheme, host and port: a hop inherits no
allowance from the one before. Time, reply size and retries are bounded, and every transport
failure becomes an ``OutboundError`` whose message never carries a secret (but may name internal
addresses: it is for the operator's log, and ``clients`` decides what a user sees).

The policy (``extractor.net.ssrf``), the guarded transport (``extractor.net.guarded``) and the
errors (``extractor.net.errors``) are shared with the extraction jobs' webhooks; this module holds
the labeling service's client.
"""

from __future__ import annotations

import email.utils
import hashlib
import hmac
import json
import logging
import math
import random
import ssl
import time
import zlib
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

import httpcore
import httpx

from extractor.config.labeling import LabelingSettings
from extractor.net.errors import (
    OutboundConnectError,
    OutboundError,
    OutboundHTTPStatus,
    OutboundRefused,
    OutboundReplyTooLarge,
    OutboundTimeout,
)
from extractor.net.guarded import (
    GuardedBackend,
    GuardedTransport,
    Resolver,
    call_deadline,
    request_scheme,
    system_resolver,
)
from extractor.net.ssrf import AllowEntry, OutboundPolicy, default_refusal_reason, normalise_host

#: The setting that lists destinations allowed despite the default refusals.
ALLOW_ENV_VAR = LabelingSettings.variable("outbound_allow")

# The policy, the guarded transport and the errors live in extractor.net (the extraction
# jobs' webhooks use them too); they are part of this module's interface.
__all__ = [
    "ALLOW_ENV_VAR",
    "AllowEntry",
    "OutboundClient",
    "OutboundConnectError",
    "OutboundError",
    "OutboundHTTPStatus",
    "OutboundPolicy",
    "OutboundRefused",
    "OutboundReply",
    "OutboundReplyTooLarge",
    "OutboundSettings",
    "OutboundTimeout",
    "Resolver",
    "default_refusal_reason",
    "system_resolver",
]

logger = logging.getLogger(__name__)

USER_AGENT = "extractor-labeling/outbound"

_REDIRECT_STATUSES = frozenset({301, 302, 303, 307, 308})
_EXCERPT_BYTES = 2048  # how much of an error reply's body OutboundHTTPStatus keeps


# -- settings and reply -----------------------------------------------------------------------


@dataclass(frozen=True)
class OutboundSettings:
    """Time, size and retry limits of outbound calls (defaults suit a slow extraction API)."""

    # The defaults that are also settings are the settings' own (EXTRACTOR_LABELING_OUTBOUND_*,
    # declared with their meaning in extractor/config/labeling.py); the others are fixed here.
    # Seconds for one connection: DNS resolution, then the TCP (and TLS) handshake.
    connect_timeout: float = LabelingSettings.outbound_connect_timeout
    # Seconds the server may stay silent while we wait for more of its reply.
    read_timeout: float = LabelingSettings.outbound_read_timeout
    # Seconds one send of request bytes may block.
    write_timeout: float = 60.0
    # Seconds for the whole call: every attempt, redirect hop and backoff wait together.
    total_timeout: float = LabelingSettings.outbound_total_timeout
    # Bytes of reply body (after undoing gzip/deflate) accepted; more is OutboundReplyTooLarge.
    max_reply_bytes: int = LabelingSettings.outbound_max_reply_bytes
    # Redirect hops followed (each one checked against the policy again); 0 follows none.
    max_redirects: int = 5
    # Extra attempts after the first, on connection errors, 429 and 5xx replies.
    retries: int = LabelingSettings.outbound_retries
    # Seconds before the first retry; doubles per retry, with random jitter of up to half.
    backoff_base: float = LabelingSettings.outbound_backoff_seconds
    # Seconds: the most one backoff wait grows to.
    backoff_max: float = 10.0
    # Seconds: the most a server's Retry-After makes us wait; longer asks are waited this long.
    retry_after_max: float = 60.0
    # Connections open at once across all destinations; more callers wait (within connect_timeout).
    max_connections: int = 20

    def __post_init__(self) -> None:
        for name in ("connect_timeout", "read_timeout", "write_timeout", "total_timeout"):
            value = getattr(self, name)
            if not (math.isfinite(value) and value > 0):
                raise ValueError(f"OutboundSettings.{name} must be a positive number of seconds")
        for name in ("backoff_base", "backoff_max", "retry_after_max"):
            value = getattr(self, name)
            if not (math.isfinite(value) and value >= 0):
                raise ValueError(f"OutboundSettings.{name} must be zero or more seconds")
        if self.max_reply_bytes < 1 or self.max_connections < 1:
            raise ValueError("OutboundSettings.max_reply_bytes and max_connections must be >= 1")
        if self.max_redirects < 0 or self.retries < 0:
            raise ValueError("OutboundSettings.max_redirects and retries must be >= 0")


@dataclass(frozen=True)
class OutboundReply:
    """A 2xx reply, read completely and within the size limit."""

    # HTTP status code, 200-299.
    status: int
    # Media type, lowercase, without parameters ("application/json"); "" when none was sent.
    content_type: str
    # The raw body bytes (gzip/deflate content-encoding undone); at most max_reply_bytes long.
    content: bytes
    # Reply headers: names lowercase, repeated headers joined with ", ".
    headers: Mapping[str, str]

    @property
    def raw(self) -> bytes:
        """The body bytes; another name for ``content``."""
        return self.content


# -- reply reading ----------------------------------------------------------------------------


class _BoundedBody:
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


def _read_body(response: httpx.Response, limit: int, where: str) -> bytes:
    """The whole body, streamed and bounded; refuses at once if Content-Length is over the limit."""
    encoding = response.headers.get("content-encoding")
    declared = response.headers.get("content-length", "")
    if not encoding and declared.isdigit() and int(declared) > limit:
        raise OutboundReplyTooLarge(
            f"{where} announced {int(declared)} bytes, more than the limit of {limit}", limit=limit
        )
    body = _BoundedBody(encoding, limit, where)
    for chunk in response.iter_raw():
        body.feed(chunk)
    return body.finish()


def _read_excerpt(response: httpx.Response) -> bytes:
    """The first bytes of an error reply (raw), for diagnostics; never reads further."""
    parts: list[bytes] = []
    size = 0
    for chunk in response.iter_raw():
        parts.append(chunk)
        size += len(chunk)
        if size >= _EXCERPT_BYTES:
            break
    return b"".join(parts)[:_EXCERPT_BYTES]


def _parse_retry_after(value: str | None) -> float | None:
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


def _caused_by(exc: BaseException, kind: type[BaseException]) -> BaseException | None:
    """The first exception of ``kind`` in ``exc``'s cause/context chain."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        if isinstance(current, kind):
            return current
        seen.add(id(current))
        current = current.__cause__ or current.__context__
    return None


def _translate(exc: Exception, where: str, limits: str) -> tuple[OutboundError, bool] | None:
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
        tls = _caused_by(exc, ssl.SSLError)
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


def _describe(method: str, url: httpx.URL) -> str:
    """'POST https://host:port/path' for messages and logs: no credentials, no query string."""
    shown = str(url.copy_with(userinfo=b"", query=None, fragment=None))
    return f"{method} {shown}" if method else shown


def _join(base: httpx.URL, location: str) -> httpx.URL:
    """The URL a Location header points to, resolved against the request URL."""
    try:
        return base.join(location)
    except (httpx.InvalidURL, ValueError, TypeError) as exc:
        raise OutboundError(f"{_describe('', base)} redirected to an invalid URL") from exc


def _keeps_credentials(origin: httpx.URL, target: httpx.URL) -> bool:
    """Whether a redirect to ``target`` may carry the credentials meant for ``origin``.

    Same scheme, host and port, or the same host upgraded from http to https; anything else
    could hand our bearer token to a third party.
    """
    if normalise_host(origin.host) != normalise_host(target.host):
        return False
    if origin.scheme == target.scheme and origin.port == target.port:
        return True
    upgrade = origin.scheme == "http" and target.scheme == "https"
    return upgrade and origin.port is None and target.port is None


def _check_secret(secret: str) -> None:
    """Refuses a secret that cannot go into a header, without ever quoting it."""
    if not secret or not all("!" <= ch <= "~" for ch in secret):
        raise ValueError("secret must be non-empty visible ASCII: it is sent in an HTTP header")


@dataclass(frozen=True)
class _Redirect:
    """An attempt ended in a redirect to ``location`` (relative to the request URL)."""

    status: int
    location: str


@dataclass(frozen=True)
class _Retry:
    """An attempt failed in a way that retrying may fix; ``error`` is raised if it can't be."""

    error: OutboundError
    cause: Exception | None
    retry_after: float | None


# -- client -----------------------------------------------------------------------------------


class OutboundClient:
    """Makes outbound calls under one policy and one set of limits; thread-safe, reuse it."""

    def __init__(
        self,
        policy: OutboundPolicy | None = None,
        settings: OutboundSettings | None = None,
        *,
        resolver: Resolver | None = None,
        ssl_context: ssl.SSLContext | None = None,
    ) -> None:
        self.policy = policy if policy is not None else OutboundPolicy()
        self.settings = settings if settings is not None else OutboundSettings()
        self._backend = GuardedBackend(self.policy, resolver or system_resolver)
        # httpx's default context: certifi's CAs, or SSL_CERT_FILE / SSL_CERT_DIR when set.
        context = ssl_context if ssl_context is not None else httpx.create_ssl_context()
        self._transport = GuardedTransport(self._backend, context, self.settings.max_connections)

    def __enter__(self) -> OutboundClient:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def close(self) -> None:
        """Closes pooled connections and the resolver threads; the client is unusable after."""
        self._transport.close()
        self._backend.close()

    def post_file(
        self, url: str, filename: str, data: bytes, *, secret: str | None = None
    ) -> OutboundReply:
        """POSTs ``data`` as the multipart file field ``upload``, the shape extraction APIs take."""
        if secret is not None:
            _check_secret(secret)
        credentials = {} if secret is None else {"Authorization": f"Bearer {secret}"}
        return self._call(
            "POST",
            url,
            headers={"Accept": "application/json, text/plain"},
            credentials=credentials,
            content=None,
            files={"upload": (filename, data)},
        )

    def post_json(self, url: str, payload: dict[str, Any], *, secret: str) -> OutboundReply:
        """POSTs ``payload`` as JSON, with a bearer token and an HMAC-SHA256 of the exact body.

        The body is serialised once and those bytes are both signed and sent, so the receiver
        can verify the signature over what it read. ``ValueError`` for values JSON can't hold.
        """
        _check_secret(secret)
        body = json.dumps(payload, ensure_ascii=False, allow_nan=False, separators=(",", ":"))
        raw = body.encode("utf-8")
        signature = hmac.new(secret.encode("ascii"), raw, hashlib.sha256).hexdigest()
        return self._call(
            "POST",
            url,
            headers={"Accept": "application/json", "Content-Type": "application/json"},
            credentials={"Authorization": f"Bearer {secret}", "X-Signature": f"sha256={signature}"},
            content=raw,
            files=None,
        )

    # -- the call loop ------------------------------------------------------------------------

    def _call(
        self,
        method: str,
        url: str,
        *,
        headers: dict[str, str],
        credentials: dict[str, str],
        content: bytes | None,
        files: dict[str, tuple[str, bytes]] | None,
    ) -> OutboundReply:
        """Runs one call: attempts, retries and redirect hops within the total deadline."""
        settings = self.settings
        try:
            target = self.policy.check_url(url)
        except OutboundRefused as exc:
            logger.warning("outbound call refused: %s", exc)
            raise
        origin = target
        token = call_deadline.set(time.monotonic() + settings.total_timeout)
        try:
            retries = 0
            hops = 0
            while True:
                where = _describe(method, target)
                request_headers = {"User-Agent": USER_AGENT, "Accept-Encoding": "identity"}
                request_headers.update(headers)
                request_headers.update(credentials)
                request = httpx.Request(
                    method,
                    target,
                    headers=request_headers,
                    content=content,
                    files=files,
                    extensions={"timeout": self._timeouts()},
                )
                logger.debug("%s (attempt %d)", where, retries + 1)
                scheme_token = request_scheme.set(target.scheme)
                try:
                    outcome = self._attempt(request, where)
                except OutboundRefused as exc:
                    logger.warning("outbound call refused: %s", exc)
                    raise
                finally:
                    request_scheme.reset(scheme_token)
                if isinstance(outcome, OutboundReply):
                    logger.debug("%s: %d, %d bytes", where, outcome.status, len(outcome.content))
                    return outcome
                if isinstance(outcome, _Redirect):
                    hops += 1
                    if hops > settings.max_redirects:
                        raise OutboundError(
                            f"{where} redirected more than {settings.max_redirects} times"
                        )
                    try:
                        following = self.policy.check_url(_join(target, outcome.location))
                    except OutboundRefused as exc:
                        logger.warning("outbound redirect from %s refused: %s", where, exc)
                        raise
                    if outcome.status == 303 or (outcome.status in (301, 302) and method == "POST"):
                        # What browsers and httpx do: the follow-up is a GET without the body.
                        method, content, files = "GET", None, None
                        headers = {k: v for k, v in headers.items() if k != "Content-Type"}
                        credentials = {k: v for k, v in credentials.items() if k != "X-Signature"}
                    if not _keeps_credentials(origin, following):
                        credentials = {}
                    logger.info(
                        "%s redirected (%d) to %s", where, outcome.status, _describe("", following)
                    )
                    target = following
                    continue
                delay = self._retry_delay(retries, outcome.retry_after)
                if delay is None:
                    if isinstance(outcome.error, OutboundHTTPStatus):
                        raise outcome.error
                    raise outcome.error from outcome.cause
                retries += 1
                logger.warning(
                    "%s; retry %d of %d in %.2f s",
                    outcome.error,
                    retries,
                    settings.retries,
                    delay,
                )
                time.sleep(delay)
        finally:
            call_deadline.reset(token)

    def _timeouts(self) -> dict[str, float]:
        """Per-attempt httpcore timeouts, none longer than what is left of the total."""
        s = self.settings
        deadline = call_deadline.get()
        left = math.inf if deadline is None else max(deadline - time.monotonic(), 0.001)
        return {
            "connect": min(s.connect_timeout, left),
            "read": min(s.read_timeout, left),
            "write": min(s.write_timeout, left),
            "pool": min(s.connect_timeout, left),
        }

    def _limits(self) -> str:
        s = self.settings
        return (
            f"connect {s.connect_timeout:g} s, read {s.read_timeout:g} s, "
            f"total {s.total_timeout:g} s"
        )

    def _attempt(self, request: httpx.Request, where: str) -> OutboundReply | _Redirect | _Retry:
        """One request/response exchange; raises for failures that retrying cannot fix."""
        try:
            response = self._transport.handle_request(request)
        except OutboundError:
            raise
        except Exception as exc:
            return self._failure(exc, where)
        try:
            status = response.status_code
            location = response.headers.get("location")
            if status in _REDIRECT_STATUSES and location:
                return _Redirect(status, location)
            if 200 <= status < 300:
                raw = _read_body(response, self.settings.max_reply_bytes, where)
                content_type = response.headers.get("content-type", "")
                return OutboundReply(
                    status=status,
                    content_type=content_type.split(";", 1)[0].strip().lower(),
                    content=raw,
                    headers=MappingProxyType(dict(response.headers.items())),
                )
            error = OutboundHTTPStatus(
                f"{where} answered {status}", status=status, body=_read_excerpt(response)
            )
            if status == 429 or status >= 500:
                return _Retry(error, None, _parse_retry_after(response.headers.get("retry-after")))
            raise error
        except OutboundError:
            raise
        except Exception as exc:
            return self._failure(exc, where)
        finally:
            response.close()

    def _failure(self, exc: Exception, where: str) -> _Retry:
        """Translates a transport exception: a _Retry if retrying may help, else raises."""
        translated = _translate(exc, where, self._limits())
        if translated is None:
            raise exc  # not a transport failure: a bug, let it show as itself
        error, retryable = translated
        if not retryable:
            raise error from exc
        return _Retry(error, exc, None)

    def _retry_delay(self, retries: int, retry_after: float | None) -> float | None:
        """Seconds to wait before the next attempt, or None when retries or time are used up."""
        s = self.settings
        if retries >= s.retries:
            return None
        if retry_after is not None:
            delay = min(retry_after, s.retry_after_max)
        else:
            # Exponential backoff with jitter, so many clients hit by one outage spread out.
            ceiling = min(s.backoff_max, s.backoff_base * 2**retries)
            delay = random.uniform(ceiling / 2, ceiling)
        deadline = call_deadline.get()
        if deadline is not None and time.monotonic() + delay >= deadline:
            logger.info("not retrying: a %.2f s wait would pass the total time limit", delay)
            return None
        return delay

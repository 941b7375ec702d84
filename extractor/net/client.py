"""``OutboundClient``: one call to a customer-supplied URL as attempts, retries and redirect
hops within one deadline, each hop checked against the policy by the guarded transport."""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import math
import ssl
import time
from types import MappingProxyType
from typing import Any

import httpx

from extractor.labeling.outbound.redirects import (
    REDIRECT_STATUSES,
    Redirect,
    describe,
    join,
    keeps_credentials,
)
from extractor.labeling.outbound.reply import OutboundReply, read_body, read_excerpt
from extractor.labeling.outbound.retries import Retry, parse_retry_after, retry_delay, translate
from extractor.labeling.outbound.settings import OutboundSettings
from extractor.net.errors import OutboundError, OutboundHTTPStatus, OutboundRefused
from extractor.net.guarded import (
    GuardedBackend,
    GuardedTransport,
    Resolver,
    call_deadline,
    request_scheme,
    system_resolver,
)
from extractor.net.ssrf import OutboundPolicy

logger = logging.getLogger(__name__)

USER_AGENT = "extractor-labeling/outbound"


def _check_secret(secret: str) -> None:
    """Refuses a secret that cannot go into a header, without ever quoting it."""
    if not secret or not all("!" <= ch <= "~" for ch in secret):
        raise ValueError("secret must be non-empty visible ASCII: it is sent in an HTTP header")


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
                where = describe(method, target)
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
                if isinstance(outcome, Redirect):
                    hops += 1
                    if hops > settings.max_redirects:
                        raise OutboundError(
                            f"{where} redirected more than {settings.max_redirects} times"
                        )
                    try:
                        following = self.policy.check_url(join(target, outcome.location))
                    except OutboundRefused as exc:
                        logger.warning("outbound redirect from %s refused: %s", where, exc)
                        raise
                    if outcome.status == 303 or (outcome.status in (301, 302) and method == "POST"):
                        # What browsers and httpx do: the follow-up is a GET without the body.
                        method, content, files = "GET", None, None
                        headers = {k: v for k, v in headers.items() if k != "Content-Type"}
                        credentials = {k: v for k, v in credentials.items() if k != "X-Signature"}
                    if not keeps_credentials(origin, following):
                        credentials = {}
                    logger.info(
                        "%s redirected (%d) to %s", where, outcome.status, describe("", following)
                    )
                    target = following
                    continue
                delay = retry_delay(settings, retries, outcome.retry_after)
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

    def _attempt(self, request: httpx.Request, where: str) -> OutboundReply | Redirect | Retry:
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
            if status in REDIRECT_STATUSES and location:
                return Redirect(status, location)
            if 200 <= status < 300:
                raw = read_body(response, self.settings.max_reply_bytes, where)
                content_type = response.headers.get("content-type", "")
                return OutboundReply(
                    status=status,
                    content_type=content_type.split(";", 1)[0].strip().lower(),
                    content=raw,
                    headers=MappingProxyType(dict(response.headers.items())),
                )
            error = OutboundHTTPStatus(
                f"{where} answered {status}", status=status, body=read_excerpt(response)
            )
            if status == 429 or status >= 500:
                return Retry(error, None, parse_retry_after(response.headers.get("retry-after")))
            raise error
        except OutboundError:
            raise
        except Exception as exc:
            return self._failure(exc, where)
        finally:
            response.close()

    def _failure(self, exc: Exception, where: str) -> Retry:
        """Translates a transport exception: a Retry if retrying may help, else raises."""
        translated = translate(exc, where, self._limits())
        if translated is None:
            raise exc  # not a transport failure: a bug, let it show as itself
        error, retryable = translated
        if not retryable:
            raise error from exc
        return Retry(error, exc, None)

"""``OutboundClient``: one call to a client-named URL as attempts, retries and redirect hops
within one deadline, each hop checked against the SSRF policy by the guarded transport.

Shaped as httpx's ``Client`` over a transport: the client runs the call (attempts, redirects,
retries, reading the reply) and knows nothing of sockets; ``GuardedTransport`` is the only way
to one. What a use may cost and when it tries again are its own ``Limits`` and ``RetryPolicy``
(``policies.py``), so the labeling service's calls and the extraction jobs' webhooks share every
line of this and differ only in numbers.
"""

from __future__ import annotations

import logging
import math
import ssl
import time
from types import MappingProxyType

import httpx

from extractor.net.errors import OutboundError, OutboundRefused
from extractor.net.guarded import GuardedBackend, GuardedTransport
from extractor.net.policies import Limits, RetryPolicy
from extractor.net.redirects import REDIRECT_STATUSES, Redirect, describe, join, keeps_credentials
from extractor.net.reply import OutboundReply, drop_body, read_body, read_excerpt
from extractor.net.resolve import Resolver, call_deadline, request_scheme, system_resolver
from extractor.net.retries import Retry, parse_retry_after, translate
from extractor.net.ssrf import OutboundPolicy

logger = logging.getLogger(__name__)

# Headers that describe or sign the body: a redirect that drops the body drops them too.
BODY_HEADERS = frozenset({"content-type", "x-signature"})


class OutboundClient:
    """Makes outbound calls under one policy, one use's limits and retry policy; thread-safe,
    reuse it."""

    def __init__(
        self,
        policy: OutboundPolicy | None = None,
        limits: Limits | None = None,
        retry: RetryPolicy | None = None,
        *,
        user_agent: str = "extractor",
        resolver: Resolver | None = None,
        ssl_context: ssl.SSLContext | None = None,
    ) -> None:
        self.policy = policy if policy is not None else OutboundPolicy()
        self.limits = limits if limits is not None else Limits()
        self.retry = retry if retry is not None else RetryPolicy()
        self.user_agent = user_agent
        self._backend = GuardedBackend(
            self.policy, resolver or system_resolver, dns_threads=self.limits.dns_threads
        )
        # httpx's default context: certifi's CAs, or SSL_CERT_FILE / SSL_CERT_DIR when set.
        context = ssl_context if ssl_context is not None else httpx.create_ssl_context()
        self.transport = GuardedTransport(self._backend, context, self.limits.max_connections)

    def __enter__(self) -> OutboundClient:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def close(self) -> None:
        """Closes pooled connections and the resolver threads; the client is unusable after."""
        self.transport.close()
        self._backend.close()

    def request(
        self,
        method: str,
        url: str,
        *,
        headers: dict[str, str],
        credentials: dict[str, str] | None = None,
        content: bytes | None = None,
        files: dict[str, tuple[str, bytes]] | None = None,
    ) -> OutboundReply:
        """Runs one call: attempts, retries and redirect hops within the total deadline.

        The final answer is returned whatever its status (``raise_for_status`` for callers
        that want only a 2xx); a failure that is not an answer raises an ``OutboundError``.
        ``credentials`` are headers sent only to the URL's origin (a redirect elsewhere drops
        them).
        """
        try:
            target = self.policy.check_url(url)
        except OutboundRefused as exc:
            logger.warning("outbound call refused: %s", exc)
            raise
        origin = target
        credentials = dict(credentials or {})
        token = call_deadline.set(time.monotonic() + self.limits.total_timeout)
        try:
            retries = hops = 0
            while True:
                where = describe(method, target)
                request_headers = {"User-Agent": self.user_agent, "Accept-Encoding": "identity"}
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
                scheme = request_scheme.set(target.scheme)
                try:
                    outcome = self._attempt(request, where)
                except OutboundRefused as exc:
                    logger.warning("outbound call refused: %s", exc)
                    raise
                finally:
                    request_scheme.reset(scheme)
                if isinstance(outcome, Redirect):
                    hops += 1
                    if hops > self.limits.max_redirects:
                        raise OutboundError(
                            f"{where} redirected more than {self.limits.max_redirects} times"
                        )
                    try:
                        following = self.policy.check_url(join(target, outcome.location))
                    except OutboundRefused as exc:
                        logger.warning("outbound redirect from %s refused: %s", where, exc)
                        raise
                    if outcome.status == 303 or (outcome.status in (301, 302) and method == "POST"):
                        # What browsers and httpx do: the follow-up is a GET without the body.
                        method, content, files = "GET", None, None
                        headers = {
                            k: v for k, v in headers.items() if k.lower() not in BODY_HEADERS
                        }
                        credentials = {
                            k: v for k, v in credentials.items() if k.lower() not in BODY_HEADERS
                        }
                    if not keeps_credentials(origin, following):
                        credentials = {}
                    logger.info(
                        "%s redirected (%d) to %s", where, outcome.status, describe("", following)
                    )
                    target = following
                    continue
                if isinstance(outcome, OutboundReply):
                    if not self.retry.retries_status(outcome.status):
                        logger.debug(
                            "%s: %d, %d bytes", where, outcome.status, len(outcome.content)
                        )
                        return outcome
                    reason = f"{where} answered {outcome.status}"
                    delay = self._delay(
                        retries, parse_retry_after(outcome.headers.get("retry-after"))
                    )
                    if delay is None:
                        return outcome
                else:
                    reason = str(outcome.error)
                    delay = self._delay(retries, None)
                    if delay is None:
                        raise outcome.error from outcome.cause
                retries += 1
                logger.warning(
                    "%s; retry %d of %d in %.2f s", reason, retries, self.retry.attempts - 1, delay
                )
                time.sleep(delay)
        finally:
            call_deadline.reset(token)

    def _delay(self, retries: int, retry_after: float | None) -> float | None:
        """Seconds to wait before the next attempt, or None when attempts or time are used up."""
        if retries + 1 >= self.retry.attempts:
            return None
        delay = self.retry.wait(retries, retry_after)
        deadline = call_deadline.get()
        if deadline is not None and time.monotonic() + delay >= deadline:
            logger.info("not retrying: a %.2f s wait would pass the total time limit", delay)
            return None
        return delay

    def _timeouts(self) -> dict[str, float]:
        """Per-attempt httpcore timeouts, none longer than what is left of the total."""
        limits = self.limits
        deadline = call_deadline.get()
        left = math.inf if deadline is None else max(deadline - time.monotonic(), 0.001)
        return {
            "connect": min(limits.connect_timeout, left),
            "read": min(limits.read_timeout, left),
            "write": min(limits.write_timeout, left),
            "pool": min(limits.connect_timeout, left),
        }

    def _attempt(self, request: httpx.Request, where: str) -> OutboundReply | Redirect | Retry:
        """One request/response exchange; raises for failures the policy does not retry."""
        try:
            response = self.transport.handle_request(request)
        except OutboundError:
            raise
        except Exception as exc:
            return self._failure(exc, where)
        limits = self.limits
        try:
            status = response.status_code
            location = response.headers.get("location")
            if status in REDIRECT_STATUSES and location and limits.max_redirects > 0:
                return Redirect(status, location)
            over_limit = False
            if limits.status_only:
                raw = b""
                over_limit = drop_body(response, limits.max_reply_bytes) > limits.max_reply_bytes
            elif 200 <= status < 300:
                raw = read_body(response, limits.max_reply_bytes, where)
            else:
                raw = read_excerpt(response)
            content_type = response.headers.get("content-type", "")
            return OutboundReply(
                status=status,
                content_type=content_type.split(";", 1)[0].strip().lower(),
                content=raw,
                headers=MappingProxyType(dict(response.headers.items())),
                where=where,
                over_limit=over_limit,
            )
        except OutboundError:
            raise
        except Exception as exc:
            return self._failure(exc, where)
        finally:
            response.close()

    def _failure(self, exc: Exception, where: str) -> Retry:
        """Translates a transport exception: a Retry if the policy retries it, else raises."""
        translated = translate(exc, where, self.limits.described())
        if translated is None:
            raise exc  # not a transport failure: a bug, let it show as itself
        error, transient = translated
        if not self.retry.retries_failure(transient):
            raise error from exc
        return Retry(error, exc)

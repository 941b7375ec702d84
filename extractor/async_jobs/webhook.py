"""Webhooks: when a job with a ``callback_url`` ends, a signed POST of its JSON to that URL.

The body is the job JSON plus ``timestamp`` (Unix seconds of this attempt), sent as compact
UTF-8 JSON, signed twice with EXTRACTOR_WEBHOOK_SECRET: the Standard Webhooks headers
(``webhook-id``: the job's id, the same on every attempt; ``webhook-timestamp``: the body's
``timestamp``; ``webhook-signature: v1,<base64 HMAC-SHA256 of "{id}.{timestamp}.{body}">``,
keyed by the secret's UTF-8 bytes, so the standard libraries verify it given those bytes), and
``X-Signature: sha256=<hex HMAC-SHA256 of the body>`` for receivers written before them. A
receiver verifies a signature over the raw body it read, refuses an old timestamp (a replay)
and handles a ``webhook-id`` it has seen before once (a delivery is at least once).

Every call goes through the SSRF guard of ``extractor.net`` (the labeling service's): the host is
resolved, every address checked against EXTRACTOR_OUTBOUND_ALLOW and the default refusals, and
the socket opened to a checked address. Redirects are not followed (a redirect is the classic
way around a URL check). Only the reply's status counts: at most
EXTRACTOR_WEBHOOK_MAX_REPLY_BYTES of its body are read, then the connection is dropped, so a
receiver streaming gigabytes costs a worker nothing. Timeouts, connection errors, 408, 429 and
5xx are retried with backoff; any other answer ends the delivery. The state of the delivery
(pending, delivered, failed, attempts, the last outcome) is on the job.

Deliveries are rows in the database (``extraction_jobs.webhook_*``), so a webhook due when a
server dies is sent by another; one server at a time holds a delivery (a short lease).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import logging
import random
import time
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from extractor.net.errors import OutboundError, OutboundRefused
from extractor.net.resolve import (
    Resolver,
    call_deadline,
    request_scheme,
    resolve_within,
    system_resolver,
)
from extractor.net.ssrf import OutboundPolicy

log = logging.getLogger(__name__)

USER_AGENT = "extractor-webhook"
SIGNATURE_HEADER = "X-Signature"
BACKOFF_MAX_SECONDS = 300.0  # the longest wait between two attempts
RETRIED_STATUSES = frozenset({408, 425, 429})  # and every 5xx


def sign(secret: str, body: bytes) -> str:
    """The X-Signature value of ``body``: ``sha256=`` and the hex HMAC-SHA256."""
    return "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()


def sign_standard(secret: str, delivery: str, timestamp: int, body: bytes) -> str:
    """The ``webhook-signature`` value (Standard Webhooks): ``v1,`` and the base64
    HMAC-SHA256 of ``{id}.{timestamp}.{body}``, keyed by the secret's UTF-8 bytes."""
    signed = f"{delivery}.{timestamp}.".encode() + body
    digest = hmac.new(secret.encode(), signed, hashlib.sha256).digest()
    return "v1," + base64.b64encode(digest).decode()


def webhook_body(job: dict[str, Any], now: float | None = None) -> bytes:
    """The bytes POSTed: the job JSON with the attempt's ``timestamp``."""
    payload = {**job, "timestamp": int(time.time() if now is None else now)}
    return json.dumps(payload, ensure_ascii=False, separators=(",", ":")).encode()


def webhook_headers(secret: str, job_id: str, timestamp: int, body: bytes) -> dict[str, str]:
    """The headers of one attempt: both signatures and the delivery's id (the job's id, so
    the same on every retry: a receiver that saw it handles the call once)."""
    return {
        "Content-Type": "application/json",
        "User-Agent": USER_AGENT,
        SIGNATURE_HEADER: sign(secret, body),
        "webhook-id": job_id,
        "webhook-timestamp": str(timestamp),
        "webhook-signature": sign_standard(secret, job_id, timestamp, body),
    }


def backoff(attempts: int) -> timedelta:
    """The wait after the ``attempts``-th failed attempt: 1, 2, 4 ... s with jitter, at most
    ``BACKOFF_MAX_SECONDS``."""
    ceiling = min(BACKOFF_MAX_SECONDS, 2.0 ** max(attempts - 1, 0))
    return timedelta(seconds=random.uniform(ceiling * 0.75, ceiling))


@dataclass(frozen=True)
class Outcome:
    """How one attempt went: ``delivered``, ``retry`` (may succeed later) or ``failed``."""

    result: str
    detail: str  # for the job's webhook.last_outcome: a status or an error, never a secret


def policy_of(allow: str) -> OutboundPolicy:
    """The destinations EXTRACTOR_OUTBOUND_ALLOW opens on top of the public ones."""
    return OutboundPolicy(allow, setting="EXTRACTOR_OUTBOUND_ALLOW")


def check_callback_url(
    url: str, policy: OutboundPolicy, resolver: Resolver, seconds: float = 5.0
) -> str:
    """Refuse (``OutboundRefused``/``OutboundError``) a callback URL at submit time: not
    http(s), credentials in it, or a host whose addresses the policy refuses now, or that
    does not resolve within ``seconds``. The URL as parsed; the guard checks again when it is
    called (DNS may change meanwhile)."""
    parsed = policy.check_url(url)
    host = parsed.host
    port = parsed.port or (443 if parsed.scheme == "https" else 80)
    try:
        addresses = resolve_within(resolver, host, port, seconds)
    except (OSError, UnicodeError) as exc:
        raise OutboundError(f"cannot resolve {host}: {exc}") from exc
    policy.check_addresses(host, addresses, scheme=parsed.scheme, port=port)
    return str(parsed)


class WebhookSender:
    """Sends signed webhook calls through the SSRF guard; thread-safe, reuse it."""

    def __init__(
        self,
        secret: str,
        policy: OutboundPolicy,
        timeout: float,
        *,
        resolver: Resolver = system_resolver,
        connections: int = 8,
        max_reply_bytes: int = 65536,
    ) -> None:
        # Here, not at the top: httpx and httpcore cost a worker ~4 MB of RSS, and a server
        # without a webhook secret never sends one.
        import httpx

        from extractor.net.guarded import GuardedBackend, GuardedTransport

        self.secret = secret
        self.timeout = timeout
        self.max_reply_bytes = max_reply_bytes
        self._timeout = httpx.Timeout(timeout)
        # A DNS thread per connection: a callback host whose lookups hang delays no other.
        self._backend = GuardedBackend(policy, resolver, dns_threads=connections)
        transport = GuardedTransport(self._backend, httpx.create_ssl_context(), connections)
        self._client = httpx.Client(transport=transport, follow_redirects=False)
        self.policy = policy

    def close(self) -> None:
        self._client.close()
        self._backend.close()

    def send(self, url: str, job: dict[str, Any]) -> Outcome:
        """One attempt: POST the signed job JSON to ``url``."""
        timestamp = int(time.time())
        body = webhook_body(job, timestamp)
        headers = webhook_headers(self.secret, str(job["id"]), timestamp, body)
        try:
            target = self.policy.check_url(url)
        except OutboundError as exc:
            return Outcome("failed", f"refused: {exc}")
        deadline = call_deadline.set(time.monotonic() + self.timeout)
        scheme = request_scheme.set(target.scheme)
        try:
            request = self._client.build_request(
                "POST", target, content=body, headers=headers, timeout=self._timeout
            )
            try:
                response = self._client.send(request, stream=True)
            except OutboundRefused as exc:
                return Outcome("failed", f"refused: {exc}")
            except Exception as exc:  # timeouts, refused or reset connections, TLS, DNS
                return Outcome("retry", f"{type(exc).__name__}: {str(exc)[:200]}")
            try:
                read = drop_reply(response, self.max_reply_bytes)
            finally:
                response.close()
        finally:
            request_scheme.reset(scheme)
            call_deadline.reset(deadline)
        if read > self.max_reply_bytes:
            # The status line is the answer; a receiver's endless body is no reason to retry.
            return by_status(response.status_code, f" (reply over {self.max_reply_bytes} bytes)")
        return by_status(response.status_code)


def drop_reply(response: Any, limit: int) -> int:
    """Read and drop ``response``'s body up to ``limit`` bytes (so a short reply leaves its
    connection reusable): the bytes read, ``limit + 1`` when there were more. Closing the
    response afterwards closes a connection left mid-body instead of reading on. A failure
    while reading (the call's deadline, a reset) ends the reading: the status has arrived."""
    read = 0
    try:
        for chunk in response.iter_raw():
            read += len(chunk)
            if read > limit:
                return limit + 1
    except Exception as exc:  # the deadline or a broken connection after the status line
        log.debug("webhook reply body not read to its end: %s", type(exc).__name__)
    return read


def by_status(status: int, note: str = "") -> Outcome:
    """What the receiver's status makes of the attempt."""
    if 200 <= status < 300:
        return Outcome("delivered", f"HTTP {status}{note}")
    if status >= 500 or status in RETRIED_STATUSES:
        return Outcome("retry", f"HTTP {status}{note}")
    if 300 <= status < 400:
        return Outcome("failed", f"HTTP {status} (redirects are not followed){note}")
    return Outcome("failed", f"HTTP {status}{note}")

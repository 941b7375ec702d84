"""Webhooks: when a job with a ``callback_url`` ends, a signed POST of its JSON to that URL.

The body is the job JSON plus ``timestamp`` (Unix seconds of this attempt), sent as compact
UTF-8 JSON, signed twice with EXTRACTOR_WEBHOOK_SECRET: the Standard Webhooks headers
(``webhook-id``: the job's id, the same on every attempt; ``webhook-timestamp``: the body's
``timestamp``; ``webhook-signature: v1,<base64 HMAC-SHA256 of "{id}.{timestamp}.{body}">``,
keyed by the secret's UTF-8 bytes, so the standard libraries verify it given those bytes), and
``X-Signature: sha256=<hex HMAC-SHA256 of the body>`` for receivers written before them. A
receiver verifies a signature over the raw body it read, refuses an old timestamp (a replay)
and handles a ``webhook-id`` it has seen before once (a delivery is at least once).

Every call goes through the outbound client of ``extractor.net`` (the labeling service's): the
host is resolved, every address checked against EXTRACTOR_OUTBOUND_ALLOW and the default
refusals, and the socket opened to a checked address. Redirects are not followed (a redirect is
the classic way around a URL check). Only the reply's status counts: at most
EXTRACTOR_WEBHOOK_MAX_REPLY_BYTES of its body are read, then the connection is dropped, so a
receiver streaming gigabytes costs a worker nothing. ``RETRY`` says what is tried again and
when: timeouts, connection errors, 408, 425, 429 and 5xx, with backoff; any other answer ends
the delivery. Each call is one attempt, and the next is a row's due time, not a wait in a
thread. The state of the delivery (pending, delivered, failed, attempts, the last outcome) is on
the job.

Deliveries are rows in the database (``extraction_jobs.webhook_*``), so a webhook due when a
server dies is sent by another; one server at a time holds a delivery (a short lease).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import time
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from extractor.config.jobs import JobSettings
from extractor.net.errors import OutboundError, OutboundRefused
from extractor.net.policies import Limits, RetryPolicy
from extractor.net.resolve import Resolver, resolve_within, system_resolver
from extractor.net.ssrf import OutboundPolicy

if TYPE_CHECKING:
    from extractor.net.client import OutboundClient

USER_AGENT = "extractor-webhook"
SIGNATURE_HEADER = "X-Signature"

#: When a delivery is tried again: after every transport failure (a receiver handles a repeated
#: webhook-id once), 408, 425, 429 and 5xx; 1, 2, 4 ... s after the attempt, jittered down to
#: three quarters, at most 300 s apart; EXTRACTOR_WEBHOOK_ATTEMPTS attempts in all.
RETRY = RetryPolicy(
    attempts=JobSettings.webhook_attempts,
    backoff_base=1.0,
    backoff_max=300.0,
    jitter=0.25,
    statuses=frozenset({408, 425, 429}),
    any_failure=True,
)


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
    """Sends signed webhook calls through the outbound client; thread-safe, reuse it."""

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
        from extractor.net.client import OutboundClient

        self.secret = secret
        self.timeout = timeout
        self.max_reply_bytes = max_reply_bytes
        limits = Limits(
            connect_timeout=timeout,
            read_timeout=timeout,
            write_timeout=timeout,
            total_timeout=timeout,
            max_reply_bytes=max_reply_bytes,
            status_only=True,
            max_redirects=0,
            max_connections=connections,
            # A DNS thread per connection: a callback host whose lookups hang delays no other.
            dns_threads=connections,
        )
        # One attempt per call: the next is the delivery's due time in the database.
        self._client: OutboundClient = OutboundClient(
            policy, limits, replace(RETRY, attempts=1), user_agent=USER_AGENT, resolver=resolver
        )

    def close(self) -> None:
        self._client.close()

    def send(self, url: str, job: dict[str, Any]) -> Outcome:
        """One attempt: POST the signed job JSON to ``url``."""
        timestamp = int(time.time())
        body = webhook_body(job, timestamp)
        headers = webhook_headers(self.secret, str(job["id"]), timestamp, body)
        try:
            reply = self._client.request("POST", url, headers=headers, content=body)
        except OutboundRefused as exc:
            return Outcome("failed", f"refused: {exc}")
        except OutboundError as exc:  # timeouts, refused or reset connections, TLS, DNS
            cause = exc.__cause__ or exc
            return Outcome("retry", f"{type(cause).__name__}: {str(cause)[:200]}")
        # The status line is the answer; a receiver's endless body is no reason to retry.
        note = f" (reply over {self.max_reply_bytes} bytes)" if reply.over_limit else ""
        return by_status(reply.status, note)


def by_status(status: int, note: str = "") -> Outcome:
    """What the receiver's status makes of the attempt."""
    if 200 <= status < 300:
        return Outcome("delivered", f"HTTP {status}{note}")
    if RETRY.retries_status(status):
        return Outcome("retry", f"HTTP {status}{note}")
    if 300 <= status < 400:
        return Outcome("failed", f"HTTP {status} (redirects are not followed){note}")
    return Outcome("failed", f"HTTP {status}{note}")

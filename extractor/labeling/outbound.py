"""The labeling service's calls of customer-supplied URLs (their text-extraction API, their
prediction API): the outbound client of ``extractor.net`` with this service's limits and retry
policy, read from its settings, and the two request shapes those APIs take.

Calling an arbitrary URL from inside our network is a server-side request forgery (SSRF) risk,
so every such call goes through ``extractor.net``: the host is resolved, every address checked
against an ``OutboundPolicy`` and the socket opened to exactly an address that passed, on every
redirect hop again. Every transport failure becomes an ``OutboundError`` whose message never
carries a secret (but may name internal addresses: it is for the operator's log, and
``clients`` decides what a user sees).
"""

from __future__ import annotations

import hashlib
import hmac
import json
import ssl
from dataclasses import dataclass
from typing import Any

from extractor.config.labeling import LabelingSettings
from extractor.net.client import OutboundClient
from extractor.net.errors import (
    OutboundConnectError,
    OutboundError,
    OutboundHTTPStatus,
    OutboundRefused,
    OutboundReplyTooLarge,
    OutboundTimeout,
)
from extractor.net.policies import Limits, RetryPolicy
from extractor.net.reply import OutboundReply
from extractor.net.resolve import Resolver
from extractor.net.ssrf import AllowEntry, OutboundPolicy, default_refusal_reason

#: The setting that lists destinations allowed despite the default refusals.
ALLOW_ENV_VAR = LabelingSettings.variable("outbound_allow")

USER_AGENT = "extractor-labeling/outbound"


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
        try:
            self.limits()
            self.retry()
        except ValueError as exc:
            raise ValueError(f"OutboundSettings: {exc}") from None

    def limits(self) -> Limits:
        """The client's limits: the body is the answer, redirects are followed."""
        return Limits(
            connect_timeout=self.connect_timeout,
            read_timeout=self.read_timeout,
            write_timeout=self.write_timeout,
            total_timeout=self.total_timeout,
            max_reply_bytes=self.max_reply_bytes,
            max_redirects=self.max_redirects,
            max_connections=self.max_connections,
        )

    def retry(self) -> RetryPolicy:
        """Retries within the call, of transient failures, 429 and 5xx only: an extraction API
        that timed out reading is busy with the request, and a repeat would run it twice."""
        return RetryPolicy(
            attempts=self.retries + 1,
            backoff_base=self.backoff_base,
            backoff_max=self.backoff_max,
            jitter=0.5,
            retry_after_max=self.retry_after_max,
            statuses=frozenset({429}),
            any_failure=False,
        )


def _check_secret(secret: str) -> None:
    """Refuses a secret that cannot go into a header, without ever quoting it."""
    if not secret or not all("!" <= ch <= "~" for ch in secret):
        raise ValueError("secret must be non-empty visible ASCII: it is sent in an HTTP header")


class LabelingClient(OutboundClient):
    """The outbound client under this service's settings, with the two calls it makes."""

    def __init__(
        self,
        policy: OutboundPolicy | None = None,
        settings: OutboundSettings | None = None,
        *,
        resolver: Resolver | None = None,
        ssl_context: ssl.SSLContext | None = None,
    ) -> None:
        self.settings = settings if settings is not None else OutboundSettings()
        super().__init__(
            policy,
            self.settings.limits(),
            self.settings.retry(),
            user_agent=USER_AGENT,
            resolver=resolver,
            ssl_context=ssl_context,
        )

    def post_file(
        self, url: str, filename: str, data: bytes, *, secret: str | None = None
    ) -> OutboundReply:
        """POSTs ``data`` as the multipart file field ``upload``, the shape extraction APIs take."""
        if secret is not None:
            _check_secret(secret)
        credentials = {} if secret is None else {"Authorization": f"Bearer {secret}"}
        reply = self.request(
            "POST",
            url,
            headers={"Accept": "application/json, text/plain"},
            credentials=credentials,
            files={"upload": (filename, data)},
        )
        return reply.raise_for_status()

    def post_json(self, url: str, payload: dict[str, Any], *, secret: str) -> OutboundReply:
        """POSTs ``payload`` as JSON, with a bearer token and an HMAC-SHA256 of the exact body.

        The body is serialised once and those bytes are both signed and sent, so the receiver
        can verify the signature over what it read. ``ValueError`` for values JSON can't hold.
        """
        _check_secret(secret)
        body = json.dumps(payload, ensure_ascii=False, allow_nan=False, separators=(",", ":"))
        raw = body.encode("utf-8")
        signature = hmac.new(secret.encode("ascii"), raw, hashlib.sha256).hexdigest()
        reply = self.request(
            "POST",
            url,
            headers={"Accept": "application/json", "Content-Type": "application/json"},
            credentials={"Authorization": f"Bearer {secret}", "X-Signature": f"sha256={signature}"},
            content=raw,
        )
        return reply.raise_for_status()


# The policy, the client and the errors live in extractor.net (the extraction jobs' webhooks
# use them too); they are part of this module's interface.
__all__ = [
    "ALLOW_ENV_VAR",
    "AllowEntry",
    "LabelingClient",
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
]

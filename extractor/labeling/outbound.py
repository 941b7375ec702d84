"""The limits of outbound calls: time, reply size, redirects, retries and connections."""

from __future__ import annotations

import math
from dataclasses import dataclass

from extractor.config.labeling import LabelingSettings

#: The setting that lists destinations allowed despite the default refusals.
ALLOW_ENV_VAR = LabelingSettings.variable("outbound_allow")


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

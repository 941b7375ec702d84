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
errors (``extractor.net.errors``) are shared with the extraction jobs' webhooks; this package
holds the labeling service's client (``client.py``), its limits (``settings.py``), how a reply
is read (``reply.py``), when an attempt is retried (``retries.py``) and how a redirect hop is
followed (``redirects.py``).
"""

from __future__ import annotations

from extractor.labeling.outbound.client import OutboundClient
from extractor.labeling.outbound.reply import OutboundReply
from extractor.labeling.outbound.settings import ALLOW_ENV_VAR, OutboundSettings
from extractor.net.errors import (
    OutboundConnectError,
    OutboundError,
    OutboundHTTPStatus,
    OutboundRefused,
    OutboundReplyTooLarge,
    OutboundTimeout,
)
from extractor.net.guarded import Resolver, system_resolver
from extractor.net.ssrf import AllowEntry, OutboundPolicy, default_refusal_reason

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

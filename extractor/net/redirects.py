"""Redirect hops of an outbound call: where a Location points, how a hop is named in
messages, and whether it may carry the caller's credentials."""

from __future__ import annotations

from dataclasses import dataclass

import httpx

from extractor.net.errors import OutboundError
from extractor.net.ssrf import normalise_host

REDIRECT_STATUSES = frozenset({301, 302, 303, 307, 308})


@dataclass(frozen=True)
class Redirect:
    """An attempt ended in a redirect to ``location`` (relative to the request URL)."""

    status: int
    location: str


def describe(method: str, url: httpx.URL) -> str:
    """'POST https://host:port/path' for messages and logs: no credentials, no query string."""
    shown = str(url.copy_with(userinfo=b"", query=None, fragment=None))
    return f"{method} {shown}" if method else shown


def join(base: httpx.URL, location: str) -> httpx.URL:
    """The URL a Location header points to, resolved against the request URL."""
    try:
        return base.join(location)
    except (httpx.InvalidURL, ValueError, TypeError) as exc:
        raise OutboundError(f"{describe('', base)} redirected to an invalid URL") from exc


def keeps_credentials(origin: httpx.URL, target: httpx.URL) -> bool:
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

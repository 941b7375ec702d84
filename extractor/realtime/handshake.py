"""The WebSocket handshake of ``/v1/realtime``: who may connect, and with what.

Checked on the request head alone, before the connection is accepted, so a client without the
secret never gets a byte of audio read:

- the secret (EXTRACTOR_SECRET), as ``Authorization: Bearer <secret>`` (the openai client's
  way), as the subprotocol ``openai-insecure-api-key.<secret>`` (browsers, which cannot set
  headers on a WebSocket; the server then selects the ``realtime`` subprotocol they also
  offer), or as an ``api_key`` query parameter;
- ``intent=transcription``: this server has no speech-to-speech model, so a client asking
  for a conversation (``model=gpt-realtime`` without the intent) is told so with a 400.
"""

from __future__ import annotations

import hmac
import json
from dataclasses import dataclass
from urllib.parse import parse_qs, urlsplit

PATH = "/v1/realtime"
KEY_PROTOCOL = "openai-insecure-api-key."


@dataclass(frozen=True)
class Refused:
    """An HTTP answer instead of a WebSocket: status and an OpenAI-shaped error body."""

    status: int
    code: str
    message: str

    def body(self) -> bytes:
        error = {
            "message": self.message,
            "type": "invalid_request_error",
            "code": self.code,
            "param": None,
        }
        return json.dumps({"error": error}).encode()


def serves(path: str) -> bool:
    return path.rstrip("/") == PATH


def check(
    target: str, headers: dict[str, str], subprotocols: list[str], secret: str | None
) -> Refused | str | None:
    """A refusal, or the subprotocol to select (None: none)."""
    query = parse_qs(urlsplit(target).query)
    if secret is not None and not _authorized(query, headers, subprotocols, secret):
        return Refused(
            401,
            "invalid_api_key",
            "a valid secret is required: 'Authorization: Bearer <secret>', the subprotocol"
            " 'openai-insecure-api-key.<secret>', or ?api_key=<secret>",
        )
    intent = query.get("intent", [""])[0]
    if intent != "transcription":
        return Refused(
            400,
            "unsupported_intent",
            "this server transcribes only: connect to /v1/realtime?intent=transcription",
        )
    return "realtime" if "realtime" in subprotocols else None


def _authorized(
    query: dict[str, list[str]], headers: dict[str, str], subprotocols: list[str], secret: str
) -> bool:
    offered = []
    scheme, _, token = headers.get("authorization", "").partition(" ")
    if scheme.lower() == "bearer":
        offered.append(token.strip())
    offered.extend(p[len(KEY_PROTOCOL) :] for p in subprotocols if p.startswith(KEY_PROTOCOL))
    offered.extend(query.get("api_key", []))
    expected = secret.encode()
    return any(hmac.compare_digest(token.encode(), expected) for token in offered)

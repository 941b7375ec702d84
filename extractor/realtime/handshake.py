"""The WebSocket handshake of ``/v1/realtime``: who may connect, and with what.

Checked on the request head alone, before the connection is accepted, so a client without the
secret never gets a byte of audio read:

- a credential (EXTRACTOR_SECRET or a key of EXTRACTOR_API_KEYS, judged by
  ``credentials`` as on every route), as ``Authorization: Bearer <key>`` (the openai
  client's way), as the subprotocol ``openai-insecure-api-key.<key>`` (browsers, which cannot
  set headers on a WebSocket; the server then selects the ``realtime`` subprotocol they also
  offer), or as an ``api_key`` query parameter;
- ``intent=transcription``: this server has no speech-to-speech model, so a client asking
  for a conversation (``model=gpt-realtime`` without the intent) is told so with a 400.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qs, urlsplit

from ..credentials import Credentials, Identity, bearer_token

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


def client_address(conn: Any) -> str:
    """The client's address (its host, without the port)."""
    client = getattr(conn, "client", None)
    return str(client[0]) if isinstance(client, tuple | list) and client else str(client or "")


def serves(path: str) -> bool:
    return path.rstrip("/") == PATH


@dataclass(frozen=True)
class Admitted:
    """A handshake to accept: the subprotocol to select (None: none) and who connects."""

    subprotocol: str | None
    identity: Identity


def check(
    target: str, headers: dict[str, str], subprotocols: list[str], keys: Credentials
) -> Refused | Admitted:
    """A refusal, or the connection admitted."""
    query = parse_qs(urlsplit(target).query)
    identity = keys.identify_tokens(_offered(query, headers, subprotocols))
    if identity is None:
        return Refused(
            401,
            "invalid_api_key",
            "a valid secret or key is required: 'Authorization: Bearer <key>', the"
            " subprotocol 'openai-insecure-api-key.<key>', or ?api_key=<key>",
        )
    intent = query.get("intent", [""])[0]
    if intent != "transcription":
        return Refused(
            400,
            "unsupported_intent",
            "this server transcribes only: connect to /v1/realtime?intent=transcription",
        )
    return Admitted("realtime" if "realtime" in subprotocols else None, identity)


def _offered(
    query: dict[str, list[str]], headers: dict[str, str], subprotocols: list[str]
) -> list[str]:
    """The tokens a client offers, in each of the three places it may put one."""
    token = bearer_token(headers.get("authorization"))
    offered = [] if token is None else [token]
    offered.extend(p[len(KEY_PROTOCOL) :] for p in subprotocols if p.startswith(KEY_PROTOCOL))
    offered.extend(query.get("api_key", []))
    return offered

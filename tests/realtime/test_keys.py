"""Named API keys at the WS /v1/realtime handshake, over a real gunicorn server: a key of
EXTRACTOR_API_KEYS opens a session in each place a key may go, a wrong one is a 401, and a
key's streams count against EXTRACTOR_REALTIME_SESSIONS_PER_CLIENT by its name, whatever the
address they come from."""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator
from typing import Any

import pytest
from support import start_server, stop_server
from websockets.exceptions import InvalidStatus
from websockets.sync.client import ClientConnection, connect

pytestmark = pytest.mark.slow  # a real server

SECRET = "live-shared-s3cret"
ALPHA = "alpha-live-key-0123456789"
BETA = "beta-live-key-0123456789"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    keys = tmp_path_factory.mktemp("live-keys") / "api-keys"
    keys.write_text(f"alpha:{ALPHA}\nbeta:{BETA}\n")
    url, process = start_server(
        "--workers", "1", "--secret", SECRET, "--realtime-sessions", "3",
        "--realtime-sessions-per-client", "1", env={"EXTRACTOR_API_KEYS": str(keys)},
    )  # fmt: skip
    try:
        yield url
    finally:
        stop_server(process)


def open_stream(
    url: str, key: str, *, source: str = "127.0.0.1", where: str = "bearer"
) -> ClientConnection:
    """A live stream from the loopback address ``source`` (127.0.0.2 is another client)."""
    host, port = url.removeprefix("http://").split(":")
    sock = socket.socket()
    sock.bind((source, 0))
    sock.connect((host, int(port)))
    headers = {"Authorization": f"Bearer {key}"} if where == "bearer" else {}
    protocols: Any = ["realtime", f"openai-insecure-api-key.{key}"] if where == "browser" else None
    return connect(
        url.replace("http://", "ws://") + "/v1/realtime?intent=transcription",
        sock=sock, additional_headers=headers, subprotocols=protocols, open_timeout=30,
    )  # fmt: skip


def first_event(ws: ClientConnection) -> dict[str, Any]:
    event: dict[str, Any] = json.loads(ws.recv(timeout=30))
    return event


@pytest.mark.parametrize("where", ["bearer", "browser"])
def test_a_named_key_opens_a_session(server: str, where: str) -> None:
    with open_stream(server, BETA, where=where) as ws:
        assert first_event(ws)["type"] == "session.created"


@pytest.mark.parametrize("key", ["wrong-live-key-0123456789", ALPHA[:-1], ""])
def test_a_wrong_key_is_refused_at_the_handshake(server: str, key: str) -> None:
    with pytest.raises(InvalidStatus) as refused:
        open_stream(server, key)
    assert refused.value.response.status_code == 401
    assert json.loads(refused.value.response.body)["error"]["code"] == "invalid_api_key"


def test_a_key_s_streams_are_capped_by_its_name_across_addresses(server: str) -> None:
    with open_stream(server, ALPHA) as held:
        assert first_event(held)["type"] == "session.created"
        # Another address, the same key: over the key's cap of 1.
        with open_stream(server, ALPHA, source="127.0.0.2") as again:
            error = first_event(again)
            assert error["type"] == "error", error
            assert error["error"]["code"] == "client_session_limit_reached"
        # Another address, another key: admitted (the refused stream held no place).
        with open_stream(server, BETA, source="127.0.0.2") as other:
            assert first_event(other)["type"] == "session.created"

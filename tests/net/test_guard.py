"""The SSRF guard shared by the labeling service and the extraction jobs' webhooks
(extractor.net): a host is resolved once, every address is checked, and the socket goes to an
address that passed and nowhere else.

Real sockets on loopback only: a "name" is given its addresses by an injected resolver, and a
listener on each loopback alias (127.0.0.1, 127.0.0.2, ...) counts the connections it gets, so a
test can prove a refused address was never connected to.
"""

from __future__ import annotations

import re
import socket
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import httpx
import pytest

from extractor.net.errors import OutboundRefused
from extractor.net.guarded import GuardedBackend, GuardedTransport, request_scheme
from extractor.net.ssrf import OutboundPolicy

SETTING = "EXTRACTOR_OUTBOUND_ALLOW"


class _Counting(ThreadingHTTPServer):
    """A loopback HTTP server that answers 204 and counts the connections it accepted."""

    daemon_threads = True

    def __init__(self, host: str, port: int = 0) -> None:
        self.connections = 0
        super().__init__((host, port), _NoContent)

    def get_request(self) -> tuple[socket.socket, object]:
        self.connections += 1
        return super().get_request()


class _NoContent(BaseHTTPRequestHandler):
    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        self.send_response(204)
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def servers() -> Iterator[dict[str, _Counting]]:
    """One server on 127.0.0.1 and one on the alias 127.0.0.2, on the same port."""
    first = _Counting("127.0.0.1")
    second = _Counting("127.0.0.2", first.server_address[1])
    running = {"127.0.0.1": first, "127.0.0.2": second}
    for server in running.values():
        threading.Thread(target=server.serve_forever, daemon=True).start()
    yield running
    for server in running.values():
        server.shutdown()
        server.server_close()


def _post(policy: OutboundPolicy, url: str, resolver: object) -> httpx.Response:
    backend = GuardedBackend(policy, resolver)  # type: ignore[arg-type]
    transport = GuardedTransport(backend, httpx.create_ssl_context(), 2)
    token = request_scheme.set(httpx.URL(url).scheme)
    try:
        with httpx.Client(transport=transport) as client:
            return client.post(url, content=b"{}")
    finally:
        request_scheme.reset(token)
        backend.close()


def test_an_allowed_address_is_reached_through_its_name(servers: dict[str, _Counting]) -> None:
    port = servers["127.0.0.1"].server_address[1]
    policy = OutboundPolicy(f"http://127.0.0.1:{port}", setting=SETTING)
    asked: list[str] = []

    def resolver(host: str, _port: int) -> list[str]:
        asked.append(host)
        return ["127.0.0.1"]

    assert _post(policy, f"http://hook.test:{port}/h", resolver).status_code == 204
    assert asked == ["hook.test"]
    assert servers["127.0.0.1"].connections == 1


def test_a_loopback_alias_outside_the_allow_list_is_refused_unconnected(
    servers: dict[str, _Counting],
) -> None:
    port = servers["127.0.0.1"].server_address[1]
    policy = OutboundPolicy(f"http://127.0.0.1:{port}", setting=SETTING)
    with pytest.raises(OutboundRefused, match=r"refusing 127\.0\.0\.2 \(loopback\)"):
        _post(policy, f"http://hook.test:{port}/h", lambda _h, _p: ["127.0.0.2"])
    with pytest.raises(OutboundRefused, match=r"127\.0\.0\.2 \(loopback\)"):
        _post(policy, f"http://127.0.0.2:{port}/h", lambda _h, _p: [])
    assert servers["127.0.0.2"].connections == 0


def test_one_refused_address_refuses_the_name_and_nothing_is_connected(
    servers: dict[str, _Counting],
) -> None:
    """All resolved addresses are judged before any connection: the client could fall back to
    any of them, so one refused address refuses the name, even listed after an allowed one."""
    port = servers["127.0.0.1"].server_address[1]
    policy = OutboundPolicy(f"http://127.0.0.1:{port}", setting=SETTING)
    with pytest.raises(OutboundRefused, match=r"127\.0\.0\.2"):
        _post(policy, f"http://hook.test:{port}/h", lambda _h, _p: ["127.0.0.1", "127.0.0.2"])
    assert servers["127.0.0.1"].connections == 0
    assert servers["127.0.0.2"].connections == 0


def test_the_socket_goes_to_the_address_checked_not_a_second_lookup(
    servers: dict[str, _Counting],
) -> None:
    """DNS rebinding: a name that answers an allowed address first and a refused one after
    gets one lookup per connection, and the connection goes to the address that was checked."""
    port = servers["127.0.0.1"].server_address[1]
    policy = OutboundPolicy(f"http://127.0.0.1:{port}", setting=SETTING)
    answers = iter([["127.0.0.1"], ["127.0.0.2"], ["127.0.0.2"]])
    calls: list[int] = []

    def rebinding(_host: str, _port: int) -> list[str]:
        calls.append(1)
        return next(answers)

    assert _post(policy, f"http://rebind.test:{port}/h", rebinding).status_code == 204
    assert len(calls) == 1
    assert (servers["127.0.0.1"].connections, servers["127.0.0.2"].connections) == (1, 0)


def test_the_default_policy_refuses_private_metadata_and_other_ports(
    servers: dict[str, _Counting],
) -> None:
    port = servers["127.0.0.1"].server_address[1]
    policy = OutboundPolicy(f"http://127.0.0.1:{port}", setting=SETTING)
    for url, why in (
        ("http://10.0.0.5/h", "private"),
        ("http://169.254.169.254/latest", "cloud metadata"),
        ("http://metadata.google.internal/", "cloud metadata name"),
        ("http://[::1]:80/h", "loopback"),
        (f"https://127.0.0.1:{port}/h", "loopback"),  # the entry opens http only
        (f"http://127.0.0.1:{port + 1}/h", "loopback"),  # and one port only
    ):
        with pytest.raises(OutboundRefused, match=why):
            _post(policy, url, lambda _h, _p: [])
    assert sum(server.connections for server in servers.values()) == 0


def test_a_bad_entry_names_the_setting() -> None:
    with pytest.raises(ValueError, match=re.escape(f"{SETTING}: '127.0.0.1/32' names no port")):
        OutboundPolicy("127.0.0.1/32", setting=SETTING)

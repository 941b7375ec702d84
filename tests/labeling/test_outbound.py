"""The outbound door: SSRF refusals, request shapes, retries and limits, over real loopback sockets.

Nothing here ever connects outside 127.0.0.0/8 or ::1: refusals of other addresses are tested by
pointing the injected resolver at them, and an autouse guard fails any test that tries.
"""

from __future__ import annotations

import contextlib
import email.parser
import email.policy
import gzip
import hashlib
import hmac
import ipaddress
import json
import logging
import select
import socket
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, cast

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from extractor.labeling import outbound
from extractor.labeling.outbound import (
    LabelingClient,
    OutboundConnectError,
    OutboundError,
    OutboundHTTPStatus,
    OutboundPolicy,
    OutboundRefused,
    OutboundReplyTooLarge,
    OutboundSettings,
    OutboundTimeout,
)
from extractor.net.retries import parse_retry_after

SECRET = "s3cret-token-do-not-leak"

# Fast limits for tests: tiny backoff, short timeouts, still a generous total.
FAST = OutboundSettings(
    connect_timeout=2.0,
    read_timeout=2.0,
    write_timeout=2.0,
    total_timeout=10.0,
    retries=2,
    backoff_base=0.01,
    backoff_max=0.05,
    retry_after_max=5.0,
    max_reply_bytes=256 * 1024,
)


# -- loopback helpers -------------------------------------------------------------------------


@dataclass
class Recorded:
    """One request a test server received."""

    method: str
    path: str
    headers: Any  # email.message.Message: case-insensitive get()
    body: bytes
    at: float


Script = Callable[[BaseHTTPRequestHandler, int], None]


def reply(
    handler: BaseHTTPRequestHandler,
    status: int,
    body: bytes = b"",
    headers: dict[str, str] | None = None,
) -> None:
    """Writes a complete response with a Content-Length."""
    handler.send_response(status)
    for name, value in (headers or {}).items():
        handler.send_header(name, value)
    handler.send_header("Content-Length", str(len(body)))
    handler.end_headers()
    handler.wfile.write(body)


def ok_json(handler: BaseHTTPRequestHandler, index: int) -> None:
    reply(handler, 200, b'{"ok": true}', {"Content-Type": "Application/JSON; charset=utf-8"})


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, host: str, script: Script) -> None:
        self.script = script
        self.requests: list[Recorded] = []
        self.connections = 0
        self.lock = threading.Lock()
        self.stop = threading.Event()
        super().__init__((host, 0), _Handler)

    def get_request(self) -> tuple[socket.socket, Any]:
        with self.lock:
            self.connections += 1
        return super().get_request()


class _Handler(BaseHTTPRequestHandler):
    server: _Server

    def _handle(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        with self.server.lock:
            index = len(self.server.requests)
            self.server.requests.append(
                Recorded(self.command, self.path, self.headers, body, time.monotonic())
            )
        # The client may hang up on purpose (size limit, timeout).
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):
            self.server.script(self, index)

    do_GET = do_POST = do_PUT = _handle

    def log_message(self, format: str, *args: Any) -> None:
        pass


def stop_of(handler: BaseHTTPRequestHandler) -> threading.Event:
    """Set when the test ends: scripts that stall wait on it so teardown is quick."""
    return cast(_Server, handler.server).stop


class LoopbackServer:
    """A threading HTTP server on a loopback address that records requests and runs a script."""

    def __init__(self, host: str, script: Script) -> None:
        self._server = _Server(host, script)
        self.host = host
        self.port = self._server.server_address[1]
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True
        )
        self._thread.start()

    @property
    def requests(self) -> list[Recorded]:
        return self._server.requests

    @property
    def connections(self) -> int:
        return self._server.connections

    def url(self, path: str = "/", host: str | None = None) -> str:
        return f"http://{host or self.host}:{self.port}{path}"

    def close(self) -> None:
        self._server.stop.set()
        self._server.shutdown()
        self._server.server_close()


class Tripwire:
    """A listening socket nobody accepts on: any connection attempt shows as a pending one."""

    def __init__(self, host: str) -> None:
        self._sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._sock.bind((host, 0))
        self._sock.listen(8)
        self.host = host
        self.port = self._sock.getsockname()[1]

    def touched(self) -> bool:
        readable, _, _ = select.select([self._sock], [], [], 0.2)
        return bool(readable)

    def close(self) -> None:
        self._sock.close()


@dataclass
class FakeResolver:
    """Answers from a table and records every question; unknown names fail like NXDOMAIN."""

    table: dict[str, list[str]]
    calls: list[str] = field(default_factory=list)

    def __call__(self, host: str, port: int) -> list[str]:
        self.calls.append(host)
        if host not in self.table:
            raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")
        return list(self.table[host])


@pytest.fixture(autouse=True)
def connections(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, int]]:
    """Every TCP connect the code makes; anything outside loopback fails the test at once."""
    made: list[tuple[str, int]] = []
    real = socket.create_connection

    def guarded(address: tuple[str, int], *args: Any, **kwargs: Any) -> socket.socket:
        ip = ipaddress.ip_address(address[0])
        if not ip.is_loopback or getattr(ip, "ipv4_mapped", None) is not None:
            raise AssertionError(f"test tried to connect outside loopback: {address}")
        made.append((address[0], address[1]))
        return real(address, *args, **kwargs)

    monkeypatch.setattr(socket, "create_connection", guarded)
    return made


@pytest.fixture
def servers() -> Iterator[Callable[..., LoopbackServer]]:
    started: list[LoopbackServer] = []

    def start(script: Script = ok_json, host: str = "127.0.0.1") -> LoopbackServer:
        server = LoopbackServer(host, script)
        started.append(server)
        return server

    yield start
    for server in started:
        server.close()


@pytest.fixture
def tripwire() -> Iterator[Callable[[str], Tripwire]]:
    made: list[Tripwire] = []

    def make(host: str) -> Tripwire:
        wire = Tripwire(host)
        made.append(wire)
        return wire

    yield make
    for wire in made:
        wire.close()


def make_client(
    allow: str = "",
    table: dict[str, list[str]] | None = None,
    settings: OutboundSettings = FAST,
) -> tuple[LabelingClient, FakeResolver]:
    resolver = FakeResolver(table or {})
    return LabelingClient(OutboundPolicy(allow), settings, resolver=resolver), resolver


def multipart_parts(request: Recorded) -> list[Any]:
    """The parts of a multipart/form-data body, parsed by the standard library."""
    head = f"Content-Type: {request.headers['Content-Type']}\r\n\r\n".encode()
    message = email.parser.BytesParser(policy=email.policy.HTTP).parsebytes(head + request.body)
    assert message.is_multipart()
    return list(message.iter_parts())


# -- SSRF refusals ----------------------------------------------------------------------------


def test_default_policy_refuses_loopback_literal(
    tripwire: Callable[[str], Tripwire], connections: list[tuple[str, int]]
) -> None:
    wire = tripwire("127.0.0.1")
    c, resolver = make_client()
    with c, pytest.raises(OutboundRefused, match=r"127\.0\.0\.1 \(loopback\)"):
        c.post_file(f"http://127.0.0.1:{wire.port}/extract", "a.txt", b"x", secret=SECRET)
    assert not wire.touched()
    assert connections == []
    assert resolver.calls == []  # a literal address needs no resolution


def test_default_policy_refuses_a_name_resolving_to_loopback(
    servers: Callable[..., LoopbackServer], connections: list[tuple[str, int]]
) -> None:
    server = servers(host="127.0.0.2")
    c, resolver = make_client(table={"x.test": ["127.0.0.2"]})
    with c, pytest.raises(OutboundRefused) as info:
        c.post_json(server.url(host="x.test"), {"a": 1}, secret=SECRET)
    assert str(info.value) == (
        f"refusing 127.0.0.2 (loopback) for host x.test, http port {server.port}"
    )
    assert resolver.calls == ["x.test"]
    time.sleep(0.1)
    assert server.connections == 0 and server.requests == []
    assert connections == []


@pytest.mark.parametrize(
    ("address", "reason"),
    [
        ("10.0.0.5", "private"),
        ("172.16.3.4", "private"),
        ("192.168.1.1", "private"),
        ("fd00::1", "private"),
        ("169.254.169.254", "cloud metadata"),
        ("169.254.1.1", "link-local"),
        ("fe80::1", "link-local"),
        ("::ffff:127.0.0.1", "IPv4-mapped loopback"),
        ("::ffff:10.1.2.3", "IPv4-mapped private"),
        ("2002:a00:1::", "6to4 private"),
        ("0.0.0.0", "unspecified"),
        ("::", "unspecified"),
        ("::1", "loopback"),
        ("100.64.0.1", "CGNAT"),
        ("224.0.0.1", "multicast"),
        ("ff02::1", "multicast"),
        ("240.0.0.1", "reserved"),
        ("192.0.2.10", "not globally routable"),
        ("fec0::1", "site-local"),
        ("168.63.129.16", "cloud metadata"),
    ],
)
def test_refuses_special_addresses_before_connecting(
    address: str, reason: str, connections: list[tuple[str, int]]
) -> None:
    c, resolver = make_client(table={"evil.test": [address]})
    with c, pytest.raises(OutboundRefused) as info:
        c.post_file("http://evil.test:8080/", "a.txt", b"x", secret=SECRET)
    message = str(info.value)
    assert reason in message and "evil.test" in message
    assert str(ipaddress.ip_address(address)) in message
    assert resolver.calls == ["evil.test"]
    assert connections == []


def test_one_private_address_among_several_is_refused(
    tripwire: Callable[[str], Tripwire], connections: list[tuple[str, int]]
) -> None:
    wire = tripwire("127.0.0.1")
    c, _ = make_client("127.0.0.1/32:*", {"mixed.test": ["127.0.0.1", "10.0.0.5"]})
    with c, pytest.raises(OutboundRefused, match=r"10\.0\.0\.5 \(private\) for host mixed\.test"):
        c.post_file(f"http://mixed.test:{wire.port}/", "a.txt", b"x", secret=None)
    assert not wire.touched()
    assert connections == []


@pytest.mark.parametrize(
    "url",
    [
        "ftp://files.test/x",
        "file:///etc/passwd",
        "gopher://files.test:70/_x",
        "unix:///var/run/docker.sock",
        "http:///no-host",
    ],
)
def test_refuses_non_http_urls_without_resolving(url: str) -> None:
    c, resolver = make_client("files.test:*", {"files.test": ["127.0.0.1"]})
    with c, pytest.raises(OutboundRefused):
        c.post_file(url, "a.txt", b"x", secret=None)
    assert resolver.calls == []


def test_refuses_metadata_names_before_resolving() -> None:
    c, resolver = make_client(table={"metadata.google.internal": ["127.0.0.1"]})
    with c, pytest.raises(OutboundRefused, match="cloud metadata name"):
        c.post_json("http://Metadata.Google.Internal./computeMetadata/v1/", {}, secret=SECRET)
    assert resolver.calls == []


def test_allowed_cidr_lets_its_addresses_through_only(
    servers: Callable[..., LoopbackServer],
    connections: list[tuple[str, int]],
) -> None:
    inside = servers()
    outside = servers(host="127.0.0.2")
    c, _ = make_client("127.0.0.1/32:*", {"out.test": ["127.0.0.2"]})
    with c:
        assert c.post_file(inside.url(), "a.txt", b"x", secret=None).status == 200
        with pytest.raises(OutboundRefused, match=r"refusing 127\.0\.0\.2 \(loopback\)"):
            c.post_file(outside.url(), "a.txt", b"x", secret=None)
        with pytest.raises(OutboundRefused, match=r"for host out\.test"):
            c.post_file(outside.url(host="out.test"), "a.txt", b"x", secret=None)
    time.sleep(0.1)
    assert len(inside.requests) == 1
    assert outside.connections == 0
    assert {host for host, _ in connections} == {"127.0.0.1"}


def test_allowed_host_name_passes_whatever_it_resolves_to(
    servers: Callable[..., LoopbackServer],
) -> None:
    server = servers()
    c, resolver = make_client("API.Customer.test.:*", {"api.customer.test": ["127.0.0.1"]})
    with c:
        reply_ = c.post_file(server.url(host="api.customer.test"), "a.txt", b"x", secret=None)
        # The same address under another name is still refused.
        c2, _ = make_client("api.customer.test:*", {"other.test": ["127.0.0.1"]})
        with c2, pytest.raises(OutboundRefused):
            c2.post_file(server.url(host="other.test"), "a.txt", b"x", secret=None)
    assert reply_.status == 200
    assert resolver.calls == ["api.customer.test"]
    assert server.requests[0].headers["Host"] == f"api.customer.test:{server.port}"
    assert len(server.requests) == 1


def test_redirect_to_a_refused_address_is_refused(
    servers: Callable[..., LoopbackServer], tripwire: Callable[[str], Tripwire]
) -> None:
    wire = tripwire("127.0.0.2")

    def redirect(handler: BaseHTTPRequestHandler, index: int) -> None:
        reply(handler, 302, headers={"Location": f"http://evil.test:{wire.port}/steal"})

    server = servers(redirect)
    c, resolver = make_client("127.0.0.1/32:*", {"evil.test": ["127.0.0.2"]})
    with c, pytest.raises(OutboundRefused, match=r"127\.0\.0\.2 \(loopback\) for host evil\.test"):
        c.post_json(server.url("/predict"), {"a": 1}, secret=SECRET)
    assert len(server.requests) == 1
    assert resolver.calls == ["evil.test"]
    assert not wire.touched()


def test_redirect_to_a_non_http_scheme_is_refused(servers: Callable[..., LoopbackServer]) -> None:
    def redirect(handler: BaseHTTPRequestHandler, index: int) -> None:
        reply(handler, 307, headers={"Location": "file:///etc/passwd"})

    server = servers(redirect)
    c, _ = make_client("127.0.0.1/32:*")
    with c, pytest.raises(OutboundRefused, match="scheme 'file'"):
        c.post_file(server.url(), "a.txt", b"x", secret=None)


def test_redirects_are_followed_and_credentials_stay_home(
    servers: Callable[..., LoopbackServer],
) -> None:
    other = servers()

    def redirect(handler: BaseHTTPRequestHandler, index: int) -> None:
        target = "/second" if index == 0 else other.url("/third")
        reply(handler, 307, headers={"Location": target})

    first = servers(redirect)
    c, _ = make_client("127.0.0.1/32:*")
    with c:
        result = c.post_json(first.url("/first"), {"a": 1}, secret=SECRET)
    assert result.status == 200
    assert [r.path for r in first.requests] == ["/first", "/second"]
    # 307 keeps method and body; the same origin keeps the credentials ...
    assert first.requests[1].method == "POST" and first.requests[1].body == b'{"a":1}'
    assert first.requests[1].headers["Authorization"] == f"Bearer {SECRET}"
    # ... another origin (other port) gets the body but neither token nor signature.
    third = other.requests[0]
    assert third.method == "POST" and third.body == b'{"a":1}'
    assert third.headers["Authorization"] is None and third.headers["X-Signature"] is None


def test_303_turns_the_post_into_a_get(servers: Callable[..., LoopbackServer]) -> None:
    def see_other(handler: BaseHTTPRequestHandler, index: int) -> None:
        if index == 0:
            reply(handler, 303, headers={"Location": "/result"})
        else:
            ok_json(handler, index)

    server = servers(see_other)
    c, _ = make_client("127.0.0.1/32:*")
    with c:
        c.post_file(server.url(), "a.txt", b"x", secret=SECRET)
    assert [(r.method, r.path, r.body) for r in server.requests[1:]] == [("GET", "/result", b"")]


def test_too_many_redirects(servers: Callable[..., LoopbackServer]) -> None:
    def loop(handler: BaseHTTPRequestHandler, index: int) -> None:
        reply(handler, 302, headers={"Location": f"/hop{index}"})

    server = servers(loop)
    settings = OutboundSettings(**{**FAST.__dict__, "max_redirects": 2})
    c, _ = make_client("127.0.0.1/32:*", settings=settings)
    with c, pytest.raises(OutboundError, match="redirected more than 2 times"):
        c.post_file(server.url(), "a.txt", b"x", secret=None)
    assert len(server.requests) == 3


def test_policy_parsing() -> None:
    policy = OutboundPolicy.from_allow_string(
        "127.0.0.1/8:*, http://Extractor.Internal.:8000 ,https://10.0.0.0/8,,[::1]:9000,"
        "https://[fd00::/8]:*, model.test:443"
    )
    assert [str(entry) for entry in policy.entries] == [
        "127.0.0.0/8:*",
        "http://extractor.internal:8000",
        "https://10.0.0.0/8:443",
        "[::1/128]:9000",
        "https://[fd00::/8]:*",
        "model.test:443",
    ]
    assert "127.0.0.0/8:*" in repr(policy)
    env_policy = OutboundPolicy.from_env(
        outbound.ALLOW_ENV_VAR, {outbound.ALLOW_ENV_VAR: "http://10.1.2.3"}
    )
    assert env_policy.entries == (
        outbound.AllowEntry("http", None, ipaddress.ip_network("10.1.2.3/32"), 80),
    )


@pytest.mark.parametrize(
    ("entry", "why"),
    [
        ("127.0.0.1/32", "names no port"),  # the README's old example: it meant every port
        ("extractor.internal", "names no port"),
        ("::1", "IPv6 address without brackets"),
        ("ftp://x.test", "scheme other than http"),
        ("http://x.test:0", "port that is neither"),
        ("x.test:http", "port that is neither"),
        ("[::1:80", "unclosed"),
        ("10.1.2:80", "neither a host name"),
        ("x y:80", "neither a host name"),
        ("*.internal:*", "neither a host name"),
    ],
)
def test_policy_entries_must_name_their_port(entry: str, why: str) -> None:
    with pytest.raises(ValueError, match=outbound.ALLOW_ENV_VAR) as info:
        OutboundPolicy(entry, setting=outbound.ALLOW_ENV_VAR)
    assert why in str(info.value) and "127.0.0.1:8000" in str(info.value)


@settings(max_examples=200, deadline=None)
@given(
    scheme=st.sampled_from([None, "http", "https"]),
    target=st.one_of(
        st.ip_addresses(v=4).map(str),
        st.ip_addresses(v=6).map(lambda ip: f"[{ip}]"),
        st.tuples(st.ip_addresses(v=4), st.integers(8, 32)).map(lambda t: f"{t[0]}/{t[1]}"),
        st.from_regex(
            r"[a-z]([a-z0-9-]{0,8}[a-z0-9])?(\.[a-z][a-z0-9]{0,10}){0,3}", fullmatch=True
        ),
    ),
    port=st.one_of(st.none(), st.just("*"), st.integers(1, 65535).map(str)),
)
def test_every_entry_spelled_back_parses_to_itself(
    scheme: str | None, target: str, port: str | None
) -> None:
    text = (f"{scheme}://" if scheme else "") + target + (f":{port}" if port else "")
    if scheme is None and port is None:
        with pytest.raises(ValueError, match="names no port"):
            outbound.AllowEntry.parse(text)
        return
    entry = outbound.AllowEntry.parse(text)
    assert outbound.AllowEntry.parse(str(entry)) == entry
    expected = {None: None, "http": 80, "https": 443}[scheme] if port is None else port
    assert entry.port == (None if expected == "*" else int(expected or 0))


def test_policy_checks_without_network() -> None:
    policy = OutboundPolicy("127.0.0.1/32:*,[fd00::/8]:*,internal.test:*,http://10.0.0.7:8000")
    policy.check_addresses(
        "a.test", ["127.0.0.1", "::ffff:127.0.0.1", "fd00::5", "8.8.8.8"], scheme="http", port=1
    )
    policy.check_addresses("internal.test", ["10.9.9.9", "169.254.169.254"], scheme="https", port=9)
    policy.check_addresses("b.test", ["10.0.0.7"], scheme="http", port=8000)
    for scheme, port in (("https", 8000), ("http", 8001), (None, 8000)):
        with pytest.raises(OutboundRefused, match=r"refusing 10\.0\.0\.7 \(private\)"):
            policy.check_addresses("b.test", ["10.0.0.7"], scheme=scheme, port=port)
    with pytest.raises(OutboundRefused, match=r"refusing 127\.0\.0\.2 \(loopback\)"):
        policy.check_addresses("a.test", ["127.0.0.2"], scheme="http", port=80)
    with pytest.raises(OutboundRefused, match="not an IP address"):
        policy.check_addresses("a.test", ["not-an-ip"], scheme="http", port=80)
    assert outbound.default_refusal_reason(ipaddress.ip_address("2606:4700::1111")) is None
    assert outbound.default_refusal_reason(ipaddress.ip_address("64:ff9b::a00:1")) == (
        "NAT64 private"
    )


def test_an_entry_with_a_port_opens_that_port_only(
    servers: Callable[..., LoopbackServer],
    tripwire: Callable[[str], Tripwire],
    connections: list[tuple[str, int]],
) -> None:
    server = servers()
    wire = tripwire("127.0.0.1")
    c, _ = make_client(f"http://127.0.0.1:{server.port}")
    with c:
        assert c.post_file(server.url(), "a.txt", b"x", secret=None).status == 200
        with pytest.raises(OutboundRefused, match=f"http port {wire.port}"):
            c.post_file(f"http://127.0.0.1:{wire.port}/internal", "a.txt", b"x", secret=None)
        # The same port under the other scheme is another origin, and not allowed either.
        with pytest.raises(OutboundRefused, match=f"https port {server.port}"):
            c.post_file(f"https://127.0.0.1:{server.port}/", "a.txt", b"x", secret=None)
    assert not wire.touched()
    assert connections == [("127.0.0.1", server.port)]


def test_a_redirect_to_another_port_of_an_allowed_address_is_refused(
    servers: Callable[..., LoopbackServer], tripwire: Callable[[str], Tripwire]
) -> None:
    """Issue 11's attack: a registered API answers 303 to an internal page on another port."""
    wire = tripwire("127.0.0.1")

    def redirect(handler: BaseHTTPRequestHandler, index: int) -> None:
        if index == 0:  # the same origin keeps its allowance ...
            reply(handler, 307, headers={"Location": "/second"})
        else:  # ... another port of the same address has none of its own
            reply(handler, 303, headers={"Location": f"http://127.0.0.1:{wire.port}/internal"})

    server = servers(redirect)
    c, _ = make_client(f"http://127.0.0.1:{server.port}")
    with c, pytest.raises(OutboundRefused, match=f"port {wire.port}"):
        c.post_file(server.url("/first"), "a.txt", b"x", secret=SECRET)
    assert [r.path for r in server.requests] == ["/first", "/second"]
    assert not wire.touched()


# -- request shapes ---------------------------------------------------------------------------


def test_post_file_sends_one_upload_field_and_the_headers(
    servers: Callable[..., LoopbackServer],
) -> None:
    server = servers()
    data = bytes(range(256)) * 10
    c, _ = make_client("127.0.0.1/32:*")
    with c:
        result = c.post_file(server.url("/extract"), "scan 1.pdf", data, secret=SECRET)
    request = server.requests[0]
    assert request.method == "POST" and request.path == "/extract"
    assert request.headers["Accept"] == "application/json, text/plain"
    assert request.headers["Authorization"] == f"Bearer {SECRET}"
    parts = multipart_parts(request)
    assert len(parts) == 1
    assert parts[0].get_param("name", header="content-disposition") == "upload"
    assert parts[0].get_filename() == "scan 1.pdf"
    assert parts[0].get_payload(decode=True) == data
    assert result.status == 200
    assert result.content_type == "application/json"
    assert result.content == result.raw == b'{"ok": true}'
    assert result.headers["content-type"] == "Application/JSON; charset=utf-8"


def test_one_client_serves_many_threads(servers: Callable[..., LoopbackServer]) -> None:
    server = servers()
    c, _ = make_client("127.0.0.1/32:*")
    results: list[int] = []
    errors: list[BaseException] = []

    def call(n: int) -> None:
        try:
            results.append(c.post_json(server.url(f"/{n}"), {"n": n}, secret=SECRET).status)
        except BaseException as exc:
            errors.append(exc)

    with c:
        threads = [threading.Thread(target=call, args=(n,)) for n in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(10)
    assert errors == [] and results == [200] * 8
    assert sorted(json.loads(r.body)["n"] for r in server.requests) == list(range(8))


def test_post_file_without_secret_sends_no_authorization(
    servers: Callable[..., LoopbackServer],
) -> None:
    server = servers()
    c, _ = make_client("127.0.0.1/32:*")
    with c:
        c.post_file(server.url(), "a.txt", b"hello", secret=None)
    assert server.requests[0].headers["Authorization"] is None


def test_post_json_sends_the_signed_bytes(servers: Callable[..., LoopbackServer]) -> None:
    server = servers()
    payload = {"texts": ["naïve café", "x"], "n": 2, "nested": {"ok": True}}
    c, _ = make_client("127.0.0.1/32:*")
    with c:
        c.post_json(server.url("/predict"), payload, secret=SECRET)
    request = server.requests[0]
    assert json.loads(request.body) == payload
    assert request.headers["Content-Type"] == "application/json"
    assert request.headers["Authorization"] == f"Bearer {SECRET}"
    expected = hmac.new(SECRET.encode(), request.body, hashlib.sha256).hexdigest()
    assert request.headers["X-Signature"] == f"sha256={expected}"


def test_urls_with_credentials_are_refused_before_any_connection(
    tripwire: Callable[[str], Tripwire],
    caplog: pytest.LogCaptureFixture,
    connections: list[tuple[str, int]],
) -> None:
    wire = tripwire("127.0.0.1")
    c, resolver = make_client("127.0.0.1/32:*", {"api.test": ["127.0.0.1"]})
    caplog.set_level(logging.DEBUG)
    with c:
        for host in ("127.0.0.1", "api.test"):
            url = f"http://alice:pa55word@{host}:{wire.port}/x?token=abc"
            with pytest.raises(OutboundRefused, match="user:password") as info:
                c.post_file(url, "a.txt", b"x", secret=None)
            assert "pa55word" not in str(info.value)
    assert "pa55word" not in caplog.text
    assert resolver.calls == [] and connections == [] and not wire.touched()


def test_bad_secrets_are_refused_without_quoting_them() -> None:
    c, _ = make_client()
    with c:
        for secret in ("", "two words", "line\r\nX-Evil: 1"):
            with pytest.raises(ValueError) as info:
                c.post_json("http://x.test/", {}, secret=secret)
            assert secret not in str(info.value) or secret == ""


# -- retries, timeouts and limits -------------------------------------------------------------


def test_503_twice_then_success(
    servers: Callable[..., LoopbackServer], caplog: pytest.LogCaptureFixture
) -> None:
    def flaky(handler: BaseHTTPRequestHandler, index: int) -> None:
        if index < 2:
            reply(handler, 503, b"busy")
        else:
            ok_json(handler, index)

    server = servers(flaky)
    c, _ = make_client("127.0.0.1/32:*")
    caplog.set_level(logging.DEBUG)
    with c:
        assert c.post_json(server.url(), {"a": 1}, secret=SECRET).status == 200
    assert len(server.requests) == 3
    assert SECRET not in caplog.text


def test_5xx_that_persists_fails_after_the_retries(servers: Callable[..., LoopbackServer]) -> None:
    server = servers(lambda handler, index: reply(handler, 502, b"bad gateway"))
    c, _ = make_client("127.0.0.1/32:*")
    with c, pytest.raises(OutboundHTTPStatus) as info:
        c.post_json(server.url(), {"a": 1}, secret=SECRET)
    assert info.value.status == 502
    assert len(server.requests) == 1 + FAST.retries
    assert SECRET not in str(info.value)


def test_429_retry_after_is_honoured(servers: Callable[..., LoopbackServer]) -> None:
    def limited(handler: BaseHTTPRequestHandler, index: int) -> None:
        if index == 0:
            reply(handler, 429, headers={"Retry-After": "1"})
        else:
            ok_json(handler, index)

    server = servers(limited)
    c, _ = make_client("127.0.0.1/32:*")
    with c:
        assert c.post_file(server.url(), "a.txt", b"x", secret=None).status == 200
    first, second = server.requests
    assert second.at - first.at >= 0.9


def test_400_is_not_retried(servers: Callable[..., LoopbackServer]) -> None:
    server = servers(lambda handler, index: reply(handler, 400, b'{"error": "bad file"}'))
    c, _ = make_client("127.0.0.1/32:*")
    with c, pytest.raises(OutboundHTTPStatus) as info:
        c.post_file(server.url(), "a.txt", b"x", secret=SECRET)
    assert info.value.status == 400
    assert info.value.body == b'{"error": "bad file"}'
    assert len(server.requests) == 1


def test_hanging_server_times_out_within_the_read_timeout(
    servers: Callable[..., LoopbackServer],
) -> None:
    server = servers(lambda handler, index: stop_of(handler).wait(10))
    settings = OutboundSettings(**{**FAST.__dict__, "read_timeout": 0.5})
    c, _ = make_client("127.0.0.1/32:*", settings=settings)
    started = time.monotonic()
    with c, pytest.raises(OutboundTimeout, match="timed out"):
        c.post_file(server.url(), "a.txt", b"x", secret=SECRET)
    assert time.monotonic() - started < 2.0
    assert len(server.requests) == 1  # a read timeout is not retried


def test_total_timeout_bounds_a_call_despite_a_long_read_timeout(
    servers: Callable[..., LoopbackServer],
) -> None:
    def drip(handler: BaseHTTPRequestHandler, index: int) -> None:
        # Headers, then a byte every 0.1 s: never silent long enough for the read timeout.
        handler.send_response(200)
        handler.end_headers()
        while not stop_of(handler).wait(0.1):
            handler.wfile.write(b"x")
            handler.wfile.flush()

    server = servers(drip)
    settings = OutboundSettings(**{**FAST.__dict__, "read_timeout": 5.0, "total_timeout": 0.8})
    c, _ = make_client("127.0.0.1/32:*", settings=settings)
    started = time.monotonic()
    with c, pytest.raises(OutboundTimeout):
        c.post_file(server.url(), "a.txt", b"x", secret=None)
    assert time.monotonic() - started < 2.0


def test_streamed_body_past_the_limit(servers: Callable[..., LoopbackServer]) -> None:
    def flood(handler: BaseHTTPRequestHandler, index: int) -> None:
        handler.send_response(200)
        handler.end_headers()  # no Content-Length: the body ends when the connection does
        chunk = b"a" * 65536
        for _ in range(160):  # 10 MiB, far past the 256 KiB limit
            if stop_of(handler).is_set():
                return
            handler.wfile.write(chunk)

    server = servers(flood)
    c, _ = make_client("127.0.0.1/32:*")
    with c, pytest.raises(OutboundReplyTooLarge, match=str(FAST.max_reply_bytes)) as info:
        c.post_file(server.url(), "a.txt", b"x", secret=None)
    assert info.value.limit == FAST.max_reply_bytes


def test_announced_length_past_the_limit_fails_before_reading(
    servers: Callable[..., LoopbackServer],
) -> None:
    def announce(handler: BaseHTTPRequestHandler, index: int) -> None:
        handler.send_response(200)
        handler.send_header("Content-Length", str(10 * 1024 * 1024))
        handler.end_headers()
        stop_of(handler).wait(10)  # never sends the body: only the header can be the reason

    server = servers(announce)
    c, _ = make_client("127.0.0.1/32:*")
    with c, pytest.raises(OutboundReplyTooLarge, match="announced"):
        c.post_file(server.url(), "a.txt", b"x", secret=None)


def test_gzip_reply_is_decoded_and_bounded(servers: Callable[..., LoopbackServer]) -> None:
    bodies = [gzip.compress(b'{"small": 1}'), gzip.compress(b"\0" * (4 * 1024 * 1024))]

    def zipped(handler: BaseHTTPRequestHandler, index: int) -> None:
        headers = {"Content-Encoding": "gzip", "Content-Type": "application/json"}
        reply(handler, 200, bodies[index], headers)

    server = servers(zipped)
    c, _ = make_client("127.0.0.1/32:*")
    with c:
        assert c.post_file(server.url(), "a.txt", b"x", secret=None).content == b'{"small": 1}'
        # About 4 KiB on the wire, 4 MiB once inflated: stopped at the limit, not inflated whole.
        with pytest.raises(OutboundReplyTooLarge):
            c.post_file(server.url(), "a.txt", b"x", secret=None)
    assert server.requests[0].headers["Accept-Encoding"] == "identity"


def test_connection_refused_is_retried_then_reported() -> None:
    with socket.socket() as probe:  # a port that was free a moment ago: nothing listens there
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    c, resolver = make_client("127.0.0.1/32:*", {"down.test": ["127.0.0.1"]})
    with c, pytest.raises(OutboundConnectError, match="cannot connect"):
        c.post_json(f"http://down.test:{port}/", {"a": 1}, secret=SECRET)
    assert resolver.calls == ["down.test"] * (1 + FAST.retries)


def test_unresolvable_name_is_a_connect_error() -> None:
    c, resolver = make_client()
    with c, pytest.raises(OutboundConnectError, match=r"cannot resolve nowhere\.test"):
        c.post_json("http://nowhere.test/", {"a": 1}, secret=SECRET)
    assert len(resolver.calls) == 1 + FAST.retries


def test_slow_resolver_is_bounded_by_the_connect_timeout() -> None:
    release = threading.Event()

    def stuck(host: str, port: int) -> list[str]:
        release.wait(5)
        return ["127.0.0.1"]

    settings = OutboundSettings(**{**FAST.__dict__, "connect_timeout": 0.3, "retries": 0})
    c = LabelingClient(OutboundPolicy("127.0.0.1/32:*"), settings, resolver=stuck)
    started = time.monotonic()
    try:
        with c, pytest.raises(OutboundTimeout, match=r"resolving slow\.test"):
            c.post_json("http://slow.test/", {}, secret=SECRET)
    finally:
        release.set()
    assert time.monotonic() - started < 1.5


def test_retry_after_parsing() -> None:
    parse = parse_retry_after
    assert parse("3") == 3.0
    assert parse(None) is None and parse("soon") is None and parse("-1") is None
    later = format_datetime(datetime.now(UTC) + timedelta(seconds=30), usegmt=True)
    assert 25 <= (parse(later) or 0) <= 31
    assert parse("Wed, 21 Oct 2015 07:28:00 GMT") == 0.0


def test_settings_are_validated() -> None:
    with pytest.raises(ValueError, match="read_timeout"):
        OutboundSettings(read_timeout=0)
    with pytest.raises(ValueError, match="retries"):
        OutboundSettings(retries=-1)

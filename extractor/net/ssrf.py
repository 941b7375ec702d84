"""Which destinations outbound calls may reach: public addresses, plus an explicit allow-list.

Every non-public address (loopback, private, link-local, cloud metadata, ...) is refused unless an
allow-list entry opens it, and an entry opens one origin-shaped thing, never more than it says:

    entry  = [scheme "://"] target [":" port]
    scheme = "http" | "https"                     (absent: both)
    target = host name | IPv4 address or CIDR | "[" IPv6 address or CIDR "]"
    port   = 1-65535 | "*"                        (absent: the scheme's default port)

``http://127.0.0.1:8000`` opens one local service; ``127.0.0.1/32:*`` opens every port of the
address, and only because the ``*`` says so. An entry with neither a scheme nor a port
(``127.0.0.1/32``) is refused at start-up rather than guessed at: before this syntax it meant
every port, which let a redirect reach any local service. A host-name entry allows that name
whatever it resolves to (the operator vouches for the name); an address entry allows the
addresses inside it whatever name led there.

Both services' allow-lists use this syntax: ``EXTRACTOR_LABELING_OUTBOUND_ALLOW`` (prediction and
extraction APIs the labeling service calls) and ``EXTRACTOR_OUTBOUND_ALLOW`` (extraction jobs'
webhooks). Every refusal names the setting the policy came from.
"""

from __future__ import annotations

import ipaddress
import os
import re
import socket
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from extractor.net.errors import OutboundError, OutboundRefused

if TYPE_CHECKING:  # httpx is imported where a URL is parsed: it costs a worker ~4 MB of RSS
    import httpx

#: What a policy built without naming its setting calls its allow-list in errors.
UNNAMED_SETTING = "the outbound allow-list"

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network

DEFAULT_PORTS = {"http": 80, "https": 443}

# Names that reach a cloud provider's instance metadata service (credentials!) whatever they
# resolve to from where a check might run; refused by name before any DNS query.
_METADATA_HOSTS = frozenset(
    {
        "metadata.google.internal",  # GCP
        "metadata.goog",  # GCP
        "metadata",  # GCP's short name inside an instance
        "instance-data",  # AWS
        "instance-data.ec2.internal",  # AWS
    }
)
# Metadata and host-agent addresses, named as such in refusals so an operator sees what was
# attempted. Some are ordinary public addresses to the ipaddress module, so only this list
# refuses them.
_METADATA_ADDRESSES = frozenset(
    ipaddress.ip_address(a)
    for a in (
        "169.254.169.254",  # AWS, GCP, Azure, OpenStack, DigitalOcean, ...
        "fd00:ec2::254",  # AWS over IPv6
        "100.100.100.200",  # Alibaba Cloud
        "168.63.129.16",  # Azure WireServer: VM agent, health probes, DNS (a public address)
    )
)
_PRIVATE_NETWORKS = tuple(
    ipaddress.ip_network(n) for n in ("10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "fc00::/7")
)
# IPv6 site-local (RFC 3879 deprecated it, but routers and stacks still route it privately);
# the ipaddress module counts it as global.
_SITE_LOCAL = ipaddress.ip_network("fec0::/10")
_CGNAT = ipaddress.ip_network("100.64.0.0/10")
_NAT64 = ipaddress.ip_network("64:ff9b::/96")
_HOSTNAME = re.compile(
    r"(?=.{1,253}$)[a-z0-9_]([a-z0-9_-]{0,61}[a-z0-9_])?(\.[a-z0-9_]([a-z0-9_-]{0,61}[a-z0-9_])?)*"
)
_SCHEME = re.compile(r"([A-Za-z][A-Za-z0-9+.-]*)://")
_SYNTAX_HELP = (
    "write [http|https://]HOST[:PORT|:*], e.g. http://127.0.0.1:8000, "
    "https://extractor.internal or 10.0.0.0/8:*"
)


def normalise_host(host: str) -> str:
    """Lowercase without the trailing root dot, so 'Metadata.Google.Internal.' matches too."""
    return host.strip().lower().rstrip(".")


def parse_ip(text: str) -> IPAddress | None:
    """The IP address ``text`` spells (brackets allowed for IPv6), or None for anything else."""
    try:
        return ipaddress.ip_address(text.strip().removeprefix("[").removesuffix("]"))
    except ValueError:
        return None


def host_syntax_problem(host: str) -> str | None:
    """What is wrong with a URL's host as written (its ASCII form: punycode for international
    names), or None for an IP address or a well-formed host name.

    The URL parser takes nearly anything; the resolver then guesses. A host that is neither an
    address nor a name (``a%20b``, ``-x-``, ``a..b``) is refused, and so is an IPv4 address in a
    form only ``inet_aton`` reads (``127.1``, ``0x7f.1``, ``2130706433``), which a reader of the
    URL would not recognise as the address it reaches.
    """
    if parse_ip(host) is not None:
        return None
    name = normalise_host(host)
    if not name.isascii() or not _HOSTNAME.fullmatch(name):
        return "not a host name (letters, digits, '-' and '_' in dot-separated labels)"
    try:
        socket.inet_aton(name)
    except OSError:
        return None
    return "an IPv4 address in a non-standard form; write it as four decimal numbers"


def _embedded_ipv4(ip: ipaddress.IPv6Address) -> tuple[str, ipaddress.IPv4Address] | None:
    """The IPv4 address an IPv6 address stands for (mapped, 6to4, NAT64), with that scheme's name.

    Such an address reaches the IPv4 host, so it must be judged as that host.
    """
    if ip.ipv4_mapped is not None:
        return "IPv4-mapped", ip.ipv4_mapped
    if ip.sixtofour is not None:
        return "6to4", ip.sixtofour
    if ip in _NAT64:
        return "NAT64", ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF)
    return None


def default_refusal_reason(ip: IPAddress) -> str | None:
    """Why the default policy refuses ``ip`` ("loopback", "private", ...), or None if public."""
    if isinstance(ip, ipaddress.IPv6Address):
        embedded = _embedded_ipv4(ip)
        if embedded is not None:
            scheme, ipv4 = embedded
            reason = default_refusal_reason(ipv4)
            return None if reason is None else f"{scheme} {reason}"
    # Order matters: the first match names the reason, so the specific ones come first
    # (0.0.0.0 and 169.254/16 are also "private" to the ipaddress module).
    if ip in _METADATA_ADDRESSES:
        return "cloud metadata"
    if ip.is_unspecified:
        return "unspecified"
    if ip.is_loopback:
        return "loopback"
    if ip.is_link_local:
        return "link-local"
    if ip.is_multicast:
        return "multicast"
    if any(ip in net for net in _PRIVATE_NETWORKS):
        return "private"
    if ip in _SITE_LOCAL:
        return "site-local"
    if ip in _CGNAT:
        return "shared address space (CGNAT)"
    if ip.is_reserved:
        return "reserved"
    if not ip.is_global:
        # Documentation, benchmarking, IETF protocol ranges, ...
        return "special-purpose, not globally routable"
    return None


def origin_port(url: httpx.URL) -> int:
    """The port a URL connects to: its own, else its scheme's default."""
    return url.port if url.port is not None else DEFAULT_PORTS.get(url.scheme, 0)


@dataclass(frozen=True)
class AllowEntry:
    """One allow-list entry: a scheme (None: both), a host name or a network, a port (None: all)."""

    scheme: str | None
    host: str | None
    network: IPNetwork | None
    port: int | None

    @classmethod
    def parse(cls, text: str, setting: str = UNNAMED_SETTING) -> AllowEntry:
        """The entry ``text`` spells; ValueError naming ``setting`` and the syntax otherwise."""

        def bad(why: str) -> ValueError:
            return ValueError(f"{setting}: {text!r} {why}; {_SYNTAX_HELP}")

        rest = text
        scheme: str | None = None
        match = _SCHEME.match(rest)
        if match is not None:
            scheme = match.group(1).lower()
            if scheme not in DEFAULT_PORTS:
                raise bad("has a scheme other than http or https")
            rest = rest[match.end() :].removesuffix("/")
        port_text: str | None = None
        if rest.startswith("["):
            target, bracket, after = rest[1:].partition("]")
            if not bracket or (after and not after.startswith(":")):
                raise bad("has an unclosed or misplaced ']'")
            port_text = after[1:] if after else None
        elif rest.count(":") > 1:
            raise bad("looks like an IPv6 address without brackets ([fd00::1]:8000)")
        else:
            target, colon, port_part = rest.partition(":")
            port_text = port_part if colon else None
        if port_text is None:
            if scheme is None:
                raise bad("names no port (a bare address no longer means every port)")
            port: int | None = DEFAULT_PORTS[scheme]
        elif port_text == "*":
            port = None
        elif port_text.isascii() and port_text.isdigit() and 0 < int(port_text) < 65536:
            port = int(port_text)
        else:
            raise bad("has a port that is neither 1-65535 nor *")
        try:
            # strict=False: '127.0.0.1/8' means the network 127.0.0.0/8, as people write it.
            network = ipaddress.ip_network(target, strict=False)
        except ValueError:
            name = normalise_host(target)
            # All digits and dots is a mistyped address ("10.1.2"), not a host name.
            numeric = re.fullmatch(r"[0-9.]+", name) is not None
            if numeric or not name.isascii() or not _HOSTNAME.fullmatch(name):
                raise bad(
                    "is neither a host name (ASCII, punycode for international names), "
                    "an IP address nor a CIDR network"
                ) from None
            return cls(scheme, name, None, port)
        return cls(scheme, None, network, port)

    def admits(self, scheme: str | None, port: int) -> bool:
        """Whether a call with this scheme to this port falls under the entry."""
        return (self.scheme is None or self.scheme == scheme) and self.port in (None, port)

    def __str__(self) -> str:
        target = self.host or str(self.network)
        if self.network is not None and self.network.version == 6:
            target = f"[{target}]"
        port = "*" if self.port is None else str(self.port)
        return f"{self.scheme}://{target}:{port}" if self.scheme else f"{target}:{port}"


class OutboundPolicy:
    """The default refusals plus the allow-list; every check names the scheme and port too."""

    def __init__(self, allow: str | Iterable[str] = "", *, setting: str = UNNAMED_SETTING) -> None:
        texts = allow.split(",") if isinstance(allow, str) else list(allow)
        self.entries: tuple[AllowEntry, ...] = tuple(
            AllowEntry.parse(text.strip(), setting) for text in texts if text.strip()
        )

    @classmethod
    def from_allow_string(cls, allow: str, setting: str = UNNAMED_SETTING) -> OutboundPolicy:
        """The policy a comma-separated allow string (the setting's format) describes;
        ``setting`` names it in errors."""
        return cls(allow, setting=setting)

    @classmethod
    def from_env(cls, variable: str, environ: Mapping[str, str] | None = None) -> OutboundPolicy:
        """The policy the environment variable ``variable`` describes (unset: no entries)."""
        env = os.environ if environ is None else environ
        return cls(env.get(variable, ""), setting=variable)

    def __repr__(self) -> str:
        return f"OutboundPolicy(allow={','.join(str(e) for e in self.entries)!r})"

    def host_allowed(self, host: str, scheme: str | None, port: int) -> bool:
        """Whether an entry names ``host`` for this scheme and port (waives the address checks)."""
        name = normalise_host(host)
        return any(e.host == name and e.admits(scheme, port) for e in self.entries)

    def address_allowed(self, ip: IPAddress, scheme: str | None, port: int) -> bool:
        """Whether an entry's network holds ``ip`` (or the IPv4 address it maps to) for this
        scheme and port."""
        candidates: list[IPAddress] = [ip]
        if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
            candidates.append(ip.ipv4_mapped)
        return any(
            e.network is not None and e.admits(scheme, port) and c in e.network
            for c in candidates
            for e in self.entries
        )

    def check_url(self, url: str | httpx.URL) -> httpx.URL:
        """Parses ``url`` and refuses what needs no DNS: non-http(s) schemes, credentials in the
        URL and metadata names."""
        import httpx

        try:
            parsed = httpx.URL(url)
        except (httpx.InvalidURL, TypeError, ValueError) as exc:
            # The text is customer-supplied and may hold credentials: don't echo it.
            raise OutboundError("invalid URL: it cannot be parsed") from exc
        host = parsed.host
        if parsed.scheme not in DEFAULT_PORTS:
            raise OutboundRefused(
                f"refusing scheme {parsed.scheme[:20]!r} for host {host or '(none)'}: "
                "only http and https are allowed"
            )
        if not host:
            raise OutboundRefused("refusing a URL without a host")
        if parsed.userinfo:
            # A secret in a URL ends up in logs and replies; the API's secret field is the place.
            raise OutboundRefused(f"refusing a URL with user:password for host {host}")
        if parsed.port is not None and not 0 < parsed.port < 65536:
            raise OutboundRefused(f"refusing port {parsed.port} for host {host}: ports are 1-65535")
        problem = host_syntax_problem(parsed.raw_host.decode("ascii", "replace"))
        if problem is not None:
            raise OutboundRefused(f"refusing host {host[:100]!r}: {problem}")
        self.check_host(host, parsed.scheme, origin_port(parsed))
        return parsed

    def check_host(self, host: str, scheme: str | None, port: int) -> None:
        """Refuses cloud metadata names unless an entry names them for this scheme and port."""
        name = normalise_host(host)
        if name in _METADATA_HOSTS and not self.host_allowed(name, scheme, port):
            raise OutboundRefused(f"refusing host {name} (cloud metadata name)")

    def check_addresses(
        self, host: str, addresses: Sequence[str], *, scheme: str | None, port: int
    ) -> None:
        """Refuses unless every address ``host`` resolved to is permitted for this scheme and port.

        All of them, not just the first: the connection may fall back to any of them.
        """
        self.check_host(host, scheme, port)
        if self.host_allowed(host, scheme, port):
            return
        for address in addresses:
            ip = parse_ip(address)
            if ip is None:
                raise OutboundRefused(f"refusing {address!r} (not an IP address) for host {host}")
            if self.address_allowed(ip, scheme, port):
                continue
            reason = default_refusal_reason(ip)
            if reason is not None:
                raise OutboundRefused(
                    f"refusing {ip} ({reason}) for host {host}, {scheme or 'any scheme'} port {port}"
                )

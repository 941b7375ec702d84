"""What a client-named URL must be before anything is resolved or connected
(``OutboundPolicy.check_url``): http(s), a host that is an IP address or a well-formed name, a
port from 1 to 65535, no credentials. Both services' URLs pass through it: a job's callback_url
at submit and on every call, the labeling service's extractor and model URLs and redirects."""

from __future__ import annotations

import pytest

from extractor.net.errors import OutboundRefused
from extractor.net.ssrf import OutboundPolicy, host_syntax_problem


@pytest.mark.parametrize(
    ("url", "why"),
    [
        ("http://hooks.example.com:65536/x", "ports are 1-65535"),
        ("http://hooks.example.com:0/x", "ports are 1-65535"),
        ("https://hooks.example.com:99999999/", "ports are 1-65535"),
        ("ftp://hooks.example.com/x", "only http and https"),
        ("file:///etc/passwd", "only http and https"),
        ("gopher://hooks.example.com/", "only http and https"),
        ("http:///hook", "without a host"),
        ("http://user:pw@hooks.example.com/", "user:password"),
        ("http://a b.example/", "not a host name"),
        ("http://-bad-.example/", "not a host name"),
        ("http://a..b/", "not a host name"),
        ("http://.example/", "not a host name"),
        ("http://127.1/", "non-standard form"),
        ("http://0x7f.1/", "non-standard form"),
        ("http://2130706433/", "non-standard form"),
        ("http://017700000001/", "non-standard form"),
        ("http://metadata.google.internal/", "cloud metadata"),
    ],
)
def test_a_url_that_is_not_fully_valid_is_refused(url: str, why: str) -> None:
    with pytest.raises(OutboundRefused, match=why):
        OutboundPolicy().check_url(url)


@pytest.mark.parametrize(
    "url",
    [
        "https://hooks.example.com/a/b?c=d",
        "http://hooks.example.com:1/",
        "http://hooks.example.com:65535/",
        "https://hooks.example.com./x",  # the root's dot
        "http://xn--bcher-kva.example/",
        "http://bücher.example/",  # sent as its punycode
        "http://under_score.example/",
        "http://1e100.net/",
        "http://203.0.113.7:8080/hook",
        "http://[2001:db8::1]:8443/hook",
    ],
)
def test_a_well_formed_url_passes_the_syntax_checks(url: str) -> None:
    assert OutboundPolicy().check_url(url).host


def test_only_a_canonical_address_is_an_address() -> None:
    assert host_syntax_problem("10.0.0.1") is None
    assert host_syntax_problem("::1") is None
    assert host_syntax_problem("10.1") is not None

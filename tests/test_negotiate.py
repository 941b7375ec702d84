"""The Accept / ?format= negotiation matrix, for image and audio documents."""

from __future__ import annotations

import pytest

from extractor.errors import InvalidParameter, NotAcceptable
from extractor.pipeline.negotiate import choose_format, parse_accept


@pytest.mark.parametrize(
    ("accept", "default", "audio", "expected"),
    [
        ("application/json, text/plain", "json", False, "json"),  # the platform's header
        ("application/json, text/plain", "text", False, "text"),  # a tie: the configured default
        (None, "json", False, "json"),
        ("", "text", False, "text"),
        ("*/*", "json", False, "json"),
        ("*/*", "text", True, "text"),
        ("text/plain", "json", False, "text"),
        ("application/json", "text", False, "json"),
        ("text/plain;q=0.5, application/json;q=0.9", "text", False, "json"),
        ("application/json;q=0.1, text/plain", "json", False, "text"),
        ("text/*", "json", False, "text"),
        ("application/*", "text", False, "json"),
        ("*/*;q=0.1, text/plain;q=0", "text", False, "json"),  # explicit refusal beats */*
        ("text/html, */*;q=0.8", "json", False, "json"),
        ("text/vtt", "json", True, "vtt"),
        ("application/x-subrip", "json", True, "srt"),
        ("text/vtt, application/json;q=0.5", "json", True, "vtt"),
        ("TEXT/PLAIN", "json", False, "text"),
        ("application/json; charset=utf-8", "text", False, "json"),
        ("garbage", "text", False, "text"),  # unparseable: as if absent
        ("text/plain;q=abc", "json", False, "text"),  # a broken q counts as 1
    ],
)
def test_accept_matrix(accept: str | None, default: str, audio: bool, expected: str) -> None:
    assert choose_format(accept, None, default, audio=audio).name == expected


@pytest.mark.parametrize(
    ("accept", "audio"),
    [
        ("text/html", False),
        ("application/xml, image/*", False),
        ("application/json;q=0, text/plain;q=0", False),
        ("text/vtt", False),  # subtitles only exist for audio
        ("application/x-subrip", False),
    ],
)
def test_nothing_acceptable(accept: str, audio: bool) -> None:
    with pytest.raises(NotAcceptable):
        choose_format(accept, None, "json", audio=audio)


@pytest.mark.parametrize(
    ("param", "audio", "expected"),
    [
        ("json", False, "json"),
        ("text", False, "text"),
        ("TEXT", True, "text"),
        ("srt", True, "srt"),
    ],
)
def test_format_parameter_overrides_accept(param: str, audio: bool, expected: str) -> None:
    assert choose_format("text/html", param, "json", audio=audio).name == expected


@pytest.mark.parametrize(("param", "audio"), [("xml", False), ("vtt", False), ("", True)])
def test_bad_format_parameter(param: str, audio: bool) -> None:
    if param == "":
        assert choose_format(None, param, "json", audio=audio).name == "json"  # empty: unset
        return
    with pytest.raises(InvalidParameter):
        choose_format(None, param, "json", audio=audio)


def test_parse_accept_reads_q_values_and_order() -> None:
    ranges = parse_accept("text/plain;q=0.4, application/json , */*;q=0.1")
    assert [(r.type, r.subtype, r.q, r.position) for r in ranges] == [
        ("text", "plain", 0.4, 0),
        ("application", "json", 1.0, 1),
        ("*", "*", 0.1, 2),
    ]

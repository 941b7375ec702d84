"""Property tests of Accept negotiation: any header gives a format or a 4xx, and chooses sensibly."""

from __future__ import annotations

import contextlib

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from extractor.errors import InvalidParameter, NotAcceptable
from extractor.pipeline.negotiate import choose_format, parse_accept
from extractor.replies.formats import FORMATS, JSON, ReplyFormat, formats_for
from extractor.replies.importable import DocumentKind

OFFERED_TYPES = [f.essence for f in FORMATS.values()]
OTHER_TYPES = ["image/png", "text/html", "application/xml", "application/msword", "audio/wav"]
WILDCARDS = ["*/*", "text/*", "application/*"]
# q tokens a client (or an attacker) may send: well-formed, out of range, and not numbers.
Q_TOKENS = ["1", "0", "0.5", "0.001", "1.000", "2", "-1", "abc", "", " 0.7 ", "1e-3", "inf"]
NOT_FINITE = ["nan", "NaN", "-nan"]

media_ranges = st.sampled_from([*OFFERED_TYPES, *OTHER_TYPES, *WILDCARDS])
params = st.lists(
    st.one_of(
        st.sampled_from(Q_TOKENS).map(lambda q: f"q={q}"),
        st.sampled_from(["charset=utf-8", "level=1", "q", "=", ";;"]),
        st.text(max_size=8),
    ),
    max_size=3,
)
ranges = st.tuples(st.one_of(media_ranges, st.text(max_size=12)), params).map(
    lambda r: ";".join([r[0], *r[1]])
)
# Headers shaped like real ones (ranges, parameters, q-values), and anything at all.
accept_headers = st.one_of(
    st.lists(ranges, max_size=6).map(", ".join),
    st.text(max_size=200),
)


def _kind(audio: bool) -> DocumentKind:
    return DocumentKind.AUDIO if audio else DocumentKind.OCR


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=300))
def test_parse_accept_takes_any_text(header: str) -> None:
    for r in parse_accept(header):
        assert 0.0 <= r.q <= 1.0
        assert r.type and r.subtype


@settings(max_examples=400, deadline=None)
@given(
    accept=st.one_of(st.none(), accept_headers),
    format_param=st.one_of(st.none(), st.sampled_from([*FORMATS, "JSON", "Srt"]), st.text()),
    default=st.sampled_from(["json", "text"]),
    audio=st.booleans(),
)
def test_choose_format_answers_a_format_or_a_client_error(
    accept: str | None, format_param: str | None, default: str, audio: bool
) -> None:
    try:
        chosen = choose_format(accept, format_param, default, audio=audio)
    except (NotAcceptable, InvalidParameter) as error:
        assert 400 <= error.status < 500
        return
    assert chosen in FORMATS.values()
    assert chosen in formats_for(_kind(audio)), "a format is offered only for what it fits"


@settings(max_examples=50, deadline=None)
@given(q=st.sampled_from(NOT_FINITE), audio=st.booleans())
@example(q="nan", audio=False)
def test_not_a_number_q_is_a_client_choice_not_a_crash(q: str, audio: bool) -> None:
    with contextlib.suppress(NotAcceptable):
        choose_format(f"application/json;q={q}", None, "json", audio=audio)


def _accept(qualities: dict[str, int]) -> str:
    return ", ".join(f"{media_type};q={q / 1000:.3f}" for media_type, q in qualities.items())


@settings(max_examples=300, deadline=None)
@given(
    data=st.data(),
    audio=st.booleans(),
    default=st.sampled_from(["json", "text"]),
    wildcards=st.lists(st.sampled_from(WILDCARDS), max_size=3, unique=True),
)
def test_json_wins_when_it_has_the_strictly_highest_q(
    data: st.DataObject, audio: bool, default: str, wildcards: list[str]
) -> None:
    offered = formats_for(_kind(audio))
    json_q = data.draw(st.integers(1, 1000), label="json q (thousandths)")
    qualities = {"application/json": json_q}
    for f in offered:
        if f is not JSON:
            qualities[f.essence] = data.draw(st.integers(0, json_q - 1))
    # Wildcards never outrank an exact range, so any q on them changes nothing.
    for wildcard in wildcards:
        qualities[wildcard] = data.draw(st.integers(0, 1000))
    order = data.draw(st.permutations(list(qualities)))
    header = _accept({media_type: qualities[media_type] for media_type in order})
    assert choose_format(header, None, default, audio=audio) is JSON


@settings(max_examples=200, deadline=None)
@given(
    chosen=st.sampled_from(list(FORMATS.values())),
    header=st.one_of(st.none(), accept_headers),
    audio=st.booleans(),
)
def test_format_parameter_wins_over_any_accept(
    chosen: ReplyFormat, header: str | None, audio: bool
) -> None:
    name = chosen.name
    if not chosen.fits(_kind(audio)):
        with pytest.raises(InvalidParameter):
            choose_format(header, name, "json", audio=audio)
    else:
        assert choose_format(header, name.upper(), "json", audio=audio) is chosen


@settings(max_examples=200, deadline=None)
@given(
    header=st.lists(st.sampled_from(OTHER_TYPES), min_size=1, max_size=4).map(", ".join),
    audio=st.booleans(),
)
def test_only_types_we_cannot_make_is_not_acceptable(header: str, audio: bool) -> None:
    with pytest.raises(NotAcceptable):
        choose_format(header, None, "json", audio=audio)


@settings(max_examples=100, deadline=None)
@given(header=st.sampled_from(["", " ", "*/*", "garbage", ",,,"]), audio=st.booleans())
def test_an_open_choice_goes_to_the_default(header: str, audio: bool) -> None:
    for default in ("json", "text"):
        assert choose_format(header, None, default, audio=audio) is FORMATS[default]

"""A job's options: the text the client sent (query parameters or form fields), read into the
one request model of every entrance (``pipeline.request``) at submit time (a bad option is a
400 there, as on ``/extract``) and again when the job runs (so a job's options mean on any
server what they meant to ``/extract``)."""

from __future__ import annotations

from collections.abc import Mapping

from extractor.pipeline.request import OPTIONS, ExtractionRequest, Limits, read_request

# The options a job keeps as it was sent: every extraction option but the reply format, which
# the job keeps on its own (the result's default format, checked against the upload's kind).
OPTION_NAMES = tuple(option.name for option in OPTIONS if option.name != "format")


def option_text(fields: Mapping[str, str]) -> dict[str, str]:
    """The options among a request's text fields, as sent."""
    return {name: fields[name] for name in OPTION_NAMES if fields.get(name)}


def parse_options(text: Mapping[str, str], limits: Limits) -> ExtractionRequest:
    """The extraction request ``text`` asks for (``InvalidParameter`` when an option is bad)."""
    return read_request(text, limits)

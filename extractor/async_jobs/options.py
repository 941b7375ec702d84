"""A job's options: the text the client sent (query parameters or form fields), read by the same
code as ``POST /extract``, at submit time (a bad option is a 400 there) and again when the job
runs (so a job's options mean what they meant to that code, whichever server runs it)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from extractor.config import Settings
from extractor.pipeline.extraction import ExtractOptions

if TYPE_CHECKING:
    from extractor.async_jobs.work import ExtractionWork

# The names a job keeps of what a client sent: every option /extract reads (the rest of the
# text, such as callback_url, is the job's own).
OPTION_NAMES = (
    "language",
    "speakers",
    "num_speakers",
    "min_speakers",
    "max_speakers",
    "words",
    "ocr_languages",
    "ocr_rotate",
)


def option_text(fields: Mapping[str, str]) -> dict[str, str]:
    """The options among a request's text fields, as sent."""
    return {name: fields[name] for name in OPTION_NAMES if fields.get(name)}


def parse_options(
    text: Mapping[str, str], format: str | None, settings: Settings, work: ExtractionWork
) -> ExtractOptions:
    """The extraction options ``text`` asks for (``InvalidParameter`` when one is bad)."""
    from extractor.web.views import (
        extract_options,  # the web layer's reader, until the request model
    )

    del format  # negotiated when the result is read
    return extract_options(text, work.extractor, settings)

"""A job's options: read from the client's text (query parameters or form fields) into the one
request model of every entrance (``pipeline.request``) at submit time, so a bad option is the
400 ``/extract`` gives; kept as the request's ``given()`` values and made into the same
``ExtractionRequest`` again when the job runs, on whichever server."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from extractor.pipeline.request import ExtractionRequest, Limits, read_request


def read_options(fields: Mapping[str, str], limits: Limits) -> ExtractionRequest:
    """The request the text ``fields`` asks for (``InvalidParameter`` naming a bad option)."""
    return read_request(fields, limits)


def stored_options(request: ExtractionRequest) -> dict[str, Any]:
    """What a job keeps of ``request``: the options given, as JSON values, but the reply format
    (the job keeps that apart: the result's default format)."""
    given = request.given()
    given.pop("format", None)
    return given


def job_request(options: Mapping[str, Any]) -> ExtractionRequest:
    """The request a job's stored options make."""
    return ExtractionRequest(**options)

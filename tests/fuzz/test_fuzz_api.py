"""Fuzzing the real app (real engines, one app for the module) through its OpenAPI document.

Schemathesis sends what the document allows and what it nearly allows; Hypothesis sends
damaged real files. Whatever comes in: no 5xx, every reply as documented, no temporary file
left behind, and afterwards the worker still answers a normal request.
"""

from __future__ import annotations

import io
import logging
from collections.abc import Iterator
from pathlib import Path

import pytest
import schemathesis
from flask import Flask
from fuzzing import damaged_files
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from extractor import samples
from extractor.web.app import create_app
from extractor.web.openapi import load_openapi

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")  # Pillow on damaged files

schema = schemathesis.openapi.from_dict(load_openapi())
# What the issue asks of any input: no server error, and replies as documented. Strictness
# about rejecting near-valid input (negative_data_rejection) is left out on purpose: the app
# reads `?format=JSON` and `?words=1` leniently, and that is a choice, not a fault.
CHECKS = [
    schemathesis.checks.not_a_server_error,
    schemathesis.checks.status_code_conformance,
    schemathesis.checks.content_type_conformance,
    schemathesis.checks.response_headers_conformance,
    schemathesis.checks.response_schema_conformance,
]
ACCEPT_HEADERS = [
    "application/json, text/plain",  # what the platform sends
    "application/json",
    "text/plain",
    "text/vtt",
    "application/x-subrip;q=0.9, text/plain;q=0.1",
    "*/*",
    "image/png",
]
QUERIES = ["", "?format=text", "?speakers=channels", "?words=true&language=en", "?format=srt"]
EVERYTHING_ENDED_IN = 60  # seconds a normal request may take after the run: an engine hang


class ErrorLog(logging.Handler):
    """Keeps the exceptions the app logs with its 500s, to tell reported bugs from new ones."""

    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.exceptions: list[BaseException] = []

    def emit(self, record: logging.LogRecord) -> None:
        if record.exc_info and record.exc_info[1] is not None:
            self.exceptions.append(record.exc_info[1])


@pytest.fixture(scope="module")
def scratch(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("fuzz-requests")


@pytest.fixture(scope="module")
def error_log() -> Iterator[ErrorLog]:
    handler = ErrorLog()
    logger = logging.getLogger("extractor")
    logger.addHandler(handler)
    yield handler
    logger.removeHandler(handler)


@pytest.fixture(scope="module")
def fuzz_app(scratch: Path, error_log: ErrorLog) -> Iterator[Flask]:
    """One app for the whole module, engines loaded first as gunicorn's worker hook does."""
    app = create_app({"tmp_dir": str(scratch), "max_pages": 4, "max_audio_seconds": 60})
    app.extensions["extractor"].load()
    yield app
    app.extensions["extractor"].close()


@pytest.mark.slow  # many generated requests: make test runs it, make test-fast does not
@schema.parametrize()
@settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
def test_any_request_gets_a_documented_reply(case: schemathesis.Case, fuzz_app: Flask) -> None:
    case.call_and_validate(app=fuzz_app, checks=CHECKS)


@pytest.mark.slow  # many generated requests: make test runs it, make test-fast does not
@settings(max_examples=80, deadline=None, suppress_health_check=list(HealthCheck))
@given(
    named=damaged_files(), accept=st.sampled_from(ACCEPT_HEADERS), query=st.sampled_from(QUERIES)
)
def test_damaged_files_get_a_result_or_a_4xx(
    named: tuple[str, bytes], accept: str, query: str, fuzz_app: Flask, error_log: ErrorLog
) -> None:
    name, data = named
    error_log.exceptions.clear()
    reply = fuzz_app.test_client().post(
        "/extract" + query,
        data={"upload": (io.BytesIO(data), f"damaged.{name}")},
        headers={"Accept": accept},
        content_type="multipart/form-data",
    )
    assert reply.status_code < 500, (reply.status_code, reply.get_json(), error_log.exceptions)
    responses = load_openapi()["paths"]["/extract"]["post"]["responses"]
    assert str(reply.status_code) in responses


@pytest.mark.timeout(EVERYTHING_ENDED_IN)
def test_worker_still_answers_after_the_fuzzing(fuzz_app: Flask, scratch: Path) -> None:
    """Runs after the fuzzing (file order): no engine slot is stuck, no temp file is left."""
    gate = fuzz_app.extensions["extractor"].gate
    assert gate.pending == 0, "an extraction is still holding an engine slot"
    page = samples.text_page(["Still answering"], size=(400, 80), font_size=28, margin=10)
    reply = fuzz_app.test_client().post(
        "/extract",
        data={"upload": (io.BytesIO(samples.encode_image(page.image, "PNG")), "page.png")},
        headers={"Accept": "text/plain"},
        content_type="multipart/form-data",
    )
    assert reply.status_code == 200
    assert "answering" in reply.get_data(as_text=True).lower()
    assert fuzz_app.test_client().get("/readyz").status_code == 200
    assert list(scratch.iterdir()) == [], "a request left temporary files behind"

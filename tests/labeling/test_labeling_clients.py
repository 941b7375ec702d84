"""Every outbound failure is translated, at one boundary, into a JobFailure that a user can read
and that never carries a secret or a credential from the URL."""

from __future__ import annotations

import inspect
from typing import Any

import pytest

from extractor.labeling import outbound
from extractor.labeling.clients import ExtractorClient, describe, redact_url
from extractor.labeling.config import LabelingSettings
from extractor.labeling.errors import JobFailure

OUTBOUND_ERRORS = [
    cls
    for _, cls in inspect.getmembers(outbound, inspect.isclass)
    if issubclass(cls, outbound.OutboundError)
]
URL = "https://user:pa55word@api.example.com:8443/v1/predict?token=t0ken"


def instance(cls: type[outbound.OutboundError]) -> outbound.OutboundError:
    if cls is outbound.OutboundHTTPStatus:
        return cls(
            "POST https://api.example.com:8443/v1/predict answered 502", status=502, body=b"x"
        )
    if cls is outbound.OutboundReplyTooLarge:
        return cls("reply too large", limit=10)
    return cls("something broke")


class Raising:
    """A stand-in outbound client that fails every call with one error."""

    def __init__(self, error: Exception) -> None:
        self.error = error

    def post_file(self, *args: Any, **kwargs: Any) -> Any:
        raise self.error

    def post_json(self, *args: Any, **kwargs: Any) -> Any:
        raise self.error

    def close(self) -> None:
        pass


def test_the_list_of_outbound_errors_is_complete() -> None:
    assert len(OUTBOUND_ERRORS) >= 6


@pytest.mark.parametrize("cls", OUTBOUND_ERRORS, ids=lambda cls: cls.__name__)
def test_every_outbound_error_becomes_a_readable_job_failure(
    cls: type[outbound.OutboundError],
) -> None:
    client = ExtractorClient(LabelingSettings(), client=Raising(instance(cls)))
    for call in (
        lambda: client.extract(URL, "a.png", b"x", "s3cret"),
        lambda: client.predict(URL, {"documents": []}, "s3cret"),
    ):
        with pytest.raises(JobFailure) as caught:
            call()
        text = f"{caught.value.message} {caught.value.details}"
        assert "api.example.com:8443/v1/predict" in text
        assert "pa55word" not in text and "t0ken" not in text and "s3cret" not in text
    if cls is not outbound.OutboundError:
        assert not describe(instance(cls), "the API", URL).startswith("calling")


def test_redacted_urls_keep_where_but_not_who() -> None:
    assert redact_url(URL) == "https://api.example.com:8443/v1/predict"
    assert redact_url("http://[::1]:9/x") == "http://[::1]:9/x"
    assert redact_url("http://[bad") == "(invalid URL)"

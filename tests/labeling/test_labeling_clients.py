"""Every outbound failure is translated, at one boundary, into a JobFailure that a user can read
and that never carries a secret or a credential from the URL."""

from __future__ import annotations

import inspect
from typing import Any

import pytest

from extractor.config import LabelingSettings
from extractor.labeling import outbound
from extractor.labeling.clients import ExtractorClient, describe, redact_url
from extractor.labeling.credentials import SecretBox, new_key, seal_field
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
    box = SecretBox([new_key()], "test key")
    client = ExtractorClient(LabelingSettings(), client=Raising(instance(cls)), secrets=box)
    for call in (
        lambda: client.extract(URL, "a.png", b"x", box.seal("s3cret")),
        lambda: client.predict(URL, {"documents": []}, seal_field(box, "s3cret")),
    ):
        with pytest.raises(JobFailure) as caught:
            call()
        text = f"{caught.value.message} {caught.value.details}"
        assert "api.example.com:8443/v1/predict" in text
        assert "pa55word" not in text and "t0ken" not in text and "s3cret" not in text
    text = describe(instance(cls), "the API", URL, "ref123")
    if cls in (outbound.OutboundHTTPStatus, outbound.OutboundReplyTooLarge):
        assert "ref123" not in text  # the server answered: the user is told what it said
    else:
        assert text == (
            "cannot reach the API at https://api.example.com:8443/v1/predict: it is not allowed "
            "from this service or did not answer (the service's log has the details under "
            "reference ref123)"
        )


def test_users_cannot_tell_a_refusal_from_a_timeout_but_the_log_can(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A port scanner needs to tell refused, closed and filtered apart; the user sees one story."""
    seen: list[tuple[str, dict[str, Any]]] = []
    for error in (
        outbound.OutboundRefused("refusing 10.0.0.5 (private) for host a.test, http port 22"),
        outbound.OutboundTimeout("connecting for POST http://10.0.0.5:22/ timed out"),
        outbound.OutboundConnectError("cannot connect for POST http://10.0.0.5:22/: refused"),
        outbound.OutboundError("POST http://10.0.0.5:22/ redirected more than 5 times"),
    ):
        client = ExtractorClient(LabelingSettings(), client=Raising(error))
        with pytest.raises(JobFailure) as caught:
            client.predict("http://a.test:22/", {"documents": []}, "s3cret")
        reference = caught.value.details.pop("reference")
        assert f"reference {reference}" in caplog.text and str(error) in caplog.text
        seen.append((caught.value.message.replace(reference, "REF"), caught.value.details))
        assert "10.0.0.5" not in caught.value.message
    assert all(one == seen[0] for one in seen)


def test_redacted_urls_keep_where_but_not_who() -> None:
    assert redact_url(URL) == "https://api.example.com:8443/v1/predict"
    assert redact_url("http://[::1]:9/x") == "http://[::1]:9/x"
    assert redact_url("http://[bad") == "(invalid URL)"

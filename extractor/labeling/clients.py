"""Our two outbound calls (custom extractor, prediction API) on top of ``outbound``.

Outbound errors are translated here, at one boundary, into :class:`JobFailure` messages that
name the API and URL (credentials removed) but never a secret.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from extractor.labeling import outbound
from extractor.labeling.config import LabelingSettings
from extractor.labeling.errors import JobFailure

REPLY_EXCERPT = 300  # bytes of an error reply kept in the job's error, for diagnosis


def redact_url(url: str) -> str:
    """The URL without user:password and query string, fit for a job error or a log line."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return "(invalid URL)"
    host = parts.hostname or ""
    if ":" in host:
        host = f"[{host}]"
    netloc = f"{host}:{parts.port}" if parts.port else host
    return urlunsplit((parts.scheme, netloc, parts.path, "", ""))


@dataclass(frozen=True)
class Reply:
    """A successful reply: its media type (no parameters), charset if given, and body."""

    content_type: str
    charset: str | None
    content: bytes

    def json(self, what: str) -> Any:
        """The body as JSON, or a JobFailure saying ``what`` sent garbage."""
        try:
            return json.loads(self.content)
        except (UnicodeDecodeError, ValueError) as exc:
            raise JobFailure(f"{what} replied a body that is not JSON") from exc


def _charset(headers: Any) -> str | None:
    """The ``charset`` parameter of the reply's Content-Type header, if any."""
    raw = ""
    try:
        raw = headers.get("content-type") or ""
    except AttributeError:
        return None
    for parameter in raw.split(";")[1:]:
        key, _, value = parameter.strip().partition("=")
        if key.strip().lower() == "charset" and value.strip():
            return value.strip().strip('"')
    return None


def describe(error: outbound.OutboundError, what: str, url: str) -> str:
    """A sentence for the job's user about an outbound failure."""
    where = redact_url(url)
    if isinstance(error, outbound.OutboundRefused):
        return f"{what} at {where} is not allowed: {error} (see EXTRACTOR_LABELING_OUTBOUND_ALLOW)"
    if isinstance(error, outbound.OutboundTimeout):
        return f"{what} at {where} did not answer in time: {error}"
    if isinstance(error, outbound.OutboundConnectError):
        return f"cannot reach {what} at {where}: {error}"
    if isinstance(error, outbound.OutboundHTTPStatus):
        return f"{what} at {where} answered HTTP {error.status}"
    if isinstance(error, outbound.OutboundReplyTooLarge):
        return f"{what} at {where} sent a reply larger than allowed: {error}"
    return f"calling {what} at {where} failed: {error}"


def details(error: outbound.OutboundError) -> dict[str, Any]:
    """Machine-readable facts of an outbound failure for ``JobError.args``."""
    if isinstance(error, outbound.OutboundHTTPStatus):
        excerpt = error.body[:REPLY_EXCERPT].decode("utf-8", errors="replace")
        return {"status": error.status, "reply": excerpt}
    return {"error": type(error).__name__}


class ExtractorClient:
    """Calls custom extractors and prediction APIs under the deployment's SSRF policy."""

    def __init__(self, settings: LabelingSettings, client: Any | None = None) -> None:
        self.settings = settings
        self.client = client or build_outbound_client(settings)
        # Prediction APIs answer one batch in seconds: their own timeouts, not an extractor's.
        self.prediction_client = client or build_outbound_client(settings, prediction=True)

    def close(self) -> None:
        """Close pooled connections."""
        self.client.close()
        if self.prediction_client is not self.client:
            self.prediction_client.close()

    def extract(self, url: str, filename: str, data: bytes, secret: str | None) -> Reply:
        """POST one file as multipart ``upload`` to a custom extractor."""
        what = "the custom extraction API"
        try:
            reply = self.client.post_file(url, filename, data, secret=secret)
        except ValueError as exc:  # a secret that cannot travel in a header (never quoted)
            raise JobFailure(f"the secret of {what} cannot be sent in an HTTP header") from exc
        except outbound.OutboundError as exc:
            raise JobFailure(
                describe(exc, what, url), url=redact_url(url), document=filename
            ) from exc
        return self._checked(reply, what, url, document=filename)

    def predict(self, url: str, payload: dict[str, Any], secret: str) -> Reply:
        """POST one signed batch to a prediction API."""
        what = "the prediction API"
        try:
            reply = self.prediction_client.post_json(url, payload, secret=secret)
        except ValueError as exc:  # a secret that cannot travel in a header (never quoted)
            raise JobFailure(f"the secret of {what} cannot be sent in an HTTP header") from exc
        except outbound.OutboundError as exc:
            raise JobFailure(describe(exc, what, url), url=redact_url(url), **details(exc)) from exc
        return self._checked(reply, what, url)

    @staticmethod
    def _checked(reply: Any, what: str, url: str, **details: Any) -> Reply:
        status = int(reply.status)
        if not 200 <= status < 300:
            raise JobFailure(
                f"{what} at {redact_url(url)} answered HTTP {status}",
                url=redact_url(url),
                status=status,
                **details,
            )
        return Reply(
            content_type=(reply.content_type or "").lower(),
            charset=_charset(reply.headers),
            content=bytes(reply.content),
        )


def build_outbound_client(settings: LabelingSettings, *, prediction: bool = False) -> Any:
    """The outbound client configured from our settings (``prediction``: its own timeouts)."""
    policy = outbound.OutboundPolicy.from_allow_string(settings.outbound_allow)
    options = outbound.OutboundSettings(
        connect_timeout=settings.outbound_connect_timeout,
        read_timeout=settings.outbound_read_timeout,
        total_timeout=settings.outbound_total_timeout,
        backoff_base=settings.outbound_backoff_seconds,
        max_reply_bytes=settings.outbound_max_reply_bytes,
        retries=settings.outbound_retries,
    )
    if prediction:
        options = replace(
            options,
            connect_timeout=settings.prediction_connect_timeout,
            read_timeout=settings.prediction_read_timeout,
            total_timeout=settings.prediction_total_timeout,
        )
    return outbound.OutboundClient(policy, options)

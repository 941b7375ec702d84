"""Our two outbound calls (custom extractor, prediction API) on top of ``outbound``.

Outbound errors are translated here, at one boundary, into :class:`JobFailure` messages that
name the API and URL (credentials removed) but never a secret.
"""

from __future__ import annotations

import logging
import uuid
from dataclasses import dataclass, replace
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from extractor.config import LabelingSettings
from extractor.labeling import outbound
from extractor.labeling.credentials import SEALED_PREFIX, SecretBox
from extractor.labeling.errors import JobFailure, SecretsUnavailableError
from extractor.labeling.metrics import count_call
from extractor.labeling.reply_json import ReplyLimits, parse_reply_json

log = logging.getLogger(__name__)

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

    def json(self, what: str, limits: ReplyLimits) -> Any:
        """The body as JSON, measured against ``limits`` before it is parsed; a
        :class:`~extractor.labeling.reply_json.ReplyRefused` (a JobFailure) says what ``what``
        sent wrong, where, and which limit it crossed."""
        return parse_reply_json(self.content, limits, what)


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


def describe(error: outbound.OutboundError, what: str, url: str, reference: str) -> str:
    """A sentence for the job's user about an outbound failure.

    A server that answered is reported as such; every other failure gets one generic sentence,
    whatever it was (refused by the policy, refused by the host, timed out, redirected away):
    telling them apart would name internal addresses and make the service a port scanner. The
    detail goes to the log under ``reference``, which the sentence quotes for the operator.
    """
    where = redact_url(url)
    if isinstance(error, outbound.OutboundHTTPStatus):
        return f"{what} at {where} answered HTTP {error.status}"
    if isinstance(error, outbound.OutboundReplyTooLarge):
        return f"{what} at {where} sent a reply larger than allowed ({error.limit} bytes)"
    return (
        f"cannot reach {what} at {where}: it is not allowed from this service or did not answer "
        f"(the service's log has the details under reference {reference})"
    )


def details(error: outbound.OutboundError, reference: str) -> dict[str, Any]:
    """Machine-readable facts of an outbound failure for ``JobError.args``."""
    if isinstance(error, outbound.OutboundHTTPStatus):
        excerpt = error.body[:REPLY_EXCERPT].decode("utf-8", errors="replace")
        return {"status": error.status, "reply": excerpt}
    return {"reference": reference}


def failure(error: outbound.OutboundError, what: str, url: str, **facts: Any) -> JobFailure:
    """The JobFailure a user sees for ``error``; the full story is logged under a reference."""
    reference = uuid.uuid4().hex[:12]
    log.warning("%s at %s failed (reference %s): %s", what, redact_url(url), reference, error)
    return JobFailure(
        describe(error, what, url, reference),
        url=redact_url(url),
        **facts,
        **details(error, reference),
    )


def outcome(error: outbound.OutboundError) -> str:
    """How a failed call is counted in ``labeling_outbound_calls_total``."""
    for kind, name in (
        (outbound.OutboundRefused, "refused"),
        (outbound.OutboundTimeout, "timeout"),
        (outbound.OutboundHTTPStatus, "http_error"),
        (outbound.OutboundReplyTooLarge, "bad_reply"),
    ):
        if isinstance(error, kind):
            return name
    return "error"


class ExtractorClient:
    """Calls custom extractors and prediction APIs under the deployment's SSRF policy."""

    def __init__(
        self,
        settings: LabelingSettings,
        client: Any | None = None,
        *,
        secrets: SecretBox | None = None,
    ) -> None:
        self.settings = settings
        self.client = client or build_outbound_client(settings)
        # Prediction APIs answer one batch in seconds: their own timeouts, not an extractor's.
        self.prediction_client = client or build_outbound_client(settings, prediction=True)
        # Opens custom API secrets, which are stored sealed.
        self.secrets = secrets

    def close(self) -> None:
        """Close pooled connections."""
        self.client.close()
        if self.prediction_client is not self.client:
            self.prediction_client.close()

    def extract(self, url: str, filename: str, data: bytes, sealed_secret: str | None) -> Reply:
        """POST one file as multipart ``upload`` to a custom extractor, with its secret (stored
        sealed, opened only here, for the call)."""
        what = "the custom extraction API"
        secret = None if sealed_secret is None else self._open(sealed_secret, what)
        try:
            reply = self.client.post_file(url, filename, data, secret=secret)
        except ValueError as exc:  # a secret that cannot travel in a header (never quoted)
            raise JobFailure(f"the secret of {what} cannot be sent in an HTTP header") from exc
        except outbound.OutboundError as exc:
            count_call("extractor", outcome(exc))
            raise failure(exc, what, url, document=filename) from exc
        return self._checked(reply, what, url, "extractor", document=filename)

    def predict(self, url: str, payload: dict[str, Any], secret: str) -> Reply:
        """POST one signed batch to a prediction API; ``secret`` is sealed (``seal_field``), or
        in clear in a job queued before secrets were sealed."""
        what = "the prediction API"
        if secret.startswith(SEALED_PREFIX):
            secret = self._open(secret.removeprefix(SEALED_PREFIX), what)
        try:
            reply = self.prediction_client.post_json(url, payload, secret=secret)
        except ValueError as exc:  # a secret that cannot travel in a header (never quoted)
            raise JobFailure(f"the secret of {what} cannot be sent in an HTTP header") from exc
        except outbound.OutboundError as exc:
            count_call("prediction", outcome(exc))
            raise failure(exc, what, url) from exc
        return self._checked(reply, what, url, "prediction")

    def _open(self, sealed_secret: str, what: str) -> str:
        if self.secrets is None:
            raise JobFailure(f"the secret of {what} cannot be read: this service has no key")
        try:
            return self.secrets.open(sealed_secret)
        except SecretsUnavailableError as exc:
            log.error("%s", exc)
            raise JobFailure(
                f"the secret of {what} cannot be read with this service's keys"
            ) from exc

    @staticmethod
    def _checked(reply: Any, what: str, url: str, target: str, **details: Any) -> Reply:
        status = int(reply.status)
        count_call(target, "ok" if 200 <= status < 300 else "http_error")
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
    policy = outbound.OutboundPolicy.from_allow_string(
        settings.outbound_allow, outbound.ALLOW_ENV_VAR
    )
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
    return outbound.LabelingClient(policy, options)

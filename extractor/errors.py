"""Every failure a client can cause, as one class each: a status, a code and a message.

The HTTP layer turns any ``ExtractorError`` into ``{"error": {"code", "message"}}`` with its
status; engines and decoders raise these (translating third-party exceptions at their
boundary) and know nothing of HTTP.
"""

from __future__ import annotations

import errno


class ExtractorError(Exception):
    """Base of every error the service reports to a client."""

    status: int = 500
    code: str = "internal_error"
    headers: dict[str, str] = {}

    def __init__(
        self, message: str, *, headers: dict[str, str] | None = None, param: str | None = None
    ) -> None:
        super().__init__(message)
        self.message = message
        self.headers = dict(headers or self.headers)
        self.param = param  # the request option or form field at fault, when one is

    def to_json(self) -> dict[str, dict[str, str]]:
        return {"error": {"code": self.code, "message": self.message}}


class MissingUpload(ExtractorError):
    status, code = 400, "missing_upload"


class EmptyUpload(ExtractorError):
    status, code = 400, "empty_upload"


class InvalidParameter(ExtractorError):
    status, code = 400, "invalid_parameter"


class Unauthorized(ExtractorError):
    status, code = 401, "unauthorized"
    headers = {"WWW-Authenticate": 'Bearer realm="extractor"'}


class NotAcceptable(ExtractorError):
    status, code = 406, "not_acceptable"


class PayloadTooLarge(ExtractorError):
    status, code = 413, "payload_too_large"


class TooManyPages(PayloadTooLarge):
    code = "too_many_pages"


class AudioTooLong(PayloadTooLarge):
    code = "audio_too_long"


class SpeakerAudioTooLong(PayloadTooLarge):
    """``speakers=auto`` on audio longer than ``EXTRACTOR_SPEAKERS_MAX_SECONDS``."""

    code = "speaker_audio_too_long"


class UnsupportedMedia(ExtractorError):
    status, code = 415, "unsupported_media_type"


class ServiceBusy(ExtractorError):
    status, code = 503, "busy"


class SpeakersUnavailable(ExtractorError):
    """``speakers=auto`` on a server without the ``extractor[speakers]`` extra installed."""

    status, code = 501, "speakers_unavailable"


class InsufficientStorage(ExtractorError):
    """The server's temporary folder (its disk or quota) is full: a passing state, not the
    client's fault; the worker goes on and the client may try again."""

    status, code = 507, "insufficient_storage"
    headers = {"Retry-After": "30"}

    @classmethod
    def of(cls, exc: OSError) -> InsufficientStorage:
        return cls(
            f"the server has no room for this request's files now ({exc.strerror or exc});"
            f" try again in {cls.headers['Retry-After']} s"
        )


# The OSError numbers that mean "no room": a full disk, a full quota.
NO_ROOM_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT})


class EngineUnavailable(ExtractorError):
    status, code = 503, "engine_unavailable"


class EngineTimeout(ExtractorError):
    status, code = 504, "engine_timeout"


class EngineFailure(ExtractorError):
    """The engine failed on input that decoded fine: our fault, reported without internals."""

    status, code = 500, "engine_failure"

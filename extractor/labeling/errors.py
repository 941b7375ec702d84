"""The labeling service's errors: one base, each subclass a GraphQL ``code`` and ``type``.

Resolvers raise these; the GraphQL error formatter turns them into ``extensions`` and anything
else into a generic ``INTERNAL_SERVER_ERROR`` whose real cause is only logged.
"""

from __future__ import annotations

from typing import Any, ClassVar

from extractor.config import LabelingSettings
from extractor.jobs import JobFailure as JobFailure  # the handlers' failure, raised here too
from extractor.jobs import JobInterrupted as JobInterrupted
from extractor.jobs import StorageError as QueueStorageError


class LabelingError(Exception):
    """Base of every error the service reports to a client."""

    code: ClassVar[str] = "INTERNAL_SERVER_ERROR"
    type: ClassVar[str] = "InternalServerError"
    default_message: ClassVar[str] = "Internal server error"

    def __init__(self, message: str | None = None) -> None:
        super().__init__(message or self.default_message)
        self.message = message or self.default_message

    @property
    def extensions(self) -> dict[str, Any]:
        """The ``extensions`` object of the GraphQL error: both spellings clients read."""
        return {"code": self.code, "type": self.type}


class AuthenticationError(LabelingError):
    """No token, or one the service never issued: clients match the exact message."""

    code = "UNAUTHENTICATED"
    type = "AuthenticationError"
    default_message = "Unauthorized"


class ForbiddenError(LabelingError):
    """The caller is known but may not do this (another team, a team-only capability)."""

    code = "FORBIDDEN"
    type = "ForbiddenError"
    default_message = "Forbidden"


class UserInputError(LabelingError):
    """The request is well-formed GraphQL but its values cannot be used."""

    code = "BAD_USER_INPUT"
    type = "UserInputError"
    default_message = "Invalid input"


class NotFoundError(LabelingError):
    """The thing does not exist, or exists where the caller cannot see it (never leaked)."""

    code = "NOT_FOUND"
    type = "NotFoundError"
    default_message = "Not found"


class LimitExceededError(LabelingError):
    """The request is over one of the service's documented limits; ``limit`` names its setting.

    A client error like BAD_USER_INPUT, with its own code so clients can tell "make it smaller"
    (or "wait for your jobs") from "fix the values".
    """

    code = "LIMIT_EXCEEDED"
    type = "LimitExceededError"
    default_message = "Over a limit of the service"

    def __init__(self, message: str, *, limit: str, maximum: int) -> None:
        super().__init__(message)
        self.limit = limit
        self.maximum = maximum

    @classmethod
    def of_setting(cls, settings: Any, name: str, what: str) -> LimitExceededError:
        """The error for a request over the setting ``name`` of ``settings``; ``what`` says
        what was too much, the message adds the limit and its environment variable."""
        maximum = int(getattr(settings, name))
        variable = LabelingSettings.variable(name)
        return cls(f"{what}: the limit is {maximum} ({variable})", limit=variable, maximum=maximum)

    @property
    def extensions(self) -> dict[str, Any]:
        """Code and type, plus the setting's environment variable and its value."""
        return {**super().extensions, "limit": self.limit, "maximum": self.maximum}


class InternalServerError(LabelingError):
    """Something failed on our side; the message stays generic, the cause goes to the log."""


class StorageError(InternalServerError, QueueStorageError):
    """The database failed (SQLAlchemy errors are translated to this at the session boundary);
    also the job queue's StorageError, so workers retry instead of failing the job."""


class SecretsUnavailableError(LabelingError):
    """A secret cannot be stored or read: the deployment has no (or not the right) secret key."""

    code = "SECRETS_UNAVAILABLE"
    type = "SecretsUnavailableError"
    default_message = "This service cannot store secrets: it has no secret key configured"

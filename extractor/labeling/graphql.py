"""The GraphQL layer: the SDL file, thin resolvers over the service, and error formatting."""

from __future__ import annotations

import logging
from collections.abc import Callable
from functools import cache
from typing import Any

from ariadne import (
    MutationType,
    ObjectType,
    QueryType,
    ScalarType,
    make_executable_schema,
    upload_scalar,
)
from graphql import GraphQLError, GraphQLResolveInfo, GraphQLSchema

from extractor.labeling.auth import Caller
from extractor.labeling.errors import (
    InternalServerError,
    LabelingError,
    LimitExceededError,
    UserInputError,
)
from extractor.labeling.replies import ReplyBudget, StoredJSON
from extractor.labeling.service import LabelingService
from extractor.replies.schemas import SCHEMAS_DIR

log = logging.getLogger(__name__)

query = QueryType()
mutation = MutationType()
json_scalar = ScalarType("JSON")
project_type = ObjectType("Project")
document_type = ObjectType("Document")


@json_scalar.serializer
def _serialize_json(value: Any) -> Any:
    return value


@json_scalar.value_parser
def _parse_json(value: Any) -> Any:
    return value


def _context(info: GraphQLResolveInfo) -> tuple[LabelingService, Caller]:
    """The service and the authenticated caller the HTTP layer put in the context."""
    return info.context["service"], info.context["caller"]


@query.field("getPersonalTags")
def resolve_personal_tags(_: Any, info: GraphQLResolveInfo) -> list[dict[str, Any]]:
    service, caller = _context(info)
    return service.personal_tags(caller)


@query.field("getTags")
def resolve_tags(_: Any, info: GraphQLResolveInfo, input: dict[str, Any]) -> list[dict[str, Any]]:
    service, caller = _context(info)
    return service.team_tags(caller, input["teamId"])


@query.field("getJob")
def resolve_job(_: Any, info: GraphQLResolveInfo, jobId: str) -> dict[str, Any] | None:
    service, caller = _context(info)
    return service.job(caller, jobId)


@query.field("getJobs")
def resolve_jobs(
    _: Any, info: GraphQLResolveInfo, jobIds: list[str]
) -> list[dict[str, Any] | None]:
    service, caller = _context(info)
    return service.jobs(caller, jobIds)


@query.field("getCustomAPIs")
def resolve_custom_apis(
    _: Any, info: GraphQLResolveInfo, teamId: str, purpose: str | None = None
) -> list[dict[str, Any]]:
    service, caller = _context(info)
    return service.custom_apis(caller, teamId, purpose)


@query.field("getProject")
def resolve_project(_: Any, info: GraphQLResolveInfo, projectId: str) -> dict[str, Any] | None:
    service, caller = _context(info)
    return service.project(caller, projectId)


@project_type.field("documents")
def resolve_documents(
    project: dict[str, Any], info: GraphQLResolveInfo, offset: int = 0, limit: int | None = None
) -> list[dict[str, Any]]:
    service, _ = _context(info)
    page = service.settings.max_documents_page if limit is None else limit
    return service.documents(project["id"], offset, page)


@document_type.field("importable")
def resolve_importable(document: dict[str, Any], info: GraphQLResolveInfo) -> StoredJSON:
    """The document's JSON, charged by its bytes to the reply and copied in as stored."""
    budget: ReplyBudget = info.context["reply"]
    return budget.charge(document["id"], document["size"])


@project_type.field("documentCount")
def resolve_document_count(project: dict[str, Any], info: GraphQLResolveInfo) -> int:
    service, _ = _context(info)
    return service.document_count(project["id"])


@mutation.field("createTag")
def resolve_create_tag(_: Any, info: GraphQLResolveInfo, input: dict[str, Any]) -> dict[str, Any]:
    service, caller = _context(info)
    return service.create_tag(caller, input["name"], input.get("teamId"))


@mutation.field("createCustomAPI")
def resolve_create_custom_api(
    _: Any, info: GraphQLResolveInfo, teamId: str, input: dict[str, Any]
) -> dict[str, Any]:
    service, caller = _context(info)
    return service.create_custom_api(caller, teamId, input)


@mutation.field("createProject")
def resolve_create_project(
    _: Any, info: GraphQLResolveInfo, input: dict[str, Any]
) -> dict[str, Any]:
    service, caller = _context(info)
    return service.create_project(caller, input)


@mutation.field("autoLabelTokenBasedProject")
def resolve_auto_label(_: Any, info: GraphQLResolveInfo, input: dict[str, Any]) -> dict[str, Any]:
    service, caller = _context(info)
    return service.auto_label(caller, input)


def has_nul(value: Any) -> bool:
    """Whether a string anywhere in ``value`` holds U+0000, which PostgreSQL text cannot store."""
    if isinstance(value, str):
        return "\x00" in value
    if isinstance(value, dict):
        return any(has_nul(key) or has_nul(item) for key, item in value.items())
    if isinstance(value, list | tuple):
        return any(has_nul(item) for item in value)
    return False


def reject_nul_characters(
    resolve: Callable[..., Any], parent: Any, info: GraphQLResolveInfo, **args: Any
) -> Any:
    """Middleware: an argument with a NUL character is the client's error on every engine."""
    if args and has_nul(args):
        raise UserInputError("Text arguments must not contain NUL (U+0000) characters")
    return resolve(parent, info, **args)


class RequestErrorLog(logging.LoggerAdapter[logging.Logger]):
    """Ariadne logs every GraphQL error with a traceback; ours are expected, so DEBUG, no stack.

    Unexpected exceptions are logged, with their stack, by :func:`format_error`.
    """

    def error(self, msg: object, *args: object, **kwargs: Any) -> None:
        kwargs.pop("exc_info", None)
        self.debug("GraphQL error: %s", str(msg).splitlines()[0] if str(msg) else msg)


request_error_log = RequestErrorLog(log, {})


@cache
def labeling_schema() -> GraphQLSchema:
    """The executable schema from ``schemas/labeling.graphql``, built once per process."""
    # Read as text, not by path: an installed package's resource need not be a file on disk.
    sdl = (SCHEMAS_DIR / "labeling.graphql").read_text(encoding="utf-8")
    return make_executable_schema(
        sdl, query, mutation, project_type, document_type, json_scalar, upload_scalar
    )


def request_error_extensions(error: GraphQLError) -> dict[str, str]:
    """Codes for errors graphql-core raises before any resolver runs (Apollo's spelling)."""
    message = error.message
    if message.startswith("Syntax Error"):
        return {"code": "GRAPHQL_PARSE_FAILED", "type": "SyntaxError"}
    if message.startswith("Variable '$"):
        return {"code": "BAD_USER_INPUT", "type": "UserInputError"}
    return {"code": "GRAPHQL_VALIDATION_FAILED", "type": "ValidationError"}


def format_error(error: GraphQLError, debug: bool = False) -> dict[str, Any]:
    """Our errors with their code and type; any other exception as a generic, logged 500."""
    formatted: dict[str, Any] = dict(error.formatted)
    original = error.original_error
    if isinstance(original, LabelingError):
        if isinstance(original, InternalServerError):
            log.error("internal error in %s", error.path, exc_info=original)
        elif isinstance(original, LimitExceededError):
            log.info("refused %s: %s", error.path, original.message)
        formatted["message"] = original.message
        formatted["extensions"] = original.extensions
    elif original is not None and not isinstance(original, GraphQLError):
        log.error("unexpected error in %s", error.path, exc_info=original)
        generic = InternalServerError()
        formatted["message"] = generic.message
        formatted["extensions"] = generic.extensions
    else:
        formatted["extensions"] = {
            **request_error_extensions(error),
            **(formatted.get("extensions") or {}),
        }
    return formatted

"""Reading an HTTP request into a GraphQL operation: a JSON body or a multipart upload form,
bounded in size and nesting, parsed once; failures before GraphQL runs in GraphQL's shape."""

from __future__ import annotations

import json
from typing import Any

from ariadne import combine_multipart_data
from ariadne.exceptions import HttpBadRequestError
from flask import request
from graphql import DocumentNode, OperationDefinitionNode
from werkzeug.exceptions import RequestEntityTooLarge

from extractor.config import LabelingSettings
from extractor.labeling.query_limits import parse_bounded


def error_body(message: str, code: str, type_: str) -> dict[str, Any]:
    """A GraphQL-shaped body for failures that happen before GraphQL runs."""
    return {
        "data": None,
        "errors": [{"message": message, "extensions": {"code": code, "type": type_}}],
        "extensions": {},
    }


class BadGraphQLRequest(Exception):
    """The HTTP body is not a GraphQL request at all (answered 400, never 500)."""


def json_depth(value: Any) -> int:
    """How deeply arrays and objects nest in a parsed JSON value (a scalar is 0), without
    recursion, so the measure itself cannot overflow the stack."""
    deepest = 0
    pending = [(value, 1)]
    while pending:
        item, depth = pending.pop()
        children = (
            item.values() if isinstance(item, dict) else item if isinstance(item, list) else None
        )
        if children is not None:
            deepest = max(deepest, depth)
            pending.extend((child, depth + 1) for child in children)
    return deepest


def load_json(raw: str | bytes, what: str, settings: LabelingSettings) -> Any:
    """Parse one JSON text of the request: 400 when invalid or nested past ``max_json_depth``.

    The C parser recurses per level and raises RecursionError (not ValueError) near 1000
    levels, which used to escape as HTTP 500.
    """
    try:
        value = json.loads(raw)
    except (ValueError, RecursionError) as exc:
        raise BadGraphQLRequest(f"{what} is not valid JSON") from exc
    if json_depth(value) > settings.max_json_depth:
        raise BadGraphQLRequest(
            f"{what} nests arrays and objects more than {settings.max_json_depth} deep "
            f"({LabelingSettings.variable('max_json_depth')})"
        )
    return value


def read_operations(settings: LabelingSettings) -> Any:
    """The GraphQL request from a JSON body or a multipart (upload) form; 400 on anything else.

    Its JSON is bounded by ``max_request_json_bytes`` (413): a multipart request's fields by
    Flask's MAX_FORM_MEMORY_SIZE, a JSON body here, before it is parsed.
    """
    if request.mimetype == "multipart/form-data":
        form = request.form
        operations = load_json(form.get("operations", ""), "'operations'", settings)
        files_map = load_json(form.get("map", "{}"), "'map'", settings)
        try:
            return combine_multipart_data(operations, files_map, request.files)
        except (ValueError, TypeError, KeyError, IndexError, HttpBadRequestError) as exc:
            raise BadGraphQLRequest(
                "Invalid multipart request: needs JSON 'operations' and 'map' fields "
                "(GraphQL multipart request convention)"
            ) from exc
    body = request.stream.read(settings.max_request_json_bytes + 1)
    if len(body) > settings.max_request_json_bytes:
        raise RequestEntityTooLarge(
            f"A JSON request body may have at most {settings.max_request_json_bytes} bytes "
            f"({LabelingSettings.variable('max_request_json_bytes')})"
        )
    try:
        return load_json(body, "The body", settings)
    except BadGraphQLRequest as exc:
        raise BadGraphQLRequest(f"{exc} (a JSON object with a 'query' string)") from exc


def parse_leniently(operations: dict[str, Any], settings: LabelingSettings) -> DocumentNode:
    """Parse the query once, within the token limit; with a single operation, an
    ``operationName`` that names another is dropped (the spec lets clients send any
    alphanumeric name). A syntax error is raised, to be answered without parsing again.
    """
    document = parse_bounded(operations["query"], settings)
    named = [d for d in document.definitions if isinstance(d, OperationDefinitionNode)]
    wanted = operations.get("operationName")
    if len(named) == 1 and wanted and (named[0].name is None or named[0].name.value != wanted):
        operations["operationName"] = None
    return document

"""The labeling service's routes: ``POST /graphql`` (JSON or multipart), ``GET /healthz``
and, when turned on, ``GET /metrics``; registered by ``create_labeling_app``.

Like the extractor's ``views.py``: routes live on module-level blueprints and read the app's
state from ``app.extensions["labeling"]`` (``state.current_state``), never from closures.
"""

from __future__ import annotations

import logging

from ariadne import graphql_sync
from flask import Blueprint, Response, jsonify, request
from graphql import GraphQLError
from werkzeug.exceptions import HTTPException

from extractor.labeling.auth import authenticate, token_lifetime
from extractor.labeling.errors import InternalServerError, LabelingError
from extractor.labeling.graphql import (
    format_error,
    labeling_schema,
    reject_nul_characters,
    request_error_log,
)
from extractor.labeling.graphql_request import (
    BadGraphQLRequest,
    error_body,
    parse_leniently,
    read_operations,
)
from extractor.labeling.query_limits import limit_errors
from extractor.labeling.replies import ReplyBudget, reply_chunks
from extractor.labeling.state import current_state

log = logging.getLogger(__name__)

views = Blueprint("labeling", __name__)
# Registered only when EXTRACTOR_LABELING_METRICS is on.
metrics_views = Blueprint("labeling_metrics", __name__)


@views.post("/graphql")
def graphql_endpoint() -> tuple[Response, int]:
    """Authenticate, run the operation, and shape the answer as ``{data, errors?, extensions}``."""
    state = current_state()
    try:
        caller = authenticate(
            state.db,
            request.headers.get("Authorization"),
            token_lifetime(state.settings.token_lifetime_days),
        )
    except LabelingError as exc:
        if isinstance(exc, InternalServerError):
            log.error("cannot authenticate a request", exc_info=exc)
        return jsonify(error_body(exc.message, exc.code, exc.type)), 200
    try:
        operations = read_operations(state.settings)
    except BadGraphQLRequest as exc:
        return jsonify(error_body(str(exc), "BAD_REQUEST", "BadRequestError")), 400
    if not isinstance(operations, dict) or not isinstance(operations.get("query"), str):
        body = error_body(
            "The body must be a JSON object with a 'query' string", "BAD_REQUEST", "BadRequestError"
        )
        return jsonify(body), 400
    variables = operations.get("variables")
    try:
        document = parse_leniently(operations, state.settings)
        refusals = limit_errors(
            labeling_schema(),
            document,
            state.settings,
            variables if isinstance(variables, dict) else {},
        )
    except GraphQLError as exc:
        refusals = [exc]
    if refusals:
        # The operator sees who keeps hitting a limit; the client sees the limit's name only.
        log.info("refused a query of user %s: %s", caller.user_id, refusals[0].message)
        errors = [format_error(error) for error in refusals]
        return jsonify({"data": None, "errors": errors, "extensions": {}}), 200
    answer = state.introspection.answer(
        labeling_schema(), document, operations.get("operationName"), operations["query"]
    )
    if answer is not None:
        return jsonify({**answer, "extensions": {}}), 200
    budget = ReplyBudget(state.settings)
    success, result = graphql_sync(
        labeling_schema(),
        operations,
        query_document=document,
        context_value={"service": state.service, "caller": caller, "reply": budget},
        error_formatter=format_error,
        debug=False,
        logger=request_error_log,
        middleware=[reject_nul_characters],
    )
    if budget.refusal is not None:
        # Refused whole: no document was read, and no part of the reply is sent.
        log.info("refused a query of user %s: %s", caller.user_id, budget.refusal.message)
        error = format_error(GraphQLError(budget.refusal.message, original_error=budget.refusal))
        return jsonify({"data": None, "errors": [error], "extensions": {}}), 200
    result = dict(result)
    result.setdefault("data", None)
    result["extensions"] = result.get("extensions") or {}
    # GraphQL errors (auth included) travel in a 200 body: clients read `errors`, not the status.
    _ = success
    whole, pieces = reply_chunks(result, state.db)
    return Response(pieces if whole is None else whole, mimetype="application/json"), 200


@views.get("/healthz")
def healthz() -> Response:
    """Liveness: the process answers (the database is not touched)."""
    return jsonify({"status": "ok"})


@views.app_errorhandler(HTTPException)
def http_error(exc: HTTPException) -> tuple[Response, int]:
    """Every HTTP-level failure (413, 404, 405, bad form data) in the GraphQL error shape."""
    code = {413: "PAYLOAD_TOO_LARGE", 404: "NOT_FOUND", 405: "METHOD_NOT_ALLOWED"}.get(
        exc.code or 500, "BAD_REQUEST"
    )
    name = "".join(part.capitalize() for part in code.split("_")) + "Error"
    return jsonify(error_body(exc.description or exc.name, code, name)), exc.code or 500


@metrics_views.get("/metrics")
def metrics() -> Response:
    """Job counts from the database, and every process's own numbers (open, like the
    extractor's: counts by kind and status, never a tenant's data)."""
    from extractor.labeling.metrics import exposition
    from extractor.metrics_dir import TEXT_FORMAT

    return Response(exposition(current_state().queue), content_type=TEXT_FORMAT)

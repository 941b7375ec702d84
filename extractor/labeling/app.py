"""The labeling service's Flask app: ``POST /graphql`` (JSON or multipart) and ``GET /healthz``."""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field
from typing import Any

from ariadne import combine_multipart_data, graphql_sync
from ariadne.exceptions import HttpBadRequestError
from flask import Flask, Response, current_app, jsonify, request
from graphql import DocumentNode, GraphQLError, OperationDefinitionNode
from werkzeug.exceptions import HTTPException, RequestEntityTooLarge

from extractor.config import LabelingSettings
from extractor.jobs import JobHandler, JobQueue, QueuePolicy, WorkerPool
from extractor.labeling.auth import authenticate, token_lifetime
from extractor.labeling.autolabel import AutoLabelJob
from extractor.labeling.clients import ExtractorClient
from extractor.labeling.credentials import load_secret_box, seal_stored_secrets
from extractor.labeling.db import Database
from extractor.labeling.errors import InternalServerError, LabelingError
from extractor.labeling.graphql import (
    format_error,
    labeling_schema,
    reject_nul_characters,
    request_error_log,
)
from extractor.labeling.introspection import IntrospectionAnswers
from extractor.labeling.metrics import observe_claim
from extractor.labeling.project_jobs import CreateProjectJob
from extractor.labeling.query_limits import limit_errors, parse_bounded
from extractor.labeling.replies import ReplyBudget, reply_chunks
from extractor.labeling.service import SECRET_PAYLOAD_KEYS, LabelingService

log = logging.getLogger(__name__)

EXTENSION = "labeling"


@dataclass
class LabelingState:
    """What one app owns: its database, queue, service and (embedded) worker threads."""

    settings: LabelingSettings
    db: Database
    queue: JobQueue
    service: LabelingService
    workers: WorkerPool
    client: ExtractorClient
    # Replies to introspection-only requests, kept per query text (the schema never changes).
    introspection: IntrospectionAnswers = field(default_factory=IntrospectionAnswers)

    def start_workers(self) -> None:
        """Start the embedded worker threads, if the settings ask for any."""
        if self.workers.size > 0:
            self.workers.start()

    def close(self) -> None:
        """Stop the worker threads (their jobs are handed back) and close the database."""
        self.workers.stop()
        self.client.close()
        self.db.dispose()


def job_handlers(queue: JobQueue, db: Database, client: ExtractorClient) -> dict[str, JobHandler]:
    """The registry of job kinds this deployment runs."""
    handlers: list[JobHandler] = [CreateProjectJob(queue, db, client), AutoLabelJob(db, client)]
    return {handler.kind: handler for handler in handlers}


def queue_policy(settings: LabelingSettings) -> QueuePolicy:
    """The job queue's timings and limits, from the labeling settings."""
    return QueuePolicy(
        lease_seconds=settings.job_lease_seconds,
        heartbeat_seconds=settings.job_heartbeat_seconds,
        poll_seconds=settings.job_poll_seconds,
        max_attempts=settings.job_max_attempts,
        tenant_share=settings.job_tenant_share,
        deadline_seconds=settings.job_deadline_seconds,
        longest_call_seconds=max(
            settings.outbound_total_timeout, settings.prediction_total_timeout
        ),
        secret_payload_keys=SECRET_PAYLOAD_KEYS,
    )


def build_state(settings: LabelingSettings, worker_threads: int | None = None) -> LabelingState:
    """Database, queue, service and a worker pool (not started) for ``settings``."""
    token_lifetime(settings.token_lifetime_days)  # a bad lifetime fails here, not per request
    db = Database(settings.resolved_database_url)
    try:
        secrets = load_secret_box(settings)
        seal_stored_secrets(db, secrets)
    except BaseException:
        db.dispose()
        raise
    queue = JobQueue(db, queue_policy(settings), on_claim=observe_claim)
    threads = settings.embedded_workers if worker_threads is None else worker_threads
    client = ExtractorClient(settings, secrets=secrets)
    workers = WorkerPool(
        queue, job_handlers(queue, db, client), threads, thread_prefix="labeling-worker"
    )
    service = LabelingService(db, queue, settings, secrets=secrets)
    return LabelingState(settings, db, queue, service, workers, client)


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


def graphql_endpoint() -> tuple[Response, int]:
    """Authenticate, run the operation, and shape the answer as ``{data, errors?, extensions}``."""
    state: LabelingState = current_app.extensions[EXTENSION]
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


def create_labeling_app(
    settings: LabelingSettings | None = None, *, start_workers: bool = False
) -> Flask:
    """Build the app; nothing runs at import, and worker threads only when asked.

    ``serve`` builds one app per gunicorn worker (after the fork) with ``start_workers=True``;
    tests start and stop them through ``app.extensions["labeling"]``.
    """
    settings = settings or LabelingSettings.load()
    app = Flask(__name__)
    app.config["MAX_CONTENT_LENGTH"] = settings.max_upload_bytes
    # Each non-file field of a multipart request: `operations` and `map` are JSON texts.
    app.config["MAX_FORM_MEMORY_SIZE"] = settings.max_request_json_bytes
    state = build_state(settings)
    app.extensions[EXTENSION] = state

    app.add_url_rule("/graphql", "graphql", graphql_endpoint, methods=["POST"])

    @app.get("/healthz")
    def healthz() -> Response:
        return jsonify({"status": "ok"})

    if settings.metrics:

        @app.get("/metrics")
        def metrics() -> Response:
            """Job counts from the database, and every process's own numbers (open, like the
            extractor's: counts by kind and status, never a tenant's data)."""
            from extractor.labeling.metrics import exposition
            from extractor.metrics_dir import TEXT_FORMAT

            return Response(exposition(state.queue), content_type=TEXT_FORMAT)

    @app.errorhandler(HTTPException)
    def http_error(exc: HTTPException) -> tuple[Response, int]:
        code = {413: "PAYLOAD_TOO_LARGE", 404: "NOT_FOUND", 405: "METHOD_NOT_ALLOWED"}.get(
            exc.code or 500, "BAD_REQUEST"
        )
        name = "".join(part.capitalize() for part in code.split("_")) + "Error"
        return jsonify(error_body(exc.description or exc.name, code, name)), exc.code or 500

    if start_workers:
        state.start_workers()
    return app

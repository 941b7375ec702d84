"""The one place where errors become HTTP replies, for every route of the extractor.

Views and engines raise ``ExtractorError``s (and Werkzeug raises ``HTTPException``s); the
handlers here log each one once and answer it in the shape the path's API promises: ours,
``{"error": {"code", "message"}}``, or under ``/v1`` OpenAI's, ``{"error": {"message",
"type", "param", "code"}}``. The worker's intake, which refuses some requests before Flask
sees them, answers with the same documents (``error_document``).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from flask import Flask, Response, current_app, g, has_app_context, jsonify, request
from werkzeug.exceptions import HTTPException

from extractor.errors import NO_ROOM_ERRNOS, ExtractorError, InsufficientStorage
from extractor.server_paths import path_roots, without_paths

log = logging.getLogger("extractor.request")
OPENAI_PREFIX = "/v1"  # every route of the OpenAI-compatible API is under it
JOBS_PREFIX = "/v1/jobs"  # ... but the asynchronous job routes (web/jobs.py) are ours
OPENAI_CODES = {"unauthorized": "invalid_api_key"}  # our code -> OpenAI's name for it


@dataclass(frozen=True)
class Problem:
    """What went wrong, before it takes an API's shape."""

    status: int
    code: str
    message: str
    param: str | None = None  # the option or form field at fault
    headers: dict[str, str] = field(default_factory=dict)

    @classmethod
    def of(cls, error: ExtractorError) -> Problem:
        settings = current_app.config.get("SETTINGS") if has_app_context() else None
        message = without_paths(error.message, path_roots(settings))
        return cls(error.status, error.code, message, error.param, dict(error.headers))


def ours(problem: Problem) -> dict[str, Any]:
    """``POST /extract``'s error document; ``param`` names the option at fault, if one is."""
    named = {"param": problem.param} if problem.param else {}
    return {"error": {"code": problem.code, "message": problem.message, **named}}


def openai(problem: Problem) -> dict[str, Any]:
    """OpenAI's error document, as its SDKs parse it."""
    kind = "server_error" if problem.status >= 500 else "invalid_request_error"
    code = OPENAI_CODES.get(problem.code, problem.code)
    return {"error": {"message": problem.message, "type": kind, "param": problem.param,
                      "code": code}}  # fmt: skip


def shape_for(path: str) -> Callable[[Problem], dict[str, Any]]:
    """The error shape of the API ``path`` belongs to."""
    if path == JOBS_PREFIX or path.startswith(JOBS_PREFIX + "/"):
        return ours
    if path == OPENAI_PREFIX or path.startswith(OPENAI_PREFIX + "/"):
        return openai
    return ours


def error_document(error: ExtractorError, path: str) -> dict[str, Any]:
    """``error`` as the API at ``path`` shapes it."""
    return shape_for(path)(Problem.of(error))


def init_app(app: Flask) -> None:
    """Make these handlers answer every error of ``app``."""
    app.register_error_handler(ExtractorError, _extractor_error)
    app.register_error_handler(HTTPException, _http_error)
    app.register_error_handler(OSError, _os_error)


def _reply(problem: Problem) -> Response:
    shape = shape_for(request.path)
    if shape is ours:
        response = jsonify(ours(problem))
    else:  # as OpenAI writes it: its key order, UTF-8 as is
        body = json.dumps(shape(problem), ensure_ascii=False)
        response = Response(body, content_type="application/json")
    response.status_code = problem.status
    response.headers.update(problem.headers)
    return _finish_unread_body(response)


def _extractor_error(error: ExtractorError) -> Response:
    if error.status >= 500:
        log.error("extraction failed", exc_info=error, extra={"request_id": g.get("request_id")})
    elif "log_fields" in g:
        g.log_fields["error"] = error.code
    return _reply(Problem.of(error))


def _os_error(error: OSError) -> Response:
    """A full temporary folder (saving the upload, a page, a decoded track) is a 507 the client
    may retry; any other OSError goes on to the 500 handler, logged as unhandled."""
    if error.errno not in NO_ROOM_ERRNOS:
        raise error
    log.warning("no room for a request", extra={"error": str(error)})
    return _reply(Problem.of(InsufficientStorage.of(error)))


def _http_error(error: HTTPException) -> Response:
    status = error.code or 500
    code = (error.name or "error").lower().replace(" ", "_")
    message = error.description or error.name
    headers: dict[str, str] = {}
    if status == 413:
        code = "payload_too_large"
        limit = current_app.config["SETTINGS"].max_upload_bytes
        message = f"the upload is larger than the limit of {limit} bytes"
    if status >= 500:
        original = getattr(error, "original_exception", None)
        log.error("unhandled error", exc_info=original or error)
        message = "internal error; see the server log for the request id"
    if error.code == 405 and getattr(error, "valid_methods", None):
        headers["Allow"] = ", ".join(error.valid_methods)  # type: ignore[attr-defined]
    return _reply(Problem(status, code, message, headers=headers))


def _finish_unread_body(response: Response) -> Response:
    """Consume an upload that a refusal (401, 406, ...) answered before reading.

    Closing a socket with unread data makes the kernel send a reset, which can destroy the
    reply before the client reads it, and a kept-alive connection would be left mid-body. So
    the rest of the body is read and dropped (it is within the upload limit); only a body over
    that limit is not read, and that connection is closed instead.
    """
    if request.method != "POST" or "files" in request.__dict__:
        return response
    if response.status_code == 413:
        response.headers["Connection"] = "close"
        return response
    try:
        while request.stream.read(64 * 1024):
            pass
    except (OSError, HTTPException):
        response.headers["Connection"] = "close"
    return response

"""The HTTP layer: POST /extract, health, readiness, the OpenAPI document and the page.

A blueprint at module level; ``create_app`` registers it. The views read the request, call
the one pipeline (``pipeline.reply.extract_reply``) and turn its result or error into a response.
"""

from __future__ import annotations

import logging
import time
import uuid
from contextlib import ExitStack
from pathlib import Path

from flask import Blueprint, Response, current_app, g, jsonify, request, send_from_directory

from extractor.config import Settings
from extractor.credentials import Identity, require_identity
from extractor.errors import MissingUpload
from extractor.pipeline.extraction import Extractor, Timings
from extractor.pipeline.reply import extract_reply, reply_response, workspace
from extractor.pipeline.request import Limits, read_request
from extractor.web.jobs import prefers_async, submit_job
from extractor.web.openapi import load_openapi

log = logging.getLogger("extractor.request")
STATIC_DIR = Path(__file__).resolve().parent.parent / "static"

views = Blueprint("extractor", __name__)


def _settings() -> Settings:
    settings: Settings = current_app.config["SETTINGS"]
    return settings


def _extractor() -> Extractor:
    extractor: Extractor = current_app.extensions["extractor"]
    return extractor


@views.post("/extract")
def extract() -> Response:
    settings, extractor = _settings(), _extractor()
    authorize(settings)
    if prefers_async():  # RFC 7240: the same as POST /v1/jobs
        return submit_job()
    upload = request.files.get("upload")
    if upload is None:
        others = ", ".join(sorted(request.files)) or "none"
        raise MissingUpload(
            "expected multipart/form-data with a file field named 'upload'"
            f" (file fields received: {others})"
        )
    wanted = read_request(request.args, request_limits(settings, extractor))
    timings: Timings = g.timings
    # The workspace outlives this function when the reply is sent from a file in it (a long
    # document's): the response's body then closes it, after its last byte or when the client
    # goes away (gunicorn closes the body either way); any failure before closes it here.
    held = ExitStack()
    try:
        workdir = held.enter_context(workspace(settings))
        path = workdir / "upload"
        with timings.stage("receive"):
            upload.save(path)
            upload.close()
        reply = extract_reply(
            extractor, path, upload.filename, workdir, wanted,
            accept=request.headers.get("Accept"), timings=timings, log_fields=g.log_fields,
        )  # fmt: skip
        if reply.spooled is not None:
            path.unlink()  # the upload is read: only the reply's file need stay
        response = reply_response(reply, held)
    except BaseException:
        held.close()
        raise
    response.vary.add("Accept")
    return response


@views.get("/healthz")
def healthz() -> Response:
    return jsonify(status="ok")


@views.get("/readyz")
def readyz() -> tuple[Response, int]:
    extractor = _extractor()
    ready, details = extractor.readiness()
    tesseract = details.get("tesseract")
    if isinstance(tesseract, dict):  # checked: also what the page offers for images
        installed = sorted(extractor.ocr.installed_languages())  # what ?ocr_languages= may name
        rotate = _settings().ocr_rotate  # the default of ?ocr_rotate=
        details["tesseract"] = {**tesseract, "installed_languages": installed, "rotate": rotate}
    return jsonify(status="ready" if ready else "not ready", **details), 200 if ready else 503


@views.get("/openapi.json")
def openapi() -> Response:
    return jsonify(load_openapi())


@views.get("/")
def index() -> Response:
    return Response(
        (STATIC_DIR / "index.html").read_bytes(), content_type="text/html; charset=utf-8"
    )


@views.get("/static/<path:name>")
def static_file(name: str) -> Response:
    return send_from_directory(STATIC_DIR, name)


def authorize(settings: Settings) -> Identity:
    """The request's identity (the shared secret or a named key, when either is configured;
    ``credentials.py`` judges), else ``Unauthorized``. Kept in ``g.identity`` for the metrics."""
    g.identity = require_identity(settings, request.headers.get("Authorization"))
    return g.identity


def request_limits(settings: Settings, extractor: Extractor) -> Limits:
    """What this server checks a request's options against."""
    return Limits.of(settings, extractor.ocr.installed_languages)


# -- every request: an id, timings, one log line (errors: error_replies.py) ------------


@views.before_app_request
def _start_request() -> None:
    g.request_id = request.headers.get("X-Request-ID") or uuid.uuid4().hex
    g.started = time.perf_counter()
    g.timings = Timings()
    g.log_fields = {}


@views.after_app_request
def _log_request(response: Response) -> Response:
    response.headers["X-Request-ID"] = g.get("request_id", "")
    if request.path in ("/healthz", "/readyz"):
        return response
    log.info(
        "request",
        extra={
            "request_id": g.get("request_id"),
            "method": request.method,
            "path": request.path,
            "status": response.status_code,
            "total_s": round(time.perf_counter() - g.get("started", time.perf_counter()), 4),
            "stages": g.timings.stages if "timings" in g else {},
            **g.get("log_fields", {}),
        },
    )
    return response

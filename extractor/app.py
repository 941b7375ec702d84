"""The Flask app factory: POST /extract, health, readiness, the OpenAPI document and the page."""

from __future__ import annotations

import hmac
import logging
import time
import uuid
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from flask import Flask, Response, current_app, g, jsonify, request
from werkzeug.exceptions import HTTPException

from .config import Settings
from .errors import (
    EmptyUpload,
    ExtractorError,
    InvalidParameter,
    MissingUpload,
    PayloadTooLarge,
    Unauthorized,
)
from .importable import to_importable, to_srt, to_text, to_vtt
from .logs import configure_logging
from .media import MediaKind, sniff
from .negotiate import JSON, SRT, TEXT, VTT, choose_format
from .openapi import load_openapi
from .schemas import importable_validator
from .service import ExtractOptions, Extractor, Timings
from .workdirs import request_workdir

log = logging.getLogger("extractor.request")
STATIC_DIR = Path(__file__).resolve().parent / "static"
MULTIPART_SLACK = 64 * 1024  # bytes of form framing allowed on top of the file itself
RENDERERS = {JSON.name: None, TEXT.name: to_text, VTT.name: to_vtt, SRT.name: to_srt}


def create_app(config: Mapping[str, Any] | Settings | None = None) -> Flask:
    """Build the app: defaults, then ``EXTRACTOR_*`` variables, then ``config`` on top.

    Engines are created here but loaded later (``Extractor.load``), by gunicorn's
    ``post_worker_init`` or on first use, so building an app is cheap and fork-safe.
    """
    settings = config if isinstance(config, Settings) else Settings.load(overrides=config)
    configure_logging(settings.log_level)
    app = Flask(__name__, static_folder=None)
    app.config["MAX_CONTENT_LENGTH"] = settings.max_upload_bytes + MULTIPART_SLACK
    app.config["SETTINGS"] = settings
    extractor = Extractor(settings)
    app.extensions["extractor"] = extractor
    validator = importable_validator()

    app.register_error_handler(ExtractorError, _extractor_error)
    app.register_error_handler(HTTPException, _http_error)
    app.before_request(_start_request)
    app.after_request(_log_request)

    @app.post("/extract")
    def extract() -> Response:
        _authorize(settings)
        upload = request.files.get("upload")
        if upload is None:
            others = ", ".join(sorted(request.files)) or "none"
            raise MissingUpload(
                "expected multipart/form-data with a file field named 'upload'"
                f" (file fields received: {others})"
            )
        options = _extract_options(request.args)
        timings: Timings = g.timings
        with request_workdir(settings.tmp_dir) as tmp:
            workdir = Path(tmp)
            path = workdir / "upload"
            with timings.stage("receive"):
                upload.save(path)
                upload.close()
            size = path.stat().st_size
            if size == 0:
                raise EmptyUpload("the uploaded file 'upload' is empty")
            if size > settings.max_upload_bytes:
                raise PayloadTooLarge(
                    f"the upload has {size} bytes; the limit is {settings.max_upload_bytes}"
                )
            with path.open("rb") as fh:
                sniffed = sniff(fh.read(2048))
            g.log_fields.update(kind=sniffed.kind.value, media=sniffed.format, bytes=size)
            reply_format = choose_format(
                request.headers.get("Accept"),
                request.args.get("format"),
                settings.default_format,
                audio=sniffed.kind is MediaKind.AUDIO,
            )
            g.log_fields["format"] = reply_format.name
            name = upload.filename or "upload"
            document = extractor.extract(path, name, sniffed, workdir, options, timings)
        with timings.stage("render"):
            render = RENDERERS[reply_format.name]
            if render is None:
                body = to_importable(document)
                if settings.validate_replies:
                    validator.validate(body)  # our own bug if it fails: a logged 500
                response = jsonify(body)
            else:
                response = Response(render(document), content_type=reply_format.media_type)
        g.log_fields.update(lines=len(document.lines), pages=len(document.pages))
        response.vary.add("Accept")
        return response

    @app.get("/healthz")
    def healthz() -> Response:
        return jsonify(status="ok")

    @app.get("/readyz")
    def readyz() -> tuple[Response, int]:
        ready, details = extractor.readiness()
        return jsonify(status="ready" if ready else "not ready", **details), 200 if ready else 503

    @app.get("/openapi.json")
    def openapi() -> Response:
        return jsonify(load_openapi())

    @app.get("/")
    def index() -> Response:
        return Response(
            (STATIC_DIR / "index.html").read_bytes(), content_type="text/html; charset=utf-8"
        )

    @app.get("/static/<path:name>")
    def static_file(name: str) -> Response:
        from flask import send_from_directory

        return send_from_directory(STATIC_DIR, name)

    return app


def _authorize(settings: Settings) -> None:
    """Require ``Authorization: Bearer <secret>`` when a secret is configured."""
    if not settings.secret:
        return
    scheme, _, token = request.headers.get("Authorization", "").partition(" ")
    if scheme.lower() != "bearer" or not hmac.compare_digest(
        token.strip().encode(), settings.secret.encode()
    ):
        raise Unauthorized("a valid 'Authorization: Bearer <secret>' header is required")


def _extract_options(args: Mapping[str, str]) -> ExtractOptions:
    speakers = args.get("speakers") or None
    if speakers not in (None, "channels"):
        raise InvalidParameter(f"speakers must be 'channels' when given, not {speakers!r}")
    language = args.get("language") or None
    if language is not None and not (
        language.isascii() and language.isalpha() and 2 <= len(language) <= 3
    ):
        raise InvalidParameter(f"language must be an ISO 639-1 code such as 'en', not {language!r}")
    words = (args.get("words") or "false").lower()
    if words not in ("true", "false", "1", "0"):
        raise InvalidParameter(f"words must be true or false, not {words!r}")
    return ExtractOptions(
        language=language.lower() if language else None,
        speakers=speakers,
        word_timestamps=words in ("true", "1"),
    )


def _start_request() -> None:
    g.request_id = request.headers.get("X-Request-ID") or uuid.uuid4().hex
    g.started = time.perf_counter()
    g.timings = Timings()
    g.log_fields = {}


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


def _extractor_error(error: ExtractorError) -> Response:
    if error.status >= 500:
        log.error("extraction failed", exc_info=error, extra={"request_id": g.get("request_id")})
    else:
        g.log_fields["error"] = error.code
    response = jsonify(error.to_json())
    response.status_code = error.status
    response.headers.update(error.headers)
    return _finish_unread_body(response)


def _http_error(error: HTTPException) -> Response:
    status = error.code or 500
    code = (error.name or "error").lower().replace(" ", "_")
    message = error.description or error.name
    if status == 413:
        code = "payload_too_large"
        limit = current_app.config["SETTINGS"].max_upload_bytes
        message = f"the upload is larger than the limit of {limit} bytes"
    if status >= 500:
        original = getattr(error, "original_exception", None)
        log.error("unhandled error", exc_info=original or error)
        message = "internal error; see the server log for the request id"
    response = jsonify({"error": {"code": code, "message": message}})
    response.status_code = status
    if error.code == 405 and getattr(error, "valid_methods", None):
        response.headers["Allow"] = ", ".join(error.valid_methods)  # type: ignore[attr-defined]
    return _finish_unread_body(response)

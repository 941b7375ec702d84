"""The HTTP layer: POST /extract, health, readiness, the OpenAPI document and the page.

A blueprint at module level; ``create_app`` registers it. The views read the request, call
the one pipeline (``pipeline.extract_reply``) and turn its result or error into a response.
"""

from __future__ import annotations

import hmac
import logging
import time
import uuid
from collections.abc import Mapping
from pathlib import Path

from flask import Blueprint, Response, current_app, g, jsonify, request, send_from_directory
from werkzeug.exceptions import HTTPException

from extractor.asr.speaker_count import parse_speaker_count
from extractor.config import SPEAKER_MODES, Settings
from extractor.errors import ExtractorError, InvalidParameter, MissingUpload, Unauthorized
from extractor.pipeline import (
    ReplyRequest,
    extract_reply,
    parse_ocr_languages,
    parse_switch,
    workspace,
)
from extractor.pipeline.extraction import ExtractOptions, Extractor, Timings
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
    upload = request.files.get("upload")
    if upload is None:
        others = ", ".join(sorted(request.files)) or "none"
        raise MissingUpload(
            "expected multipart/form-data with a file field named 'upload'"
            f" (file fields received: {others})"
        )
    wanted = ReplyRequest(
        accept=request.headers.get("Accept"),
        format=request.args.get("format"),
        options=_extract_options(request.args, extractor, settings),
    )
    timings: Timings = g.timings
    with workspace(settings) as workdir:
        path = workdir / "upload"
        with timings.stage("receive"):
            upload.save(path)
            upload.close()
        reply = extract_reply(
            extractor, path, upload.filename, workdir, wanted,
            timings=timings, log_fields=g.log_fields,
        )  # fmt: skip
    response = Response(reply.body, content_type=reply.format.media_type)
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
    if isinstance(tesseract, dict):  # checked: say what ?ocr_languages= may ask for
        installed = sorted(extractor.ocr.installed_languages())
        details["tesseract"] = {**tesseract, "installed_languages": installed}
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


def authorize(settings: Settings) -> None:
    """Require ``Authorization: Bearer <secret>`` when a secret is configured."""
    if not settings.secret:
        return
    scheme, _, token = request.headers.get("Authorization", "").partition(" ")
    if scheme.lower() != "bearer" or not hmac.compare_digest(
        token.strip().encode(), settings.secret.encode()
    ):
        raise Unauthorized("a valid 'Authorization: Bearer <secret>' header is required")


def _extract_options(
    args: Mapping[str, str], extractor: Extractor, settings: Settings
) -> ExtractOptions:
    speakers = args.get("speakers") or None
    if speakers not in (None, *SPEAKER_MODES):
        raise InvalidParameter(
            f"speakers must be one of {', '.join(SPEAKER_MODES)} when given, not {speakers!r}"
        )
    language = args.get("language") or None
    if language is not None and not (
        language.isascii() and language.isalpha() and 2 <= len(language) <= 3
    ):
        raise InvalidParameter(f"language must be an ISO 639-1 code such as 'en', not {language!r}")
    words = (args.get("words") or "false").lower()
    if words not in ("true", "false", "1", "0"):
        raise InvalidParameter(f"words must be true or false, not {words!r}")
    count = parse_speaker_count(args, settings.speakers_max_count)
    if count is not None:  # a number of speakers only means something to speakers=auto
        if speakers == "channels":
            raise InvalidParameter(
                "num_speakers, min_speakers and max_speakers go with speakers=auto, not channels"
            )
        speakers = "auto"
    ocr_languages = args.get("ocr_languages") or None
    if ocr_languages is not None:
        ocr_languages = parse_ocr_languages(
            ocr_languages, extractor.ocr.installed_languages(), settings.max_ocr_languages
        )
    return ExtractOptions(
        language=language.lower() if language else None,
        speakers=speakers,
        speaker_count=count,
        word_timestamps=words in ("true", "1"),
        ocr_languages=ocr_languages,
        ocr_rotate=parse_switch("ocr_rotate", args.get("ocr_rotate")),
    )


# -- every request: an id, timings, one log line; errors as JSON --------------------------


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


@views.app_errorhandler(ExtractorError)
def _extractor_error(error: ExtractorError) -> Response:
    if error.status >= 500:
        log.error("extraction failed", exc_info=error, extra={"request_id": g.get("request_id")})
    else:
        g.log_fields["error"] = error.code
    response = jsonify(error.to_json())
    response.status_code = error.status
    response.headers.update(error.headers)
    return _finish_unread_body(response)


@views.app_errorhandler(HTTPException)
def _http_error(error: HTTPException) -> Response:
    status = error.code or 500
    code = (error.name or "error").lower().replace(" ", "_")
    message = error.description or error.name
    if status == 413:
        code = "payload_too_large"
        message = f"the upload is larger than the limit of {_settings().max_upload_bytes} bytes"
    if status >= 500:
        original = getattr(error, "original_exception", None)
        log.error("unhandled error", exc_info=original or error)
        message = "internal error; see the server log for the request id"
    response = jsonify({"error": {"code": code, "message": message}})
    response.status_code = status
    if error.code == 405 and getattr(error, "valid_methods", None):
        response.headers["Allow"] = ", ".join(error.valid_methods)  # type: ignore[attr-defined]
    return _finish_unread_body(response)

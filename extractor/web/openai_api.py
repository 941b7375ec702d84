"""``POST /v1/audio/transcriptions``: OpenAI's transcription API in front of our speech engine.

Clients written for OpenAI (its official SDKs, curl scripts, tools that take a ``base_url``)
work unchanged: multipart ``file``, ``model``, ``language``, ``prompt``, ``temperature``,
``response_format`` and ``timestamp_granularities[]``, errors in OpenAI's ``{"error": {...}}``
shape. The request goes through the same receive step, engine gate, limits and secret as
``POST /extract``; only the parameters and the renderings differ.

Where OpenAI's documentation and the self-hosted servers differ we follow the servers users
switch from (speaches, whisper-asr-webservice): ``model`` is accepted whatever it names and the
configured engine answers; ``language`` in ``verbose_json`` is the ISO 639-1 code.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from flask import Blueprint, Response, current_app, g, request
from werkzeug.datastructures import MultiDict
from werkzeug.exceptions import HTTPException

from extractor.asr.speaker_count import SpeakerCount, parse_speaker_count
from extractor.config import Settings
from extractor.errors import ExtractorError, InvalidParameter, Unauthorized, UnsupportedMedia
from extractor.media.sniff import MediaKind
from extractor.pipeline import check_upload, log_document, reply_name, workspace
from extractor.pipeline.extraction import ExtractOptions, Extractor
from extractor.replies.importable import Document, to_srt, to_vtt
from extractor.web.views import _extractor_error as log_and_render
from extractor.web.views import _http_error as render_http_error
from extractor.web.views import authorize

PATH_PREFIX = "/v1"  # every route of the OpenAI-compatible API is under it
blueprint = Blueprint("openai", __name__, url_prefix=PATH_PREFIX)

MAX_PROMPT_CHARS = 2000  # OpenAI reads 224 tokens of prompt; this bounds what we pass on
MAX_MODEL_CHARS = 200  # the model name is only echoed into logs


@dataclass(frozen=True)
class TranscriptionRequest:
    """The form fields of one call, checked."""

    response_format: str
    words: bool  # timestamp_granularities[] has "word"
    segments: bool  # timestamp_granularities[] has "segment" (the default)
    language: str | None
    prompt: str | None
    temperature: float | None
    speaker_count: SpeakerCount | None = None  # num/min/max_speakers: label the voices


def _json(document: Document, _request: TranscriptionRequest) -> Response:
    return _json_reply({"text": _text(document)})


def _plain(document: Document, _request: TranscriptionRequest) -> Response:
    return Response(_text(document) + "\n", content_type="text/plain; charset=utf-8")


def _verbose(document: Document, call: TranscriptionRequest) -> Response:
    body: dict[str, Any] = {
        "task": "transcribe",
        "language": document.language,
        "duration": (document.duration_ms or 0) / 1000,
        "text": _text(document),
    }
    if call.segments:
        body["segments"] = [_segment(n, line) for n, line in enumerate(document.lines)]
    if call.words:
        body["words"] = [
            {"word": w.text, "start": (w.start_ms or 0) / 1000, "end": (w.end_ms or 0) / 1000}
            for line in document.lines
            for w in line.words
        ]
    return _json_reply(body)


# response_format -> renderer; its keys are the values the API accepts.
RENDERINGS: dict[str, Callable[[Document, TranscriptionRequest], Response]] = {
    "json": _json,
    "text": _plain,
    "srt": lambda d, _r: Response(to_srt(d), content_type="application/x-subrip; charset=utf-8"),
    "verbose_json": _verbose,
    "vtt": lambda d, _r: Response(to_vtt(d), content_type="text/vtt; charset=utf-8"),
}
GRANULARITIES = ("segment", "word")


def _text(document: Document) -> str:
    return " ".join(line.content for line in document.lines)


def _segment(number: int, line: Any) -> dict[str, Any]:
    detail = dict(line.detail or {})
    start, end = (line.start_ms or 0) / 1000, (line.end_ms or 0) / 1000
    speaker = {"speaker": line.speaker} if line.speaker else {}  # with num/min/max_speakers
    return {
        **speaker,
        "id": number,
        "seek": int(start * 100),  # Whisper's seek counts 10 ms mel frames
        "start": start,
        "end": end,
        "text": " " + line.content,
        "tokens": list(detail.get("tokens", [])),
        "temperature": detail.get("temperature", 0.0),
        "avg_logprob": detail.get("avg_logprob"),
        "compression_ratio": detail.get("compression_ratio"),
        "no_speech_prob": detail.get("no_speech_prob"),
    }


def _json_reply(body: dict[str, Any]) -> Response:
    return Response(json.dumps(body, ensure_ascii=False), content_type="application/json")


def parse(form: MultiDict[str, str]) -> TranscriptionRequest:
    """Check the form fields, naming the one that is wrong as OpenAI does (``param``)."""
    model = form.get("model", "")
    if len(model) > MAX_MODEL_CHARS:
        raise InvalidField(f"model names are at most {MAX_MODEL_CHARS} characters", "model")
    response_format = form.get("response_format") or "json"
    if response_format not in RENDERINGS:
        raise InvalidField(
            f"response_format must be one of {', '.join(RENDERINGS)}, not {response_format!r}",
            "response_format",
        )
    granularities = form.getlist("timestamp_granularities[]") or form.getlist(
        "timestamp_granularities"
    )
    unknown = [name for name in granularities if name not in GRANULARITIES]
    if unknown or len(granularities) > len(GRANULARITIES):
        raise InvalidField(
            f"timestamp_granularities[] takes 'segment' and/or 'word', not {unknown or granularities}",
            "timestamp_granularities",
        )
    if granularities and response_format != "verbose_json":
        raise InvalidField(
            "timestamp_granularities[] needs response_format=verbose_json",
            "timestamp_granularities",
        )
    language = form.get("language") or None
    if language is not None and not (
        language.isascii() and language.isalpha() and 2 <= len(language) <= 3
    ):
        raise InvalidField(
            f"language must be an ISO 639-1 code such as 'en', not {language!r}", "language"
        )
    prompt = form.get("prompt") or None
    if prompt is not None and len(prompt) > MAX_PROMPT_CHARS:
        raise InvalidField(f"prompt is longer than {MAX_PROMPT_CHARS} characters", "prompt")
    temperature = _temperature(form.get("temperature"))
    limit = current_app.config["SETTINGS"].speakers_max_count
    speaker_count = parse_speaker_count(form, limit)  # its errors name the field (param)
    return TranscriptionRequest(
        response_format=response_format,
        words="word" in granularities,
        segments="segment" in granularities or not granularities,
        language=language.lower() if language else None,
        prompt=prompt,
        temperature=temperature,
        speaker_count=speaker_count,
    )


def _temperature(raw: str | None) -> float | None:
    if raw is None or raw.strip() == "":
        return None
    try:
        value = float(raw)
    except ValueError:
        raise InvalidField(
            f"temperature must be a number from 0 to 1, not {raw!r}", "temperature"
        ) from None
    if not math.isfinite(value) or not 0 <= value <= 1:
        raise InvalidField(f"temperature must be from 0 to 1, not {raw!r}", "temperature")
    return value


class InvalidField(InvalidParameter):
    """A form field is wrong; ``param`` names it, as OpenAI's errors do."""

    def __init__(self, message: str, param: str) -> None:
        super().__init__(message)
        self.param = param


@blueprint.post("/audio/transcriptions")
def transcriptions() -> Response:
    settings: Settings = current_app.config["SETTINGS"]
    extractor: Extractor = current_app.extensions["extractor"]
    authorize(settings)
    upload = request.files.get("file")
    if upload is None:
        raise InvalidField("expected multipart/form-data with a file field named 'file'", "file")
    call = parse(request.form)
    g.log_fields["format"] = f"openai-{call.response_format}"
    options = ExtractOptions(
        language=call.language,
        word_timestamps=call.words,
        prompt=call.prompt,
        temperature=call.temperature,
        speakers="auto" if call.speaker_count else None,
        speaker_count=call.speaker_count,
    )
    with workspace(settings) as workdir:
        path = workdir / "upload"
        with g.timings.stage("receive"):
            upload.save(path)
            upload.close()
        sniffed = check_upload(path, settings, g.log_fields, field="file")
        if sniffed.kind is not MediaKind.AUDIO:
            raise UnsupportedMedia(
                f"the file is {sniffed.format or 'not a recognised format'}, not audio;"
                " this endpoint transcribes speech (mp3, wav, flac, ogg, m4a, webm, ...)"
            )
        name = reply_name(upload.filename)
        document = extractor.extract(path, name, sniffed, workdir, options, g.timings)
    log_document(document, g.log_fields)
    with g.timings.stage("render"):
        return RENDERINGS[call.response_format](document, call)


# -- errors in OpenAI's shape ---------------------------------------------------------------


def serves(path: str) -> bool:
    """Whether ``path`` is one of this API's, whose errors take OpenAI's shape."""
    return path == PATH_PREFIX or path.startswith(PATH_PREFIX + "/")


def _error_document(status: int, message: str, code: str, param: str | None) -> dict[str, Any]:
    kind = "server_error" if status >= 500 else "invalid_request_error"
    return {"error": {"message": message, "type": kind, "param": param, "code": code}}


def error_document(error: ExtractorError) -> dict[str, Any]:
    """``error`` in OpenAI's shape; a wrong key is ``invalid_api_key``, as OpenAI calls it.
    Also what the worker answers when it refuses a request before its body arrives."""
    code = "invalid_api_key" if isinstance(error, Unauthorized) else error.code
    return _error_document(error.status, error.message, code, getattr(error, "param", None))


def _error_body(status: int, message: str, code: str, param: str | None) -> Response:
    response = _json_reply(_error_document(status, message, code, param))
    response.status_code = status
    return response


@blueprint.errorhandler(ExtractorError)
def _extractor_error(error: ExtractorError) -> Response:
    log_and_render(error)  # logs it, and reads any unread body as /extract does
    response = _json_reply(error_document(error))
    response.status_code = error.status
    response.headers.update(error.headers)
    return response


@blueprint.errorhandler(HTTPException)
def _http_error(error: HTTPException) -> Response:
    ours = render_http_error(error)
    detail = json.loads(ours.get_data())["error"]
    response = _error_body(ours.status_code, detail["message"], detail["code"], None)
    for header in ("Allow", "Connection"):
        if header in ours.headers:
            response.headers[header] = ours.headers[header]
    return response

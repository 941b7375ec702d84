"""``POST /v1/audio/transcriptions``: OpenAI's transcription API in front of our speech engine.

Clients written for OpenAI (its official SDKs, curl scripts, tools that take a ``base_url``)
work unchanged: multipart ``file``, ``model``, ``language``, ``prompt``, ``temperature``,
``response_format`` and ``timestamp_granularities[]``, errors in OpenAI's ``{"error": {...}}``
shape. The request goes through the same receive step, engine gate, limits and secret as
``POST /extract``; only the parameters and the renderings differ.

Where OpenAI's documentation and the self-hosted servers differ we follow the servers users
switch from (speaches, whisper-asr-webservice): ``language`` in ``verbose_json`` is the ISO 639-1
code. ``model`` is the extraction option of that name: ``whisper-1`` (what OpenAI's clients
send) is the deployment's model, an installed model's name (``tiny.en``, ``base``) chooses it,
anything else is a 400 listing them.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass, replace
from typing import Any

from flask import Blueprint, Response, current_app, g, request
from werkzeug.datastructures import MultiDict

from extractor.config import Settings
from extractor.errors import InvalidParameter, UnsupportedMedia
from extractor.media.sniff import MediaKind
from extractor.pipeline.extraction import Extractor
from extractor.pipeline.reply import check_upload, log_document, reply_name, workspace
from extractor.pipeline.request import ExtractionRequest, Limits, read_request
from extractor.replies.importable import Document, to_srt, to_vtt
from extractor.web.error_replies import OPENAI_PREFIX
from extractor.web.openai_stream import TranscriptionStream
from extractor.web.views import authorize, request_limits

blueprint = Blueprint("openai", __name__, url_prefix=OPENAI_PREFIX)

MAX_MODEL_CHARS = 200  # a live session's model name (realtime.updates), only echoed into logs
NOT_HERE = ("format",)  # the extraction options this route takes in OpenAI's own fields


@dataclass(frozen=True)
class TranscriptionRequest:
    """The form fields of one call, checked: OpenAI's own and the extraction options."""

    response_format: str
    segments: bool  # timestamp_granularities[] has "segment" (the default)
    extraction: ExtractionRequest  # words: timestamp_granularities[] has "word", or words=on
    stream: bool = False  # stream=true: Server-Sent Events (openai_stream)

    @property
    def words(self) -> bool:
        return self.extraction.words


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
    if "language_probability" in document.extra:  # not OpenAI's: how sure the detection was
        body["language_probability"] = document.extra["language_probability"]
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
        # kept though the decoder doubted it (asr/fallback.py's MARKS); OpenAI has no such field
        **({"suspect": detail["suspect"]} if detail.get("suspect") else {}),
    }


def _json_reply(body: dict[str, Any]) -> Response:
    return Response(json.dumps(body, ensure_ascii=False), content_type="application/json")


def parse(form: MultiDict[str, str], limits: Limits) -> TranscriptionRequest:
    """Check the form fields, naming the one that is wrong as OpenAI does (``param``)."""
    response_format = form.get("response_format") or "json"
    if response_format not in RENDERINGS:
        raise InvalidParameter(
            f"response_format must be one of {', '.join(RENDERINGS)}, not {response_format!r}",
            param="response_format",
        )
    granularities = form.getlist("timestamp_granularities[]") or form.getlist(
        "timestamp_granularities"
    )
    unknown = [name for name in granularities if name not in GRANULARITIES]
    if unknown or len(granularities) > len(GRANULARITIES):
        raise InvalidParameter(
            f"timestamp_granularities[] takes 'segment' and/or 'word', not {unknown or granularities}",
            param="timestamp_granularities",
        )
    if granularities and response_format != "verbose_json":
        raise InvalidParameter(
            "timestamp_granularities[] needs response_format=verbose_json",
            param="timestamp_granularities",
        )
    stream = _stream(form.get("stream"), response_format)
    extraction = read_request(form, limits, skip=NOT_HERE)
    if "word" in granularities:
        extraction = replace(extraction, words=True)
    return TranscriptionRequest(
        response_format=response_format,
        segments="segment" in granularities or not granularities,
        extraction=extraction,
        stream=stream,
    )


def _stream(raw: str | None, response_format: str) -> bool:
    value = (raw or "false").strip().lower()
    if value not in ("true", "false", "1", "0"):
        raise InvalidParameter(f"stream must be true or false, not {raw!r}", param="stream")
    if value in ("true", "1") and response_format not in ("json", "text"):
        raise InvalidParameter(
            f"stream=true answers Server-Sent Events, not response_format={response_format}",
            param="stream",
        )
    return value in ("true", "1")


@blueprint.post("/audio/transcriptions")
def transcriptions() -> Response:
    settings: Settings = current_app.config["SETTINGS"]
    extractor: Extractor = current_app.extensions["extractor"]
    authorize(settings)
    upload = request.files.get("file")
    if upload is None:
        raise InvalidParameter(
            "expected multipart/form-data with a file field named 'file'", param="file"
        )
    call = parse(request.form, request_limits(settings, extractor))
    g.log_fields["format"] = f"openai-{call.response_format}" + ("-stream" if call.stream else "")
    with ExitStack() as cleanup:
        workdir = cleanup.enter_context(workspace(settings))
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
        if call.stream:  # the stream's thread owns the workspace from here (openai_stream)
            stream = TranscriptionStream(
                extractor, path, name, sniffed, workdir, call.extraction, g.request_id,
                request.environ.get("gunicorn.socket"),
            )  # fmt: skip
            return stream.reply(cleanup.pop_all())
        document = extractor.extract(path, name, sniffed, workdir, call.extraction, g.timings)
    log_document(document, g.log_fields)
    with g.timings.stage("render"):
        return RENDERINGS[call.response_format](document, call)

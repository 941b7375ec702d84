"""The asynchronous job routes (what runs jobs is ``async_jobs/``): ``POST /v1/jobs`` (and ``POST /extract`` with ``Prefer:
respond-async``), ``GET /v1/jobs``, ``GET``/``DELETE /v1/jobs/{id}``, ``GET
/v1/jobs/{id}/result``.

Submitting makes the checks that make a bad upload a 4xx on ``/extract`` (size, emptiness, the
kind sniffed from the first bytes, the options, the format against the kind) and stores the
upload; nothing is decoded on the request path. The result is negotiated exactly as on
``/extract`` (Accept, ``?format=``) and rendered from the stored Document by the same code, so it
is byte-equal to the synchronous reply. Errors are the app's JSON errors.
"""

from __future__ import annotations

from contextlib import ExitStack
from typing import TYPE_CHECKING

from flask import Blueprint, Response, current_app, g, jsonify, request

from extractor.async_jobs.documents import read_document
from extractor.async_jobs.errors import InvalidCallback
from extractor.async_jobs.options import read_options, stored_options
from extractor.async_jobs.owners import owner_of
from extractor.async_jobs.webhook import check_callback_url, policy_of
from extractor.config import Settings
from extractor.credentials import require_identity
from extractor.errors import InvalidParameter, MissingUpload, NotAcceptable
from extractor.net.errors import OutboundError
from extractor.net.resolve import system_resolver
from extractor.pipeline.extraction import SPOOL_NAME
from extractor.pipeline.negotiate import choose_format
from extractor.pipeline.reply import (
    check_upload,
    document_reply,
    reply_name,
    reply_response,
    workspace,
)  # fmt: skip

if TYPE_CHECKING:  # imported with the job system, on first use (light.py)
    from extractor.async_jobs.extraction_jobs import ExtractionJobs
    from extractor.async_jobs.light import JobSystem

blueprint = Blueprint("async_jobs", __name__)

MAX_PAGE = 100  # most jobs one GET /v1/jobs lists
DEFAULT_PAGE = 20


def owner(settings: Settings) -> str:
    """The job owner of the request's credential (checked as on every route; kept in
    ``g.identity`` for the metrics): each named key owns its jobs, the shared secret its own."""
    g.identity = require_identity(settings, request.headers.get("Authorization"))
    return owner_of(g.identity)


def _settings() -> Settings:
    settings: Settings = current_app.config["SETTINGS"]
    return settings


def _system() -> JobSystem:
    system: JobSystem = current_app.extensions["async_jobs"]
    return system


def _jobs() -> ExtractionJobs:
    return _system().jobs()


def prefers_async() -> bool:
    """Whether the request's ``Prefer`` header (RFC 7240) asks for ``respond-async``."""
    for header in request.headers.getlist("Prefer"):
        for preference in header.split(","):
            token = preference.split(";", 1)[0].split("=", 1)[0].strip().lower()
            if token == "respond-async":
                return True
    return False


@blueprint.post("/v1/jobs")
def submit() -> Response:
    return submit_job()


def submit_job() -> Response:
    """Queue the request's upload as a job: 202, ``Location`` and the job JSON."""
    settings, jobs = _settings(), _jobs()
    submitter = owner(settings)  # checked again for /extract's hand-over: the same answer
    work = _system().work()
    upload = request.files.get("upload")
    if upload is None:
        others = ", ".join(sorted(request.files)) or "none"
        raise MissingUpload(
            "expected multipart/form-data with a file field named 'upload'"
            f" (file fields received: {others})"
        )
    fields = {**request.args.to_dict(), **request.form.to_dict()}  # a form field wins
    wanted = read_options(fields, work.limits())
    options = stored_options(wanted)
    reply_format = wanted.format
    callback_url = _checked_callback(fields.get("callback_url"), settings)
    with workspace(settings) as workdir:
        path = workdir / "upload"
        upload.save(path)
        upload.close()
        sniffed = check_upload(path, settings, g.log_fields)
        audio = sniffed.kind.value == "audio"
        choose_format(None, reply_format, settings.default_format, audio=audio)
        if audio:  # as /extract refuses them before decoding (language, speakers=auto)
            work.extractor.check_audio(wanted)
        view = jobs.submit(
            path,
            filename=reply_name(upload.filename),
            media_kind=sniffed.kind.value,
            media_format=sniffed.format,
            options=options,
            format=reply_format,
            callback_url=callback_url,
            client=request.remote_addr or "unknown",
            owner=submitter,
        )
    g.log_fields["job"] = view.record.id
    response = jsonify(view.to_json())
    response.status_code = 202
    response.headers["Location"] = f"/v1/jobs/{view.record.id}"
    if prefers_async():
        response.headers["Preference-Applied"] = "respond-async"
    return response


def _checked_callback(url: str | None, settings: Settings) -> str | None:
    """The callback URL, refused (400) unless http(s), allowed by the SSRF guard now, and
    signable (EXTRACTOR_WEBHOOK_SECRET set)."""
    if not url:
        return None
    if not settings.webhook_secret:
        raise InvalidCallback(
            "callback_url needs the server's EXTRACTOR_WEBHOOK_SECRET (its calls are signed)"
            "; poll GET /v1/jobs/{id} instead"
        )
    if len(url) > 2000:
        raise InvalidCallback("callback_url is longer than 2000 characters")
    try:
        return check_callback_url(
            url, policy_of(settings.outbound_allow), system_resolver, settings.webhook_timeout
        )
    except OutboundError as exc:
        raise InvalidCallback(f"callback_url refused: {exc}") from exc


@blueprint.get("/v1/jobs")
def list_jobs() -> Response:
    caller = owner(_settings())
    wanted = [
        name.strip().lower()
        for value in request.args.getlist("status")
        for name in value.split(",")
        if name.strip()
    ]
    from extractor.async_jobs.extraction_jobs import STATUS_OF_NAME

    unknown = [name for name in wanted if name not in STATUS_OF_NAME]
    if unknown:
        raise InvalidParameter(
            f"status must be among {', '.join(STATUS_OF_NAME)}, not {unknown[0][:40]!r}"
        )
    limit_text = request.args.get("limit") or str(DEFAULT_PAGE)
    if not limit_text.isdigit() or not 1 <= int(limit_text) <= MAX_PAGE:
        raise InvalidParameter(f"limit must be a whole number from 1 to {MAX_PAGE}")
    views, after = _jobs().page(
        caller, statuses=wanted, limit=int(limit_text), after=request.args.get("after") or None
    )
    return jsonify(
        object="list",
        data=[view.to_json() for view in views],
        next=after,
        has_more=after is not None,
    )


@blueprint.get("/v1/jobs/<job_id>")
def get_job(job_id: str) -> Response:
    return jsonify(_jobs().require(job_id, owner(_settings())).to_json())


@blueprint.delete("/v1/jobs/<job_id>")
def delete_job(job_id: str) -> Response:
    caller = owner(_settings())
    before = _jobs().require(job_id, caller)
    view = _jobs().cancel(before.record.id, caller)
    return jsonify({**view.to_json(), "deleted": before.ended})


@blueprint.get("/v1/jobs/<job_id>/result")
def job_result(job_id: str) -> Response:
    settings = _settings()
    stored = _jobs().result(job_id, owner(settings))
    reply_format = choose_format(
        request.headers.get("Accept"),
        request.args.get("format") or stored.format,
        settings.default_format,
        audio=stored.media_kind == "audio",
    )
    g.log_fields.update(kind=stored.media_kind, format=reply_format.name)
    if reply_format.scanned:  # drawn over the upload's pages while the job ran
        return _stored_pdf(job_id, reply_format.media_type)
    # As a long /extract reply: lines read back into a spool in a workspace, the reply written
    # into a file there and sent from it, the workspace closed with the response's body.
    held = ExitStack()
    try:
        workdir = held.enter_context(workspace(settings))
        document = read_document(stored.packed, workdir / SPOOL_NAME)
        response = reply_response(document_reply(document, reply_format, workdir, settings), held)
    except BaseException:
        held.close()
        raise
    response.vary.add("Accept")
    return response


def _stored_pdf(job_id: str, media_type: str) -> Response:
    """The job's searchable PDF, as its run stored it (``store.save_pdf``), a piece at a time:
    only a job submitted with ``format=pdf`` has one (its upload is gone once it ended)."""
    # Here, not at the top: the store imports SQLAlchemy, which a worker loads with the job
    # system on its first job route (async_jobs/light.py), never at start.
    from extractor.async_jobs.store import pdf_pieces, pdf_size

    db = _jobs().db
    stored = pdf_size(db, job_id)
    if stored is None:
        message = f"job {job_id} drew no PDF: submit the upload with format=pdf to get one"
        if request.args.get("format"):
            raise InvalidParameter(message, param="format")
        raise NotAcceptable(message)
    pieces, size = stored
    response = Response(pdf_pieces(db, job_id, pieces), content_type=media_type)
    response.headers["Content-Length"] = str(size)
    response.vary.add("Accept")
    return response

"""Reading a createProject request's uploads, refused before any job is queued when they
exceed a limit (files, bytes, lines and tokens of text)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from extractor.config import LabelingSettings
from extractor.labeling.documents import DocumentTooLarge, TextBudget, decode_text
from extractor.labeling.errors import JobFailure, LimitExceededError
from extractor.labeling.inputs import upload_name

# Project kinds made by an extraction API, and the purpose that API must have.
PURPOSE_FOR_KIND = {"OCR": "OCR_API", "AUDIO": "ASR_API"}


def read_uploads(
    settings: LabelingSettings, kind: str, uploads: Sequence[Any]
) -> list[tuple[str, bytes]]:
    """Each upload's file name and bytes, refused here, before any job, when over a limit.

    Text files are measured whole (bytes, then lines and tokens, nothing kept) so a project
    that could not be built is never queued. One file mapped to several variables is a
    single object: it is rewound and read for each of them, and counted each time.
    """
    if len(uploads) > settings.max_project_documents:
        raise LimitExceededError.of_setting(
            settings, "max_project_documents", f"A project of {len(uploads)} files is too big"
        )
    is_text = kind not in PURPOSE_FOR_KIND
    # Duplicates aside, the request limit already bounds what the files add up to.
    total_name = "max_project_bytes" if is_text else "max_upload_bytes"
    budget = TextBudget.from_settings(settings)
    read: list[tuple[str, bytes]] = []
    total = 0
    # One file mapped to many documents is read once and its bytes shared: a 104 KB file
    # mapped to 500 documents was 500 copies (+100 MB with their inserts, issue 18).
    already: dict[int, bytes] = {}
    for position, upload in enumerate(uploads):
        name = upload_name(upload, position)
        known = already.get(id(upload))
        if known is not None:
            content = known
        else:
            if hasattr(upload, "seek"):
                upload.seek(0)
            if is_text:
                content = upload.read(settings.max_document_bytes + 1)
                if len(content) > settings.max_document_bytes:
                    raise LimitExceededError.of_setting(
                        settings, "max_document_bytes", f"{name!r} is too long"
                    )
            else:
                content = upload.read()
            already[id(upload)] = content
        total += len(content)
        if total > getattr(settings, total_name):
            raise LimitExceededError.of_setting(
                settings, total_name, "The project's files are too long together"
            )
        if is_text:
            try:
                text = decode_text(content, repr(name))
            except JobFailure:
                text = ""  # not text: the job fails with the reason, as it always did
            try:
                budget.measure(name, text)
            except DocumentTooLarge as exc:
                raise LimitExceededError(
                    exc.message, limit=LabelingSettings.variable(exc.field), maximum=exc.maximum
                ) from exc
        read.append((name, content))
    return read

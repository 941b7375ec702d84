"""The AutoLabel job: send a token-based project to a prediction API and keep its spans.

Wire format (REFERENCE §2): each request carries one document's lines as ``sentences``; the
model answers character spans per sentence, which become SPAN labels on the tokens they touch.
Batches are one document each: ``numberOfFilesPerRequest`` 0 sends a whole document, N > 0 at
most N of its lines; requests never mix documents, so a reply maps back without ambiguity.

Each batch's labels are stored in their own ``job_results`` row, with the count of batches done
as the checkpoint, in one transaction: a checkpoint writes what one batch found, never all the
labels so far (which made checkpoints quadratic), and a resumed job skips the batches already
answered. The labels are appended to the documents only at delivery, in one transaction.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from functools import cache
from typing import Any

import jsonschema
from sqlalchemy import select
from sqlalchemy.orm import Session

from extractor.jobs import JobRun, step_results
from extractor.labeling.clients import ExtractorClient
from extractor.labeling.config import LabelingSettings, setting_variable
from extractor.labeling.db import Database
from extractor.labeling.documents import Entity, sentences, span_label
from extractor.labeling.errors import JobFailure
from extractor.labeling.models import Document, Project
from extractor.labeling.reply_json import prediction_limits

log = logging.getLogger(__name__)

KIND = "AutoLabel"

# What a prediction API must answer; checked before any span is read.
PREDICTION_REPLY_SCHEMA: dict[str, Any] = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "type": "object",
    "required": ["documents"],
    "properties": {
        "id": {"type": ["string", "integer"]},
        "documents": {
            "type": "array",
            "items": {
                "type": "object",
                "required": ["id", "labels"],
                "properties": {
                    "id": {"type": "string"},
                    "labels": {
                        "type": "array",
                        "items": {
                            "type": "object",
                            "required": ["id", "entities"],
                            "properties": {
                                "id": {"type": "integer", "minimum": 0},
                                "entities": {
                                    "type": "array",
                                    "items": {
                                        "type": "object",
                                        "required": ["label", "start_char", "end_char"],
                                        "properties": {
                                            "label": {"type": "string", "minLength": 1},
                                            "start_char": {"type": "integer", "minimum": 0},
                                            "end_char": {"type": "integer", "minimum": 0},
                                            "layer": {"type": "integer", "minimum": 0},
                                            "confidence_score": {"type": "number"},
                                        },
                                    },
                                },
                            },
                        },
                    },
                },
            },
        },
    },
}


@cache
def reply_validator() -> jsonschema.protocols.Validator:
    """One validator for prediction replies, built once."""
    validator_class = jsonschema.validators.validator_for(PREDICTION_REPLY_SCHEMA)
    validator_class.check_schema(PREDICTION_REPLY_SCHEMA)
    return validator_class(PREDICTION_REPLY_SCHEMA)


@dataclass(frozen=True)
class Batch:
    """Lines of one document sent in one request."""

    document_id: str
    file_name: str
    cells: list[dict[str, Any]]


def plan_batches(
    documents: list[tuple[str, str, list[dict[str, Any]]]], lines_per_request: int
) -> list[Batch]:
    """Split each document's cells into requests, in document then line order."""
    batches: list[Batch] = []
    for document_id, file_name, cells in documents:
        if not cells:
            continue
        size = lines_per_request or len(cells)
        for start in range(0, len(cells), size):
            batches.append(Batch(document_id, file_name, cells[start : start + size]))
    return batches


def parse_reply(
    reply: Any,
    batch: Batch,
    labeler: str,
    batch_number: int,
    max_entities: int = LabelingSettings.max_prediction_entities,
) -> list[dict[str, Any]]:
    """The SPAN labels a prediction reply gives for ``batch``; garbage fails the job.

    Validation stops at the first error (``iter_errors`` is lazy): a reply wrong in a million
    places costs one error, not a million collected and sorted. Entities are counted as they
    are read, and the one past ``max_entities`` fails the job before its label is made.
    """
    error = next(iter(reply_validator().iter_errors(reply)), None)
    if error is not None:
        where = "/".join(str(part) for part in error.absolute_path) or "(root)"
        raise JobFailure(
            f"the prediction API's reply to batch {batch_number} is malformed: at {where}: "
            f"{error.message[:300]}",
            batch=batch_number,
            path=where,
        )
    by_line = {c["line"]: c for c in batch.cells}
    labels: list[dict[str, Any]] = []
    entities = 0
    for document_index, document in enumerate(reply["documents"]):
        if document["id"] != batch.document_id:
            raise JobFailure(
                f"the prediction API answered for document {document['id']!r}, "
                f"which batch {batch_number} did not send",
                batch=batch_number,
            )
        for sentence_index, sentence in enumerate(document["labels"]):
            cell = by_line.get(sentence["id"])
            if cell is None:
                raise JobFailure(
                    f"the prediction API labeled sentence {sentence['id']}, "
                    f"which batch {batch_number} did not send",
                    batch=batch_number,
                )
            for entity_index, raw in enumerate(sentence["entities"]):
                entities += 1
                if entities > max_entities:
                    where = f"documents/{document_index}/labels/{sentence_index}/entities"
                    raise JobFailure(
                        f"the prediction API's reply to batch {batch_number} has more than "
                        f"{max_entities} entities, the limit of one reply "
                        f"({setting_variable('max_prediction_entities')}), at "
                        f"{where}/{entity_index}",
                        batch=batch_number,
                        path=f"{where}/{entity_index}",
                        limit=setting_variable("max_prediction_entities"),
                        maximum=max_entities,
                    )
                entity = Entity(
                    label=raw["label"],
                    start=raw["start_char"],
                    end=raw["end_char"],
                    layer=raw.get("layer", 0),
                    confidence=raw.get("confidence_score"),
                )
                if not entity.start < entity.end <= len(cell["content"]):
                    raise JobFailure(
                        f"the prediction API sent span {entity.start}..{entity.end} outside "
                        f"sentence {sentence['id']} ({len(cell['content'])} characters)",
                        batch=batch_number,
                    )
                label = span_label(cell, entity, labeler)
                if label is None:
                    log.info("span %s of line %s covers no token", entity, cell["line"])
                    continue
                labels.append({"documentId": batch.document_id, "label": label})
    return labels


class AutoLabelJob:
    """Runs an ``autoLabelTokenBasedProject`` request against the customer's prediction API."""

    kind = KIND

    def __init__(self, db: Database, client: ExtractorClient) -> None:
        self.db = db
        self.client = client

    def run(self, run: JobRun) -> None:
        """Send every batch not yet answered, storing each one's labels, then append them all.

        Batch N's labels are step N (step 0 holds labels checkpointed before migration 0002).
        """
        payload = run.job.payload
        settings = self.client.settings
        project_name, documents = self._project(payload["projectId"])
        batches = plan_batches(documents, payload["numberOfFilesPerRequest"])
        done: int = (run.job.checkpoint or {}).get("batchesDone", 0)
        if done:
            log.info("job %s resumes after %d of %d batches", run.job.id, done, len(batches))
        for number in range(done, len(batches)):
            run.check()
            batch = batches[number]
            request = {
                "id": payload["projectId"],
                "name": project_name,
                "documents": [
                    {
                        "id": batch.document_id,
                        "fileName": batch.file_name,
                        "sentences": sentences(batch.cells),
                    }
                ],
            }
            reply = self.client.predict(payload["endpoint"], request, payload["secretKey"])
            labels = parse_reply(
                reply.json("the prediction API", prediction_limits(settings)),
                batch,
                payload["labelerEmail"],
                number + 1,
                settings.max_prediction_entities,
            )
            run.progress(
                int(100 * (number + 1) / len(batches)),
                {"batchesDone": number + 1},
                result=(number + 1, labels),
            )
            if number + 1 < len(batches):
                run.share_point()

        def write(session: Session) -> str:
            project = session.get(Project, payload["projectId"])
            if project is None:
                raise JobFailure("the project no longer exists")
            by_document: dict[str, list[dict[str, Any]]] = {}
            for labels in step_results(session, run.job.id):
                for item in labels:
                    by_document.setdefault(item["documentId"], []).append(item["label"])
            rows = session.scalars(
                select(Document).where(Document.project_id == project.id).with_for_update()
            )
            for document in rows:
                new = by_document.get(document.id)
                if new:
                    importable = dict(document.importable)
                    importable["labels"] = [*importable.get("labels", []), *new]
                    document.importable = importable  # a new object, so the change is seen
            return project.id

        run.succeed(write)

    def _project(self, project_id: str) -> tuple[str, list[tuple[str, str, list[dict[str, Any]]]]]:
        with self.db.session() as session:
            project = session.get(Project, project_id)
            if project is None:
                raise JobFailure("the project no longer exists")
            return project.name, [
                (d.id, d.name, list(d.importable.get("cells", []))) for d in project.documents
            ]

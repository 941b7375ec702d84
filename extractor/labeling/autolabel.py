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
from sqlalchemy.orm import Session

from extractor.config import LabelingSettings
from extractor.jobs import JobRun, iter_step_results
from extractor.labeling.clients import ExtractorClient
from extractor.labeling.db import Database
from extractor.labeling.documents import Entity, sentences, span_label
from extractor.labeling.errors import JobFailure
from extractor.labeling.models import Document, Project
from extractor.labeling.project_contents import LabelBudget, document_cells, outline
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


@dataclass(frozen=True)
class PlannedBatch:
    """Where a batch's lines are: document, file name, and its slice [start, stop) of cells;
    the cells themselves are read when the batch is sent, one document at a time."""

    document_id: str
    file_name: str
    start: int
    stop: int


def plan_batches(
    documents: list[tuple[str, str, int]], lines_per_request: int
) -> list[PlannedBatch]:
    """Split each document's ``(id, file name, line count)`` into requests, in document then
    line order."""
    batches: list[PlannedBatch] = []
    for document_id, file_name, lines in documents:
        if not lines:
            continue
        size = lines_per_request or lines
        for start in range(0, lines, size):
            batches.append(PlannedBatch(document_id, file_name, start, min(start + size, lines)))
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
                        f"({LabelingSettings.variable('max_prediction_entities')}), at "
                        f"{where}/{entity_index}",
                        batch=batch_number,
                        path=f"{where}/{entity_index}",
                        limit=LabelingSettings.variable("max_prediction_entities"),
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
        Only the current document's cells and one batch's labels are held at a time, and the
        labels each document receives are charged to a :class:`LabelBudget`.
        """
        payload = run.job.payload
        settings = self.client.settings
        with self.db.session() as session:
            project = session.get(Project, payload["projectId"])
            if project is None:
                raise JobFailure("the project no longer exists")
            project_name = project.name
            documents = outline(session, project.id)
        batches = plan_batches(
            [(d.id, d.name, d.lines) for d in documents], payload["numberOfFilesPerRequest"]
        )
        budget = LabelBudget.starting(settings, documents)
        done: int = (run.job.checkpoint or {}).get("batchesDone", 0)
        if done:
            log.info("job %s resumes after %d of %d batches", run.job.id, done, len(batches))
            self._charge_stored(run.job.id, budget, {d.id: d.name for d in documents})
        loaded: tuple[str | None, list[dict[str, Any]]] = (None, [])
        for number in range(done, len(batches)):
            run.check()
            planned = batches[number]
            if loaded[0] != planned.document_id:
                loaded = (None, [])  # the previous document's cells go before these are read
                with self.db.session() as session:
                    loaded = (planned.document_id, document_cells(session, planned.document_id))
            batch = Batch(
                planned.document_id, planned.file_name, loaded[1][planned.start : planned.stop]
            )
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
            del reply
            budget.charge(batch.document_id, batch.file_name, len(labels), number + 1)
            run.progress(
                int(100 * (number + 1) / len(batches)),
                {"batchesDone": number + 1},
                result=(number + 1, labels),
            )
            if number + 1 < len(batches):
                run.share_point()
        del loaded

        def write(session: Session) -> str:
            """Append each document's new labels, one document at a time: the step results
            are read in order and a document is written (and dropped) when the next begins."""
            project = session.get(Project, payload["projectId"])
            if project is None:
                raise JobFailure("the project no longer exists")
            current: str | None = None
            pending: list[dict[str, Any]] = []
            for labels in iter_step_results(session, run.job.id):
                for item in labels:
                    if item["documentId"] != current:
                        _append_labels(session, project.id, current, pending)
                        current, pending = item["documentId"], []
                    pending.append(item["label"])
            _append_labels(session, project.id, current, pending)
            return project.id

        run.succeed(write)

    def _charge_stored(self, job_id: str, budget: LabelBudget, names: dict[str, str]) -> None:
        """Charge the labels of the batches a resumed job already stored."""
        with self.db.session() as session:
            for step, labels in enumerate(iter_step_results(session, job_id)):
                counts: dict[str, int] = {}
                for item in labels:
                    counts[item["documentId"]] = counts.get(item["documentId"], 0) + 1
                for document_id, count in counts.items():
                    budget.charge(document_id, names.get(document_id, document_id), count, step)


def _append_labels(
    session: Session, project_id: str, document_id: str | None, labels: list[dict[str, Any]]
) -> None:
    """Append ``labels`` to one document of the project (locked for the update), then drop it
    from the session so that delivery holds one document at a time."""
    if document_id is None or not labels:
        return
    document = session.get(Document, document_id, with_for_update=True)
    if document is None or document.project_id != project_id:
        return
    importable = dict(document.importable)
    importable["labels"] = [*importable.get("labels", []), *labels]
    document.importable = importable  # a new object, so the change is seen
    session.flush()
    session.expunge(document)

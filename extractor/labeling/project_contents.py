"""What an auto-labeling job needs to know of a project without holding it: each document's
line and label counts (counted by the database), one document's cells at a time, and the
labels budget that keeps a hostile prediction API from growing documents without end.

A project at the line and token limits is ~100 MB of Python objects and a delivery of 400,000
labels was +1 GB (issue 18): so nothing here loads more than one document at once.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from extractor.config import LabelingSettings
from extractor.labeling.errors import JobFailure
from extractor.labeling.models import Document


@dataclass(frozen=True)
class DocumentOutline:
    """A document as a job plans it: its id, file name, and counts of cells and labels."""

    id: str
    name: str
    lines: int
    labels: int


def json_array_length(session: Session, key: str) -> Any:
    """SQL for the length of ``importable[key]`` (0 when absent), on SQLite or PostgreSQL."""
    bind = session.get_bind()
    if bind.dialect.name == "postgresql":
        length = func.json_array_length(Document.importable.op("->")(key))
    else:
        length = func.json_array_length(Document.importable, f"$.{key}")
    return func.coalesce(length, 0)


def outline(session: Session, project_id: str) -> list[DocumentOutline]:
    """The project's documents in order, with their cell and label counts, counted in SQL."""
    rows = session.execute(
        select(
            Document.id,
            Document.name,
            json_array_length(session, "cells"),
            json_array_length(session, "labels"),
        )
        .where(Document.project_id == project_id)
        .order_by(Document.position)
    )
    return [
        DocumentOutline(id_, name, int(lines), int(labels)) for id_, name, lines, labels in rows
    ]


def document_cells(session: Session, document_id: str) -> list[dict[str, Any]]:
    """One document's cells (its labels are not read)."""
    importable = session.scalar(select(Document.importable).where(Document.id == document_id))
    return list((importable or {}).get("cells", []))


@dataclass
class LabelBudget:
    """Labels the documents of one project may still receive, charged batch by batch.

    Starts from the labels the documents hold already (``outline``); a batch whose labels would
    take its document past ``max_document_labels``, or the project past
    ``max_project_labels``, fails the job naming the document and the limit before its labels
    are stored.
    """

    max_document_labels: int
    max_project_labels: int
    per_document: dict[str, int] = field(default_factory=dict)
    project: int = 0

    @classmethod
    def starting(cls, settings: LabelingSettings, documents: list[DocumentOutline]) -> LabelBudget:
        """A budget holding what ``documents`` already have."""
        budget = cls(settings.max_document_labels, settings.max_project_labels)
        for document in documents:
            budget.per_document[document.id] = document.labels
            budget.project += document.labels
        return budget

    def charge(self, document_id: str, name: str, count: int, batch: int) -> None:
        """Add ``count`` labels to a document, or fail the job if a limit would be crossed."""
        held = self.per_document.get(document_id, 0) + count
        if held > self.max_document_labels:
            raise self._failure(
                f"would give {name!r} {held} labels, more than {self.max_document_labels}",
                "max_document_labels",
                self.max_document_labels,
                batch,
                name,
            )
        if self.project + count > self.max_project_labels:
            raise self._failure(
                f"would give the project {self.project + count} labels, more than "
                f"{self.max_project_labels}",
                "max_project_labels",
                self.max_project_labels,
                batch,
                name,
            )
        self.per_document[document_id] = held
        self.project += count

    @staticmethod
    def _failure(what: str, setting: str, maximum: int, batch: int, name: str) -> JobFailure:
        variable = LabelingSettings.variable(setting)
        return JobFailure(
            f"the prediction API's reply to batch {batch} {what}, the limit ({variable})",
            batch=batch,
            document=name,
            limit=variable,
            maximum=maximum,
        )

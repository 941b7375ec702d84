"""The CreateProject job: turn uploads into documents (through a custom API for OCR and audio).

The project row is written only when the job succeeds, in the same transaction that marks it
DELIVERED: until then nobody can see a project, and a failed job leaves nothing behind. Each
document built is kept as a step result (``job_results``) meanwhile, so a resumed job, after a
restart or after handing its worker to another team, goes on with the next upload instead of
sending the custom API the finished ones again.
"""

from __future__ import annotations

import logging
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from extractor.jobs import JobQueue, JobRun, Upload, iter_step_results
from extractor.labeling.clients import ExtractorClient
from extractor.labeling.db import Database
from extractor.labeling.documents import (
    TextBudget,
    decode_text,
    importable_from_reply,
    importable_from_text,
)
from extractor.labeling.errors import JobFailure
from extractor.labeling.models import CustomAPI, Document, Project, Tag
from extractor.labeling.reply_json import extraction_limits

log = logging.getLogger(__name__)

KIND = "CreateProject"


class CreateProjectJob:
    """Builds every document, then creates the project, its documents and tags at once."""

    kind = KIND

    def __init__(self, queue: JobQueue, db: Database, client: ExtractorClient) -> None:
        self.queue = queue
        self.db = db
        self.client = client

    def _budget(self, job_id: str, done: int) -> TextBudget:
        """The project's text budget, charged with what a resumed run already built."""
        budget = TextBudget.from_settings(self.client.settings)
        if done:
            with self.db.session() as session:
                for result in iter_step_results(session, job_id):
                    cells = result["importable"]["cells"]
                    budget.project_lines += len(cells)
                    budget.project_tokens += sum(len(cell["tokens"]) for cell in cells)
        return budget

    def run(self, run: JobRun) -> None:
        """Extract each upload not yet done, in order, storing each document; then deliver."""
        payload = run.job.payload
        kind = payload["kind"]
        uploads = self.queue.upload_count(run.job.id)
        api = self._custom_api(payload) if kind in ("OCR", "AUDIO") else None
        done: int = (run.job.checkpoint or {}).get("uploadsDone", 0)
        budget = self._budget(run.job.id, done)  # lines and tokens (issue 11)
        for index in range(done, uploads):
            run.check()
            upload = self.queue.upload(run.job.id, index)  # one at a time: 500 x 100 KB is 50 MB
            if api is None:
                text = decode_text(upload.content, f"{upload.filename!r}")
                importable = importable_from_text(upload.filename, kind, text, budget)
            else:
                importable = self._extract(api, kind, upload, budget)
            run.progress(
                int(100 * (index + 1) / uploads),
                {"uploadsDone": index + 1},
                result=(index, {"name": upload.filename, "importable": importable}),
            )
            if index + 1 < uploads:
                run.share_point()

        def write(session: Session) -> str:
            """Create the project, then its documents one by one from the step results: each is
            inserted and dropped from the session before the next is read, so delivery holds
            one document, not the project (500 documents were +500 MB at once)."""
            project = Project(
                name=payload["name"],
                kind=kind,
                team_id=payload.get("teamId"),
                owner_id=run.job.owner_id,
            )
            tag_ids = payload.get("tagIds") or []
            if tag_ids:
                project.tags = list(session.scalars(select(Tag).where(Tag.id.in_(tag_ids))))
            session.add(project)
            session.flush()
            for index, built in enumerate(iter_step_results(session, run.job.id)):
                document = Document(
                    project_id=project.id,
                    position=index,
                    name=built["name"],
                    importable=built["importable"],
                )
                session.add(document)
                session.flush()
                session.expunge(document)
                del built, document
            return project.id  # the queue deletes the uploads as the job succeeds

        run.succeed(write)

    def _custom_api(self, payload: dict[str, Any]) -> CustomAPI:
        with self.db.session() as session:
            api = session.get(CustomAPI, payload["customAPIId"])
            if api is None or api.team_id != payload.get("teamId"):
                raise JobFailure("the project's custom API no longer exists")
            session.expunge(api)
            return api

    def _extract(
        self, api: CustomAPI, kind: str, upload: Upload, budget: TextBudget
    ) -> dict[str, Any]:
        reply = self.client.extract(
            api.endpoint_url, upload.filename, upload.content, api.secret_token
        )
        importable = importable_from_reply(
            upload.filename,
            kind,
            reply.content_type,
            reply.content,
            reply.charset,
            budget,
            extraction_limits(self.client.settings),
        )
        if not importable["cells"]:
            log.info("custom API %s found no text in %r", api.id, upload.filename)
        return importable

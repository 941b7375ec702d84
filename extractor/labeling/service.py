"""What each GraphQL operation does, for one authenticated caller.

Visibility is decided here and nowhere else: personal things are the caller's own, team things
are visible to members only, and what the caller cannot see does not exist for them (``null``
or NOT_FOUND, never a hint). Custom-API capabilities are team-only (spec §5).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from extractor.config import LabelingSettings
from extractor.heap import trim_heap
from extractor.jobs import JobQueue, OwnerCapReached
from extractor.labeling.auth import Caller, normalize_email
from extractor.labeling.autolabel import KIND as AUTO_LABEL
from extractor.labeling.credentials import SecretBox, seal_field
from extractor.labeling.db import Database
from extractor.labeling.errors import (
    ForbiddenError,
    LimitExceededError,
    NotFoundError,
    SecretsUnavailableError,
    UserInputError,
)
from extractor.labeling.inputs import checked_name, checked_secret, checked_url
from extractor.labeling.models import CustomAPI, Document, Project, Tag, User, team_members
from extractor.labeling.objects import custom_api_view, job_view, project_view, tag_view
from extractor.labeling.project_jobs import KIND as CREATE_PROJECT
from extractor.labeling.quotas import reserve_custom_api, reserve_tag
from extractor.labeling.replies import measure_documents
from extractor.labeling.uploads import PURPOSE_FOR_KIND, read_uploads

log = logging.getLogger(__name__)

# Uploads stored by one request from which the heap is trimmed afterwards (~1 ms).
TRIM_AFTER_UPLOAD_BYTES = 8 * 1024 * 1024

# Payload keys the queue drops when a job ends: a finished job keeps no credential.
SECRET_PAYLOAD_KEYS = frozenset({"secretKey"})


class LabelingService:
    """The operations of the GraphQL schema over one database and job queue."""

    def __init__(
        self,
        db: Database,
        queue: JobQueue,
        settings: LabelingSettings | None = None,
        *,
        secrets: SecretBox | None = None,
    ) -> None:
        self.db = db
        self.queue = queue
        self.settings = settings or LabelingSettings()
        # Seals custom API secrets; None: this deployment has no key and stores none.
        self.secrets = secrets

    # -- teams ----------------------------------------------------------------------------

    @staticmethod
    def require_member(caller: Caller, team_id: str | None) -> str:
        """The team id when the caller is a member, else FORBIDDEN (unknown teams alike)."""
        if team_id is None or not caller.is_member(str(team_id)):
            raise ForbiddenError("You are not a member of this team")
        return str(team_id)

    # -- tags -----------------------------------------------------------------------------

    def personal_tags(self, caller: Caller) -> list[dict[str, Any]]:
        """The caller's own tags, by name."""
        with self.db.session() as session:
            tags = session.scalars(
                select(Tag).where(Tag.user_id == caller.user_id).order_by(Tag.name, Tag.id)
            )
            return [tag_view(tag) for tag in tags]

    def team_tags(self, caller: Caller, team_id: str) -> list[dict[str, Any]]:
        """A team's tags, for its members only."""
        team_id = self.require_member(caller, team_id)
        with self.db.session() as session:
            tags = session.scalars(
                select(Tag).where(Tag.team_id == team_id).order_by(Tag.name, Tag.id)
            )
            return [tag_view(tag) for tag in tags]

    def create_tag(self, caller: Caller, name: str, team_id: str | None) -> dict[str, Any]:
        """A personal tag, or a team tag when ``team_id`` is given; names unique per owner."""
        name = checked_name(name, "A tag name")
        owner = (
            Tag.team_id == self.require_member(caller, team_id)
            if team_id is not None
            else Tag.user_id == caller.user_id
        )
        with self.db.session() as session:
            if session.scalar(select(Tag.id).where(owner, Tag.name == name)) is not None:
                raise UserInputError(f"A tag named {name!r} already exists")
            reserve_tag(
                session,
                self.settings,
                user_id=caller.user_id,
                team_id=None if team_id is None else str(team_id),
            )
            tag = (
                Tag(name=name, team_id=str(team_id))
                if team_id is not None
                else Tag(name=name, user_id=caller.user_id)
            )
            session.add(tag)
            session.flush()
            return tag_view(tag)

    # -- custom APIs ----------------------------------------------------------------------

    def custom_apis(
        self, caller: Caller, team_id: str, purpose: str | None
    ) -> list[dict[str, Any]]:
        """A team's custom APIs, optionally of one purpose."""
        team_id = self.require_member(caller, team_id)
        with self.db.session() as session:
            query = select(CustomAPI).where(CustomAPI.team_id == team_id)
            if purpose is not None:
                query = query.where(CustomAPI.purpose == purpose)
            apis = session.scalars(query.order_by(CustomAPI.name, CustomAPI.id))
            return [custom_api_view(api) for api in apis]

    def create_custom_api(
        self, caller: Caller, team_id: str, fields: dict[str, Any]
    ) -> dict[str, Any]:
        """Register a team's extraction API; the secret is stored to be sent, never shown."""
        team_id = self.require_member(caller, team_id)
        secret = checked_secret(fields.get("secret"), "secret")
        sealed: str | None = None
        if secret is not None:
            if self.secrets is None:
                raise SecretsUnavailableError()
            sealed = self.secrets.seal(secret)
        api = CustomAPI(
            team_id=team_id,
            name=checked_name(fields["name"], "A custom API name"),
            endpoint_url=checked_url(fields["endpointURL"], "endpointURL"),
            secret_token=sealed,
            purpose=fields["purpose"],
            created_by=caller.user_id,
        )
        with self.db.session() as session:
            reserve_custom_api(session, self.settings, team_id)
            session.add(api)
            session.flush()
            return custom_api_view(api)

    # -- jobs -----------------------------------------------------------------------------

    def job(self, caller: Caller, job_id: str) -> dict[str, Any] | None:
        """A job the caller started, or None."""
        return self.jobs(caller, [job_id])[0]

    def jobs(self, caller: Caller, job_ids: Sequence[str]) -> list[dict[str, Any] | None]:
        """The caller's jobs in the order asked, None where unknown or someone else's."""
        return [
            None if job is None else job_view(job)
            for job in self.queue.get(caller.user_id, job_ids)
        ]

    def enqueue(
        self, session: Session, caller: Caller, kind: str, payload: dict[str, Any], **options: Any
    ) -> dict[str, Any]:
        """Queue a job of the caller in ``session``'s transaction, counted against the
        caller's unfinished jobs and, for fair claims, against its team (``teamId`` of the
        payload) or the caller alone."""
        team = payload.get("teamId")
        try:
            record = self.queue.enqueue(
                session,
                kind,
                caller.user_id,
                payload,
                tenant=f"team:{team}" if team else f"user:{caller.user_id}",
                max_unfinished=self.settings.max_queued_jobs_per_user,
                **options,
            )
        except OwnerCapReached as exc:
            raise LimitExceededError.of_setting(
                self.settings,
                "max_queued_jobs_per_user",
                f"You have {exc.unfinished} unfinished jobs; wait for one to end",
            ) from exc
        return job_view(record)

    # -- projects -------------------------------------------------------------------------

    def project(self, caller: Caller, project_id: str) -> dict[str, Any] | None:
        """A delivered project the caller can see, or None."""
        with self.db.session() as session:
            project = session.get(Project, str(project_id))
            if project is None or not self._can_see(caller, project):
                return None
            return project_view(project)

    def documents(self, project_id: str, offset: int, limit: int) -> list[dict[str, Any]]:
        """One page of a project's documents, in upload order, for a project already shown:
        each one's id, name and stored size, never its cells (see :mod:`replies`)."""
        if offset < 0:
            raise UserInputError("documents offset must be 0 or more")
        if limit < 0:
            raise UserInputError("documents limit must be 0 or more")
        if limit > self.settings.max_documents_page:
            raise LimitExceededError.of_setting(
                self.settings, "max_documents_page", f"A page of {limit} documents is too long"
            )
        with self.db.session() as session:
            rows = session.execute(
                select(Document.id, Document.name, Document.size_bytes)
                .where(Document.project_id == project_id)
                .order_by(Document.position, Document.id)
                .offset(offset)
                .limit(limit)
            ).all()
            unmeasured = [row.id for row in rows if row.size_bytes is None]
            measured = measure_documents(session, unmeasured) if unmeasured else {}
            return [
                {"id": row.id, "name": row.name, "size": measured.get(row.id, row.size_bytes)}
                for row in rows
            ]

    def document_count(self, project_id: str) -> int:
        """How many documents a project already shown has (to page through them)."""
        with self.db.session() as session:
            count = session.scalar(
                select(func.count()).select_from(Document).where(Document.project_id == project_id)
            )
            return int(count or 0)

    @staticmethod
    def _can_see(caller: Caller, project: Project) -> bool:
        if project.team_id is None:
            return project.owner_id == caller.user_id
        return caller.is_member(project.team_id)

    def create_project(self, caller: Caller, fields: dict[str, Any]) -> dict[str, Any]:
        """Queue the creation of a project from uploads; the job delivers the project id."""
        name = checked_name(fields["name"], "A project name")
        kind = fields["kind"]
        team_id = fields.get("teamId")
        if team_id is not None:
            team_id = self.require_member(caller, team_id)
        uploads = list(fields.get("documents") or [])
        if not uploads:
            raise UserInputError("A project needs at least one document")
        if not all(hasattr(upload, "read") for upload in uploads):
            raise UserInputError("documents must be files sent as a GraphQL multipart request")
        files = read_uploads(self.settings, kind, uploads)
        custom_api_id = fields.get("customAPIId")
        tag_ids = [str(tag_id) for tag_id in dict.fromkeys(fields.get("tagIds") or [])]
        with self.db.session() as session:
            if kind in PURPOSE_FOR_KIND:
                if team_id is None:
                    raise ForbiddenError(
                        "OCR and AUDIO projects use a custom API, available in team workspaces only"
                    )
                if custom_api_id is None:
                    raise UserInputError(f"An {kind} project needs customAPIId")
                api = session.get(CustomAPI, str(custom_api_id))
                if api is None or api.team_id != team_id:
                    raise NotFoundError("Custom API not found")
                if api.purpose != PURPOSE_FOR_KIND[kind]:
                    raise UserInputError(
                        f"An {kind} project needs a {PURPOSE_FOR_KIND[kind]} custom API, "
                        f"not {api.purpose}"
                    )
            elif custom_api_id is not None:
                raise UserInputError("A TOKEN_BASED project is made from text files, no custom API")
            if tag_ids:
                tags = session.scalars(select(Tag).where(Tag.id.in_(tag_ids))).all()
                visible = {
                    tag.id
                    for tag in tags
                    if tag.user_id == caller.user_id
                    or (tag.team_id is not None and tag.team_id == team_id)
                }
                if visible != set(tag_ids):
                    raise NotFoundError("Tag not found (personal tags or the project's team tags)")
            payload = {
                "name": name,
                "kind": kind,
                "teamId": team_id,
                "customAPIId": None if custom_api_id is None else str(custom_api_id),
                "tagIds": tag_ids,
            }
            view = self.enqueue(session, caller, CREATE_PROJECT, payload, uploads=files)
        if sum(len(content) for _, content in files) >= TRIM_AFTER_UPLOAD_BYTES:
            trim_heap()  # the request thread's copies of the uploads go back to the system
        return view

    def auto_label(self, caller: Caller, fields: dict[str, Any]) -> dict[str, Any]:
        """Queue auto-labeling of a team project; returns at once, IN_PROGRESS.

        Every project kind is token-based here: OCR and AUDIO documents have cells and tokens
        too, so their lines can be sent to a model and labeled with SPANs like text files.
        """
        options = fields["options"]
        provider = options.get("serviceProvider") or "CUSTOM"
        if provider != "CUSTOM":
            raise UserInputError(f"serviceProvider {provider} is not supported; only CUSTOM is")
        per_request = options["numberOfFilesPerRequest"]
        if per_request < 0:
            raise UserInputError("numberOfFilesPerRequest must be 0 (whole documents) or more")
        target = fields["targetAPI"]
        endpoint = checked_url(target["endpoint"], "targetAPI.endpoint")
        if checked_secret(target["secretKey"], "targetAPI.secretKey") is None:
            raise UserInputError("targetAPI.secretKey must not be empty")
        labeler = normalize_email(fields["labelerEmail"])
        with self.db.session() as session:
            project = session.get(Project, str(fields["projectId"]))
            if project is None or not self._can_see(caller, project):
                raise NotFoundError("Project not found")
            if project.team_id is None:
                raise ForbiddenError("Auto-labeling with a custom model is for team projects only")
            is_member = session.scalar(
                select(User.id)
                .join(team_members, team_members.c.user_id == User.id)
                .where(User.email == labeler, team_members.c.team_id == project.team_id)
            )
            if is_member is None:
                raise UserInputError("labelerEmail is not a member of the project's team")
            payload = {
                "projectId": project.id,
                "teamId": project.team_id,  # the job's tenant for fair claims
                "labelerEmail": labeler,
                "endpoint": endpoint,
                "secretKey": seal_field(self.secrets, target["secretKey"]),
                "numberOfFilesPerRequest": per_request,
            }
            # Shown IN_PROGRESS at once, as the API always answered (still claimable).
            return self.enqueue(session, caller, AUTO_LABEL, payload, shown_running=True)

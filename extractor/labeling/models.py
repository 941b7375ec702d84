"""The labeling service's tables, as SQLAlchemy 2 declarative classes named after the domain."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import (
    JSON,
    BigInteger,
    Column,
    DateTime,
    Float,
    ForeignKey,
    Index,
    Integer,
    LargeBinary,
    MetaData,
    String,
    Table,
    Text,
    cast,
    event,
    func,
    inspect,
    update,
)
from sqlalchemy.engine import Connection
from sqlalchemy.engine.default import DefaultExecutionContext
from sqlalchemy.orm import DeclarativeBase, Mapped, Mapper, mapped_column, relationship

# Stable constraint names, so Alembic migrations can refer to them on every engine.
NAMING_CONVENTION = {
    "ix": "ix_%(column_0_label)s",
    "uq": "uq_%(table_name)s_%(column_0_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}


def new_id() -> str:
    """A fresh opaque identifier (UUID4 text) for any row."""
    return str(uuid.uuid4())


def utcnow() -> datetime:
    """Now in UTC, naive: SQLite keeps no zone, so every timestamp is stored as naive UTC."""
    return datetime.now(UTC).replace(tzinfo=None)


class Base(DeclarativeBase):
    """Declarative base carrying the naming convention."""

    metadata = MetaData(naming_convention=NAMING_CONVENTION)


team_members = Table(
    "team_members",
    Base.metadata,
    Column("team_id", String(36), ForeignKey("teams.id", ondelete="CASCADE"), primary_key=True),
    Column("user_id", String(36), ForeignKey("users.id", ondelete="CASCADE"), primary_key=True),
)

project_tags = Table(
    "project_tags",
    Base.metadata,
    Column(
        "project_id", String(36), ForeignKey("projects.id", ondelete="CASCADE"), primary_key=True
    ),
    Column("tag_id", String(36), ForeignKey("tags.id", ondelete="CASCADE"), primary_key=True),
)


class User(Base):
    """A person who calls the API with one of their access tokens."""

    __tablename__ = "users"
    id: Mapped[str] = mapped_column(String(36), primary_key=True, default=new_id)
    email: Mapped[str] = mapped_column(String(320), unique=True)
    created_at: Mapped[datetime] = mapped_column(DateTime, default=utcnow)
    teams: Mapped[list[Team]] = relationship(secondary=team_members, back_populates="members")


class Team(Base):
    """A workspace shared by its members; custom APIs exist only here."""

    __tablename__ = "teams"
    id: Mapped[str] = mapped_column(String(36), primary_key=True, default=new_id)
    name: Mapped[str] = mapped_column(String(200), unique=True)
    created_at: Mapped[datetime] = mapped_column(DateTime, default=utcnow)
    members: Mapped[list[User]] = relationship(secondary=team_members, back_populates="teams")


class AccessToken(Base):
    """A bearer token, kept only as its SHA-256 (tokens are random, so no slow hash is needed)."""

    __tablename__ = "access_tokens"
    id: Mapped[str] = mapped_column(String(36), primary_key=True, default=new_id)
    user_id: Mapped[str] = mapped_column(ForeignKey("users.id", ondelete="CASCADE"), index=True)
    token_hash: Mapped[str] = mapped_column(String(64), unique=True)
    created_at: Mapped[datetime] = mapped_column(DateTime, default=utcnow)
    # Set by `extractor labeling revoke-token`; the row stays, so the revocation is on record.
    revoked_at: Mapped[datetime | None] = mapped_column(DateTime)


class Tag(Base):
    """A label for projects: personal (``user_id``) or a team's (``team_id``), never both."""

    __tablename__ = "tags"
    id: Mapped[str] = mapped_column(String(36), primary_key=True, default=new_id)
    name: Mapped[str] = mapped_column(String(200))
    user_id: Mapped[str | None] = mapped_column(
        ForeignKey("users.id", ondelete="CASCADE"), index=True
    )
    team_id: Mapped[str | None] = mapped_column(
        ForeignKey("teams.id", ondelete="CASCADE"), index=True
    )
    created_at: Mapped[datetime] = mapped_column(DateTime, default=utcnow)


class CustomAPI(Base):
    """A team's text-extraction API; the secret is stored sealed, to be sent, never returned."""

    __tablename__ = "custom_apis"
    id: Mapped[str] = mapped_column(String(36), primary_key=True, default=new_id)
    team_id: Mapped[str] = mapped_column(ForeignKey("teams.id", ondelete="CASCADE"), index=True)
    name: Mapped[str] = mapped_column(String(200))
    endpoint_url: Mapped[str] = mapped_column(Text)
    # The secret sealed with the deployment's keys (credentials.SecretBox), None without one.
    secret_token: Mapped[str | None] = mapped_column(Text)
    # A secret stored in clear before migration 0003; sealed and cleared when the service starts.
    legacy_secret: Mapped[str | None] = mapped_column("secret", Text)
    purpose: Mapped[str] = mapped_column(String(16))
    created_by: Mapped[str] = mapped_column(ForeignKey("users.id", ondelete="CASCADE"))
    created_at: Mapped[datetime] = mapped_column(DateTime, default=utcnow)


class Project(Base):
    """A set of documents to label; it exists only once its creation job is DELIVERED."""

    __tablename__ = "projects"
    id: Mapped[str] = mapped_column(String(36), primary_key=True, default=new_id)
    name: Mapped[str] = mapped_column(String(500))
    kind: Mapped[str] = mapped_column(String(16))
    team_id: Mapped[str | None] = mapped_column(
        ForeignKey("teams.id", ondelete="CASCADE"), index=True
    )
    owner_id: Mapped[str] = mapped_column(ForeignKey("users.id", ondelete="CASCADE"), index=True)
    created_at: Mapped[datetime] = mapped_column(DateTime, default=utcnow)
    tags: Mapped[list[Tag]] = relationship(secondary=project_tags, order_by=Tag.name)
    documents: Mapped[list[Document]] = relationship(
        back_populates="project", order_by="Document.position", cascade="all, delete-orphan"
    )


class Document(Base):
    """One uploaded file of a project, kept whole in the Importable format (cells and labels)."""

    __tablename__ = "documents"
    # Everything a page of documents reads, so it never touches a document's text (0006).
    __table_args__ = (
        Index("ix_documents_page", "project_id", "position", "id", "name", "size_bytes"),
    )
    id: Mapped[str] = mapped_column(String(36), primary_key=True, default=new_id)
    project_id: Mapped[str] = mapped_column(
        ForeignKey("projects.id", ondelete="CASCADE"), index=True
    )
    position: Mapped[int] = mapped_column(Integer)
    name: Mapped[str] = mapped_column(String(500))
    importable: Mapped[dict[str, Any]] = mapped_column(JSON)
    # Bytes of ``importable`` as stored, which is what a reply of it carries: set by the
    # database itself whenever ``importable`` is written (see :func:`measure_stored_size`), so a
    # query's reply size is known from a cheap sum before any document is read.
    size_bytes: Mapped[int | None] = mapped_column(BigInteger)
    created_at: Mapped[datetime] = mapped_column(DateTime, default=utcnow)
    project: Mapped[Project] = relationship(back_populates="documents")


def stored_size(importable: Any) -> Any:
    """SQL for the bytes of a stored JSON value: the length of its text, which is ASCII (the
    JSON encoder escapes every other character), so characters are bytes on every engine."""
    return func.length(cast(importable, Text))


@event.listens_for(Document, "after_insert")
@event.listens_for(Document, "after_update")
def measure_stored_size(_mapper: Mapper[Any], connection: Connection, document: Document) -> None:
    """Record a document's ``size_bytes`` from the text just stored, in the same transaction.

    Measured by the database rather than by serializing the document a second time here, so
    the size is the stored text's by construction, whoever writes ``importable``.
    """
    if not inspect(document).attrs.importable.history.has_changes():
        return  # an update of other columns only
    connection.execute(
        update(Document)
        .where(Document.id == document.id)
        .values(size_bytes=stored_size(Document.importable))
    )


def job_tenant(context: DefaultExecutionContext) -> str:
    """Whom a new job counts against for fair scheduling: its team, else its owner alone.

    Taken from the payload's ``teamId`` (every team job carries one), so no enqueue site has to
    remember to set it.
    """
    params = context.get_current_parameters()
    payload = params.get("payload")
    team = payload.get("teamId") if isinstance(payload, dict) else None
    return f"team:{team}" if team else f"user:{params['owner_id']}"


class Job(Base):
    """A unit of background work (project creation, auto-labeling) leased by one worker at a time.

    ``locked_by``/``locked_until`` form the lease: a worker that stops heart-beating loses it and
    the job is claimed again. ``checkpoint`` keeps a small marker of what a resumed run may skip;
    the results of finished steps live in :class:`JobResult` rows, so a checkpoint costs what
    one step produced, never everything so far. ``tenant`` (``team:<id>`` or ``user:<id>``)
    and ``claimed_at`` drive fair claims; ``run_seconds`` is the worker time spent on the job
    over all its runs, held against the job deadline.
    """

    __tablename__ = "jobs"
    __table_args__ = (
        Index("ix_jobs_claim", "status", "locked_until"),
        Index("ix_jobs_tenant_status", "tenant", "status"),
        Index("ix_jobs_tenant_claimed_at", "tenant", "claimed_at"),
    )
    id: Mapped[str] = mapped_column(String(80), primary_key=True)
    kind: Mapped[str] = mapped_column(String(40))
    owner_id: Mapped[str] = mapped_column(ForeignKey("users.id", ondelete="CASCADE"), index=True)
    tenant: Mapped[str] = mapped_column(String(80), default=job_tenant)
    status: Mapped[str] = mapped_column(String(16))
    progress: Mapped[int] = mapped_column(Integer, default=0)
    errors: Mapped[list[dict[str, Any]]] = mapped_column(JSON, default=list)
    result_id: Mapped[str | None] = mapped_column(String(80))
    payload: Mapped[dict[str, Any]] = mapped_column(JSON)
    checkpoint: Mapped[dict[str, Any] | None] = mapped_column(JSON)
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    locked_by: Mapped[str | None] = mapped_column(String(120))
    locked_until: Mapped[datetime | None] = mapped_column(DateTime)
    heartbeat_at: Mapped[datetime | None] = mapped_column(DateTime)
    claimed_at: Mapped[datetime | None] = mapped_column(DateTime)
    run_seconds: Mapped[float] = mapped_column(Float, default=0.0)
    created_at: Mapped[datetime] = mapped_column(DateTime, default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(DateTime, default=utcnow)


class JobResult(Base):
    """What one finished step of a running job produced (a batch's labels, a built document).

    One row per step, written in the transaction that advances the job's checkpoint, read back
    at delivery and deleted when the job ends.
    """

    __tablename__ = "job_results"
    job_id: Mapped[str] = mapped_column(ForeignKey("jobs.id", ondelete="CASCADE"), primary_key=True)
    step: Mapped[int] = mapped_column(Integer, primary_key=True)
    data: Mapped[Any] = mapped_column(JSON)
    created_at: Mapped[datetime] = mapped_column(DateTime, default=utcnow)


class JobUpload(Base):
    """A file uploaded with ``createProject``, kept in the database until its job ends.

    The database, not a local disk, so a worker on another machine can process it.
    """

    __tablename__ = "job_uploads"
    id: Mapped[str] = mapped_column(String(36), primary_key=True, default=new_id)
    job_id: Mapped[str] = mapped_column(ForeignKey("jobs.id", ondelete="CASCADE"), index=True)
    position: Mapped[int] = mapped_column(Integer)
    filename: Mapped[str] = mapped_column(String(500))
    content: Mapped[bytes] = mapped_column(LargeBinary)

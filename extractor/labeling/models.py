"""The labeling service's tables, as SQLAlchemy 2 declarative classes named after the domain.

The jobs tables belong to the job queue (``extractor.jobs.tables``); the labeling migrations
create both, and add the jobs' foreign key to ``users``.
"""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any

from sqlalchemy import (
    JSON,
    BigInteger,
    Column,
    DateTime,
    ForeignKey,
    Index,
    Integer,
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
from sqlalchemy.orm import DeclarativeBase, Mapped, Mapper, mapped_column, relationship

from extractor.jobs import utcnow as utcnow  # one clock for every table

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

"""Alembic environment: runs migrations on the connection or URL handed over by ``db.migrate``."""

from __future__ import annotations

from alembic import context
from sqlalchemy import Connection

from extractor.jobs import JobsBase
from extractor.labeling.db import create_db_engine
from extractor.labeling.models import Base

# The labeling tables and the job queue's: these migrations create both.
target_metadata = [Base.metadata, JobsBase.metadata]


def _run(connection: Connection) -> None:
    context.configure(
        connection=connection,
        target_metadata=target_metadata,
        # SQLite cannot ALTER most things: batch mode recreates tables instead.
        render_as_batch=connection.dialect.name == "sqlite",
    )
    with context.begin_transaction():
        context.run_migrations()


def run_migrations_online() -> None:
    """Use the caller's connection if there is one, else open one on the configured URL."""
    connection = context.config.attributes.get("connection")
    if connection is not None:
        _run(connection)
        return
    engine = create_db_engine(context.config.attributes["database_url"])
    try:
        with engine.connect() as fresh:
            _run(fresh)
    finally:
        engine.dispose()


if context.is_offline_mode():
    raise SystemExit("offline (SQL script) migrations are not supported; run `migrate`")
run_migrations_online()

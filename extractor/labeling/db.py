"""The labeling database: sessions (the job queue's, with the labeling error type) and migrations.

SQLAlchemy's exceptions are translated at the session boundary into :class:`StorageError`.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from sqlalchemy import make_url, text
from sqlalchemy.exc import SQLAlchemyError

from extractor.jobs.db import Database as QueueDatabase
from extractor.jobs.db import create_db_engine as create_db_engine  # migrations use it
from extractor.labeling.errors import StorageError

log = logging.getLogger(__name__)

MIGRATIONS_DIR = Path(__file__).resolve().parent / "migrations"
# Any constant works; it only has to be the same for every process migrating one database.
_MIGRATION_LOCK_KEY = 0x1ABE1


class Database(QueueDatabase):
    """The labeling database: the queue's engine and sessions, failures raised as the labeling
    StorageError (an INTERNAL_SERVER_ERROR to GraphQL clients, "retry later" to workers)."""

    storage_error = StorageError


def alembic_config(url: str) -> Any:
    """An Alembic ``Config`` for our migrations, built in code so no alembic.ini is needed."""
    from alembic.config import Config

    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS_DIR))
    # The URL travels as an attribute: ConfigParser would choke on '%' in a password.
    config.attributes["database_url"] = url
    return config


def migrate(url: str) -> None:
    """Bring the database at ``url`` to the latest schema; safe to run from many processes."""
    from alembic import command

    config = alembic_config(url)
    engine = create_db_engine(url)
    try:
        with engine.connect() as connection:
            if engine.dialect.name == "postgresql":
                # Workers on several machines may start together: one migrates, the rest wait.
                connection.execute(
                    text("SELECT pg_advisory_lock(:key)"), {"key": _MIGRATION_LOCK_KEY}
                )
                connection.commit()
            config.attributes["connection"] = connection
            try:
                command.upgrade(config, "head")
            finally:
                if engine.dialect.name == "postgresql":
                    connection.execute(
                        text("SELECT pg_advisory_unlock(:key)"), {"key": _MIGRATION_LOCK_KEY}
                    )
                    connection.commit()
    except SQLAlchemyError as exc:
        raise StorageError(f"cannot migrate the labeling database: {exc}") from exc
    finally:
        engine.dispose()
    log.info("labeling database at head (%s)", make_url(url).render_as_string(hide_password=True))

"""Database access: engines set up per dialect, one transactional session scope, migrations.

SQLAlchemy's exceptions are translated here, at one boundary, into :class:`StorageError`.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from sqlalchemy import Engine, create_engine, event, make_url, text
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.orm import Session, sessionmaker

from extractor.labeling.errors import StorageError

log = logging.getLogger(__name__)

MIGRATIONS_DIR = Path(__file__).resolve().parent / "migrations"
# Any constant works; it only has to be the same for every process migrating one database.
_MIGRATION_LOCK_KEY = 0x1ABE1


def create_db_engine(url: str) -> Engine:
    """An engine for ``url``; SQLite gets WAL, foreign keys and write-locking transactions."""
    parsed = make_url(url)
    if parsed.get_backend_name() != "sqlite":
        return create_engine(url, pool_pre_ping=True, pool_size=10, max_overflow=10)
    database = parsed.database
    if database and database != ":memory:":
        Path(database).parent.mkdir(parents=True, exist_ok=True)
    engine = create_engine(url, connect_args={"timeout": 30, "check_same_thread": False})

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_connection: Any, _record: Any) -> None:
        # Let SQLAlchemy, not the sqlite3 module, decide when transactions begin.
        dbapi_connection.isolation_level = None
        cursor = dbapi_connection.cursor()
        cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute("PRAGMA foreign_keys=ON")
        cursor.execute("PRAGMA busy_timeout=30000")
        cursor.close()

    @event.listens_for(engine, "begin")
    def _on_begin(connection: Any) -> None:
        # IMMEDIATE takes the write lock up front: a deferred transaction that reads then writes
        # can fail at once with SQLITE_BUSY under WAL instead of waiting for busy_timeout.
        connection.exec_driver_sql("BEGIN IMMEDIATE")

    return engine


class Database:
    """An engine and its session factory, shared by the app's requests and worker threads."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.engine = create_db_engine(url)
        self._sessions = sessionmaker(self.engine, expire_on_commit=False)

    @property
    def is_postgresql(self) -> bool:
        """Whether the engine supports ``SKIP LOCKED`` and advisory locks."""
        return self.engine.dialect.name == "postgresql"

    @contextmanager
    def session(self) -> Iterator[Session]:
        """One transaction: committed on success, rolled back on any error, errors translated."""
        session = self._sessions()
        try:
            yield session
            session.commit()
        except SQLAlchemyError as exc:
            session.rollback()
            raise StorageError() from exc
        except BaseException:
            session.rollback()
            raise
        finally:
            session.close()

    def dispose(self) -> None:
        """Close every pooled connection (end of an app, a test, a worker process)."""
        self.engine.dispose()


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

"""Database access for the queue: engines set up per dialect and one transactional session
scope, SQLAlchemy's errors translated at that one boundary into :class:`StorageError`.

SQLite is set up so the queue's claims are safe without ``SKIP LOCKED``: WAL, foreign keys, and
every transaction ``BEGIN IMMEDIATE`` (writers take the lock up front, so two claims are
serialized instead of failing with SQLITE_BUSY).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, ClassVar

from sqlalchemy import Engine, create_engine, event, make_url
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.orm import Session, sessionmaker

from extractor.jobs.errors import StorageError
from extractor.jobs.tables import JobsBase


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


def create_tables(db: Database) -> None:
    """Create the queue's tables where they are missing, for a service without migrations of
    its own (the labeling service creates them in its Alembic migrations instead)."""
    JobsBase.metadata.create_all(db.engine)


class Database:
    """An engine and its session factory, shared by a service's requests and worker threads."""

    # What a database failure is raised as; a service may name its own subclass.
    storage_error: ClassVar[type[StorageError]] = StorageError

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
            raise self.storage_error() from exc
        except BaseException:
            session.rollback()
            raise
        finally:
            session.close()

    def dispose(self) -> None:
        """Close every pooled connection (end of an app, a test, a worker process)."""
        self.engine.dispose()

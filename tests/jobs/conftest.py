"""Fixtures of the job queue's tests: a fresh database holding only the queue's tables, on
SQLite and on PostgreSQL (from ``EXTRACTOR_TEST_POSTGRES_URL`` or a throwaway cluster).

The queue's own schema (``JobsBase.metadata``), not the labeling one: the package must work in
any service's database, as the extractor's asynchronous jobs will use it.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import create_engine, make_url, text

from extractor.jobs.db import Database, create_tables


def _admin(admin_url: str, statement: str) -> None:
    engine = create_engine(admin_url, isolation_level="AUTOCOMMIT")
    try:
        with engine.connect() as connection:
            connection.execute(text(statement))
    finally:
        engine.dispose()


@pytest.fixture(params=["sqlite", "postgresql"])
def database_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A fresh database with the queue's tables, for this test alone."""
    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path / 'jobs.db'}"
        name = None
    else:
        admin = request.getfixturevalue("postgres_admin_url")
        name = f"jobs_{uuid.uuid4().hex[:12]}"
        _admin(admin, f'CREATE DATABASE "{name}"')
        url = make_url(admin).set(database=name).render_as_string(hide_password=False)
    db = Database(url)
    create_tables(db)
    db.dispose()
    yield url
    if name is not None:
        _admin(admin, f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture
def db(database_url: str) -> Iterator[Database]:
    """The test's database, disposed of at the end."""
    database = Database(database_url)
    yield database
    database.dispose()


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark the PostgreSQL half ``postgres`` (``-m "not postgres"`` skips it)."""
    for item in items:
        callspec = getattr(item, "callspec", None)
        if callspec is not None and callspec.params.get("database_url") == "postgresql":
            item.add_marker(pytest.mark.postgres)

"""Fixtures for the labeling service: a fresh database per test on SQLite and PostgreSQL, a real
server over loopback HTTP, users, and small HTTP servers that play the customer's APIs.

PostgreSQL comes from ``EXTRACTOR_TEST_POSTGRES_URL`` when set; otherwise a throwaway cluster is
started from the local PostgreSQL binaries (as the ``postgres`` OS user when we are root).
Helpers live in ``labeling_support``; test modules import them from there, never from here.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from labeling_support import (
    DatabaseFactory,
    FakeAPI,
    LabelingServer,
    Received,
    Reply,
    ServiceProcess,
    fast_settings,
)


@pytest.fixture(scope="session", params=["sqlite", "postgresql"])
def database_factory(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> DatabaseFactory:
    """One per backend: every test that needs a database runs on SQLite and on PostgreSQL."""
    admin = request.getfixturevalue("postgres_admin_url") if request.param == "postgresql" else None
    return DatabaseFactory(request.param, tmp_path_factory.mktemp(request.param), admin)


@pytest.fixture
def database_url(database_factory: DatabaseFactory) -> Iterator[str]:
    """A fresh migrated database for this test alone."""
    url = database_factory.create()
    yield url
    database_factory.drop(url)


@pytest.fixture
def backend(database_factory: DatabaseFactory) -> str:
    """``sqlite`` or ``postgresql``: the engine this test runs on."""
    return database_factory.backend


@pytest.fixture
def make_server(database_url: str, tmp_path: Path) -> Iterator[Callable[..., LabelingServer]]:
    """Build labeling servers on this test's database; all are stopped at the end."""
    servers: list[LabelingServer] = []

    def build(**overrides: Any) -> LabelingServer:
        server = LabelingServer(fast_settings(database_url, tmp_path / "data", **overrides))
        servers.append(server)
        return server

    yield build
    for server in servers:
        server.close()


@pytest.fixture
def server(make_server: Callable[..., LabelingServer]) -> LabelingServer:
    """The labeling server with default test settings."""
    return make_server()


@pytest.fixture
def fake_api() -> Iterator[Callable[[Callable[[Received], Reply]], FakeAPI]]:
    """Start fake APIs with a reply function; all are stopped at the end."""
    started: list[FakeAPI] = []

    def start(respond: Callable[[Received], Reply]) -> FakeAPI:
        api = FakeAPI(respond).start()
        started.append(api)
        return api

    yield start
    for api in started:
        api.stop()


@pytest.fixture
def python() -> str:
    """The interpreter running the tests, for subprocesses of the CLI."""
    return sys.executable


@pytest.fixture
def processes() -> Iterator[list[ServiceProcess]]:
    """Service processes a test starts; all killed at the end."""
    started: list[ServiceProcess] = []
    yield started
    for process in started:
        if process.process.poll() is None:
            process.kill()


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark the PostgreSQL half of the suite ``postgres`` (``-m "not postgres"`` skips it)."""
    for item in items:
        callspec = getattr(item, "callspec", None)
        if callspec is not None and callspec.params.get("database_factory") == "postgresql":
            item.add_marker(pytest.mark.postgres)

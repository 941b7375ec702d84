"""The asynchronous job tests: real servers on SQLite and on PostgreSQL (``postgres_admin_url``:
``EXTRACTOR_TEST_POSTGRES_URL`` or a throwaway cluster)."""

from __future__ import annotations

import pytest


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark the PostgreSQL half ``postgres`` (``-m "not postgres"`` skips it)."""
    for item in items:
        callspec = getattr(item, "callspec", None)
        if callspec is None:
            continue
        if "postgresql" in (callspec.params.get("server"), callspec.params.get("database")):
            item.add_marker(pytest.mark.postgres)

"""Throwaway PostgreSQL clusters for the tests that run on both databases (labeling, jobs).

The cluster itself is bench/postgres.py's (the benches start the same kind); here it skips the
test when the server binaries are missing, or fails it when EXTRACTOR_TEST_REQUIRE_POSTGRES is
set (CI). ``EXTRACTOR_TEST_POSTGRES_URL`` points the tests at an existing server instead (the
fixtures read it).
"""

from __future__ import annotations

import os

import pytest

from bench.postgres import PostgresCluster, free_port, postgres_installed

__all__ = ["ThrowawayCluster", "free_port"]


class ThrowawayCluster(PostgresCluster):
    """A PostgreSQL cluster in a temporary folder, on a free loopback port, trusting local users."""

    def __init__(self) -> None:
        if not postgres_installed():
            reason = "PostgreSQL server binaries (initdb, pg_ctl) are not installed"
            if os.environ.get("EXTRACTOR_TEST_REQUIRE_POSTGRES"):
                pytest.fail(f"{reason}, and EXTRACTOR_TEST_REQUIRE_POSTGRES is set")
            pytest.skip(reason)
        super().__init__()

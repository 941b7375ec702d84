"""Fixtures shared by the whole suite: fresh apps over real engines, made-on-the-spot inputs."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from flask import Flask
from flask.testing import FlaskClient
from postgres_support import ThrowawayCluster
from support import PAGE_ONE, PAGE_TWO, SPOKEN

from extractor import samples
from extractor.web.app import create_app


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Run the tests that load torch into this process last.

    torch brings its own OpenMP runtime, on which Tesseract's per-thread serial switch acts
    process-wide, so the in-process OCR engine falls back to the CLI once torch is loaded (as
    it should in a server, where Tesseract loads first). The tests that check the library path
    must run before any test has imported torch here.

    Among the rest, the `slow` tests come first: under xdist (make test's parallel pass) the
    longest ones (the benchmark smoke run takes minutes) then start at once, and the many short
    ones fill the workers at the end instead of waiting for a long one started last.
    """
    items.sort(
        key=lambda item: (
            item.get_closest_marker("torch") is not None,
            item.get_closest_marker("slow") is None,
        )
    )


# One cluster per session, shared by the labeling and job-queue tests (PostgreSQL halves).
@pytest.fixture(scope="session")
def postgres_admin_url() -> Iterator[str]:
    """A PostgreSQL server's URL on its maintenance database, ours to create databases in."""
    given = os.environ.get("EXTRACTOR_TEST_POSTGRES_URL")
    if given:
        yield given
        return
    cluster = ThrowawayCluster()
    try:
        yield cluster.url
    finally:
        cluster.stop()


@pytest.fixture
def make_app(tmp_path: Path) -> Iterator[Callable[..., Flask]]:
    """Build apps with settings overrides; every request's temp dir must be gone afterwards."""
    scratch = tmp_path / "requests"
    scratch.mkdir()
    apps: list[Flask] = []

    def build(**overrides: Any) -> Flask:
        app = create_app({"tmp_dir": str(scratch), **overrides})
        app.testing = True
        apps.append(app)
        return app

    yield build
    for app in apps:
        app.extensions["extractor"].close()
    assert list(scratch.iterdir()) == [], "a request left temporary files behind"


@pytest.fixture
def client(make_app: Callable[..., Flask]) -> FlaskClient:
    return make_app().test_client()


@pytest.fixture(scope="session")
def validator() -> Any:
    import json

    import jsonschema

    schema = json.loads(
        (Path(__file__).parent.parent / "schemas" / "importable.schema.json").read_text()
    )
    return jsonschema.Draft202012Validator(schema)


# -- inputs made once per session ---------------------------------------------------------


@pytest.fixture(scope="session")
def page_one() -> samples.TextPage:
    return samples.text_page(PAGE_ONE, page=0)


@pytest.fixture(scope="session")
def page_two() -> samples.TextPage:
    return samples.text_page(PAGE_TWO, page=1)


@pytest.fixture(scope="session")
def speech_wav() -> bytes:
    if not samples.have_espeak():
        pytest.skip("espeak-ng is not installed")
    return samples.speech(SPOKEN, "wav")

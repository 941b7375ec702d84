"""Issue 18, point 2: every document's stored size is recorded when it is written (created,
auto-labeled) and measured once for documents stored before migration 0005."""

from __future__ import annotations

import json

from labeling_support import (
    LabelingServer,
    StartAPI,
    auto_label,
    capitalized_words_model,
)
from sqlalchemy import create_engine, inspect, select, text

from extractor.labeling.db import Database, alembic_config
from extractor.labeling.models import Document


def stored(db: Database) -> list[tuple[int | None, int]]:
    """Each document's recorded size and the length of its JSON as the database holds it."""
    with db.session() as session:
        return [
            (document.size_bytes, len(json.dumps(document.importable)))
            for document in session.scalars(select(Document).order_by(Document.position))
        ]


def test_a_documents_size_is_recorded_when_created_and_when_labeled(
    server: LabelingServer, fake_api: StartAPI
) -> None:
    user = server.user("Acme")
    # Non-ASCII text: the stored JSON escapes it, and the size counts the escapes.
    project_id = server.token_project(user, ["Alice met Bob", "in Zürich 東京"])
    [(size, length)] = stored(server.db)
    assert size == length and size > 0

    api = fake_api(capitalized_words_model)
    job = server.wait_job(user.token, auto_label(server, user, project_id, api.url))
    assert job["status"] == "DELIVERED", job
    [(labeled, length)] = stored(server.db)
    assert labeled == length and labeled > size  # the labels are counted too


def test_migration_0005_measures_the_documents_already_stored(database_url: str) -> None:
    from alembic import command

    config = alembic_config(database_url)
    engine = create_engine(database_url)
    try:
        command.downgrade(config, "0004")
        try:
            columns = {c["name"] for c in inspect(engine).get_columns("documents")}
            assert "size_bytes" not in columns
            importable = json.dumps({"cells": [{"content": "ä b"}], "labels": []})
            with engine.begin() as connection:
                now = "2026-01-01 00:00:00"
                connection.execute(
                    text("INSERT INTO users (id, email, created_at) VALUES ('u1', 'a@b.c', :now)"),
                    {"now": now},
                )
                connection.execute(
                    text(
                        "INSERT INTO projects (id, name, kind, owner_id, created_at) "
                        "VALUES ('p1', 'P', 'TOKEN_BASED', 'u1', :now)"
                    ),
                    {"now": now},
                )
                connection.execute(
                    text(
                        "INSERT INTO documents (id, project_id, position, name, importable, "
                        "created_at) VALUES ('d1', 'p1', 0, 'a.txt', :importable, :now)"
                    ),
                    {"importable": importable, "now": now},
                )
        finally:
            command.upgrade(config, "head")  # the database is shared with later tests
        with engine.begin() as connection:
            size = connection.execute(text("SELECT size_bytes FROM documents")).scalar()
            connection.execute(text("DELETE FROM users"))
        assert size == len(importable)
    finally:
        engine.dispose()

"""``extractor labeling ...``: add-user, migrate, serve under gunicorn, settings from the env."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest
from labeling_support import ServiceProcess, cli_env, free_port, run_cli

from extractor.config import LabelingSettings, SettingsError
from extractor.labeling.cli import DEFAULT_BIND, parser


@pytest.mark.slow  # a server or CLI process: make test runs it, make test-fast does not
def test_add_user_prints_one_json_object_and_joins_teams(database_url: str, tmp_path: Path) -> None:
    env = cli_env(database_url, tmp_path)
    alone = run_cli(env, "add-user", "Solo@Example.com")
    assert alone.returncode == 0, alone.stderr
    made = json.loads(alone.stdout)
    assert set(made) == {"userId", "token", "teamId"} and made["teamId"] is None
    first = json.loads(run_cli(env, "add-user", "a@example.com", "--team", "Acme").stdout)
    second = json.loads(run_cli(env, "add-user", "b@example.com", "--team", "Acme").stdout)
    assert first["teamId"] == second["teamId"] is not None
    again = json.loads(run_cli(env, "add-user", "solo@example.com", "--team", "Other").stdout)
    assert again["userId"] == made["userId"] and again["token"] != made["token"]


def test_add_user_refuses_what_is_not_an_email(database_url: str, tmp_path: Path) -> None:
    result = run_cli(cli_env(database_url, tmp_path), "add-user", "nobody")
    assert result.returncode == 1 and "not an email" in result.stderr and result.stdout == ""


def test_migrate_is_idempotent(tmp_path: Path) -> None:
    env = cli_env(f"sqlite:///{tmp_path / 'fresh.db'}", tmp_path)
    assert run_cli(env, "migrate").returncode == 0
    assert run_cli(env, "migrate").returncode == 0


def test_a_bad_setting_is_named(tmp_path: Path) -> None:
    env = cli_env(f"sqlite:///{tmp_path / 'x.db'}", tmp_path, EMBEDDED_WORKERS="many")
    result = run_cli(env, "migrate")
    assert result.returncode == 1 and "EXTRACTOR_LABELING_EMBEDDED_WORKERS" in result.stderr


def test_the_default_database_lives_in_the_data_dir(tmp_path: Path) -> None:
    settings = LabelingSettings.load({"EXTRACTOR_LABELING_DATA_DIR": str(tmp_path)})
    assert settings.resolved_database_url == f"sqlite:///{(tmp_path / 'labeling.db').resolve()}"
    with pytest.raises(SettingsError):
        LabelingSettings.load({"EXTRACTOR_LABELING_JOB_LEASE_SECONDS": "soon"})
    assert parser().parse_args(["serve"]).bind == DEFAULT_BIND == "127.0.0.1:8100"


@pytest.mark.slow  # a server or CLI process: make test runs it, make test-fast does not
def test_serve_answers_graphql_and_health_under_gunicorn(
    database_url: str, tmp_path: Path, processes: list[ServiceProcess]
) -> None:
    env = cli_env(database_url, tmp_path)
    token = json.loads(run_cli(env, "add-user", "web@example.com").stdout)["token"]
    port = free_port()
    server = ServiceProcess(env, "serve", "--bind", f"127.0.0.1:{port}", log=tmp_path / "s.log")
    processes.append(server)
    url = f"http://127.0.0.1:{port}"
    server.wait_healthy(url)
    reply = httpx.post(
        f"{url}/graphql",
        json={"query": "query { getPersonalTags { id name } }"},
        headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"},
    )
    assert reply.json() == {"data": {"getPersonalTags": []}, "extensions": {}}
    assert server.terminate() == 0
    assert token not in (tmp_path / "s.log").read_text()

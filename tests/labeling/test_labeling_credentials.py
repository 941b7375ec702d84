"""Credentials (issue 11, point 7): no user:password in registered URLs, query strings redacted
when shown, custom API secrets sealed at rest under rotatable keys, tokens that expire and can be
revoked. Real servers over loopback, real SQLite and PostgreSQL, the real CLI."""

from __future__ import annotations

import stat
import subprocess
import sys
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from cryptography.fernet import Fernet
from labeling_support import (
    TEST_SECRET_KEY,
    LabelingServer,
    Received,
    Reply,
    StartAPI,
    auto_label_input,
    capitalized_words_model,
    cli_env,
    fast_settings,
    run_cli,
)
from sqlalchemy import create_engine, text

from extractor.config import SettingsError
from extractor.labeling.auth import add_user, authenticate, new_token
from extractor.labeling.credentials import (
    KEY_FILE_NAME,
    SecretBox,
    load_secret_box,
    new_key,
    rotate_stored_secrets,
    seal_stored_secrets,
    shown_url,
)
from extractor.labeling.db import Database
from extractor.labeling.errors import AuthenticationError
from extractor.labeling.state import build_state

CREATE_API = """mutation($teamId: ID!, $input: CreateCustomAPIInput!) {
  createCustomAPI(teamId: $teamId, input: $input) { id endpointURL }
}"""
GET_APIS = "query($t: ID!) { getCustomAPIs(teamId: $t) { id endpointURL } }"
WHO = "query { getPersonalTags { id } }"
API_SECRET = "extract0r-s3cret-value"
TEXT_REPLY: Reply = (200, {"Content-Type": "text/plain; charset=utf-8"}, b"hello\n")


def register(
    server: LabelingServer, user: Any, url: str, secret: str | None = API_SECRET
) -> dict[str, Any]:
    fields = {"name": "Speech", "endpointURL": url, "purpose": "ASR_API", "secret": secret}
    return server.gql(CREATE_API, {"teamId": user.team_id, "input": fields}, token=user.token)


def transcribe(server: LabelingServer, user: Any, api_id: str) -> dict[str, Any]:
    started = server.create_project(
        user.token, "Calls", "AUDIO", [("a.wav", b"RIFF")], teamId=user.team_id, customAPIId=api_id
    )
    assert "errors" not in started, started
    return server.wait_job(user.token, started["data"]["createProject"]["id"])


def stored_secrets(database_url: str) -> list[tuple[str | None, str | None]]:
    """(secret, secret_token) of every custom API row, read past the ORM."""
    engine = create_engine(database_url)
    try:
        with engine.connect() as connection:
            rows = connection.execute(text("SELECT secret, secret_token FROM custom_apis"))
            return [(row[0], row[1]) for row in rows]
    finally:
        engine.dispose()


# -- URLs -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "url",
    [
        "http://alice:pa55word@127.0.0.1:9/extract",
        "https://pa55word@api.example.com/x",
        "http://:pa55word@api.example.com/x",
    ],
)
def test_urls_with_credentials_are_refused_at_registration(
    server: LabelingServer, url: str
) -> None:
    user = server.user("Acme")
    result = register(server, user, url)
    (error,) = result["errors"]
    assert error["extensions"]["code"] == "BAD_USER_INPUT"
    assert "user name or password" in error["message"] and "pa55word" not in str(result)
    assert stored_secrets(server.settings.database_url) == []


def test_prediction_endpoints_with_credentials_are_refused(server: LabelingServer) -> None:
    user = server.user("Acme")
    project_id = server.token_project(user, ["John"])
    mutation = """mutation($input: AutoLabelTokenBasedProjectInput!) {
      autoLabelTokenBasedProject(input: $input) { id }
    }"""
    endpoint = "http://bob:pa55word@127.0.0.1:9/predict"
    variables = auto_label_input(user.email, project_id, endpoint, secret="k3y", per_request=0)
    result = server.gql(mutation, variables, token=user.token)
    (error,) = result["errors"]
    assert error["extensions"]["code"] == "BAD_USER_INPUT"
    assert "targetAPI.endpoint" in error["message"] and "pa55word" not in str(result)


def test_query_strings_are_redacted_when_shown_but_sent_whole(
    server: LabelingServer, fake_api: StartAPI
) -> None:
    user = server.user("Acme")
    extractor = fake_api(lambda _: TEXT_REPLY)
    url = extractor.url + "?api_key=k3y-in-query&lang=en#frag"
    made = register(server, user, url, secret=None)["data"]["createCustomAPI"]
    shown = extractor.url + "?api_key=REDACTED&lang=REDACTED"
    assert made["endpointURL"] == shown
    listed = server.ok(GET_APIS, {"t": user.team_id}, token=user.token)["getCustomAPIs"]
    assert listed == [{"id": made["id"], "endpointURL": shown}]
    # Redaction is for display only: the API still gets its query string.
    assert transcribe(server, user, made["id"])["status"] == "DELIVERED"
    assert extractor.received[0].path == "/predict?api_key=k3y-in-query&lang=en"


def test_shown_url_drops_what_identifies_a_caller() -> None:
    assert shown_url("https://u:p@[::1]:8443/a?x=1&x=2&flag") == (
        "https://[::1]:8443/a?x=REDACTED&x=REDACTED&flag=REDACTED"
    )
    assert shown_url("http://api.test/a") == "http://api.test/a"
    assert shown_url("http://[bad") == "(invalid URL)"


# -- secrets at rest --------------------------------------------------------------------------


def test_custom_api_secrets_are_sealed_at_rest_and_opened_for_the_call(
    server: LabelingServer, fake_api: StartAPI, database_url: str
) -> None:
    user = server.user("Acme")
    extractor = fake_api(lambda _: TEXT_REPLY)
    api_id = register(server, user, extractor.url)["data"]["createCustomAPI"]["id"]
    ((clear, token),) = stored_secrets(database_url)
    assert clear is None and token is not None and API_SECRET not in token
    assert Fernet(TEST_SECRET_KEY.encode()).decrypt(token.encode()).decode() == API_SECRET
    assert transcribe(server, user, api_id)["status"] == "DELIVERED"
    assert extractor.received[0].headers["authorization"] == f"Bearer {API_SECRET}"


def test_prediction_secrets_are_sealed_in_the_queued_job(
    server: LabelingServer, fake_api: StartAPI, database_url: str
) -> None:
    user = server.user("Acme")
    project_id = server.token_project(user, ["John"])
    secret = "pr3diction-s3cret-in-job"

    def slow_model(request: Received) -> Reply:
        model.release.wait(10)  # keeps the job running while its row is read
        return capitalized_words_model(request)

    model = fake_api(slow_model)
    mutation = """mutation($input: AutoLabelTokenBasedProjectInput!) {
      autoLabelTokenBasedProject(input: $input) { id }
    }"""
    variables = auto_label_input(user.email, project_id, model.url, secret=secret, per_request=0)
    job_id = server.ok(mutation, variables, token=user.token)["autoLabelTokenBasedProject"]["id"]
    engine = create_engine(database_url)
    try:
        with engine.connect() as connection:
            payload = connection.execute(
                text("SELECT payload FROM jobs WHERE id = :id"), {"id": job_id}
            ).scalar_one()
    finally:
        engine.dispose()
    assert secret not in str(payload) and '"secretKey": "fernet:' in str(payload).replace("'", '"')
    model.release.set()
    assert server.wait_job(user.token, job_id)["status"] == "DELIVERED"
    assert model.received[0].headers["authorization"] == f"Bearer {secret}"


def test_keys_rotate_new_first_old_after(
    make_server: Callable[..., LabelingServer], fake_api: StartAPI, database_url: str
) -> None:
    old, new = TEST_SECRET_KEY, new_key()
    server = make_server()
    user = server.user("Acme")
    extractor = fake_api(lambda _: TEXT_REPLY)
    api_id = register(server, user, extractor.url)["data"]["createCustomAPI"]["id"]
    server.close()

    # 1. New key first, old after: everything still opens; 2. rotate re-encrypts under the new.
    both = SecretBox([new, old], "test keys")
    db = Database(database_url)
    try:
        assert rotate_stored_secrets(db, both) == 1
        # 3. The old key can go: the new one alone opens the secret, the old one alone cannot.
        seal_stored_secrets(db, SecretBox([new], "new key only"))
        with pytest.raises(SettingsError, match="rotate-secrets") as info:
            seal_stored_secrets(db, SecretBox([old], "old key only"))
        assert API_SECRET not in str(info.value)
    finally:
        db.dispose()
    rotated = make_server(secret_keys=new)
    assert transcribe(rotated, user, api_id)["status"] == "DELIVERED"
    assert extractor.received[-1].headers["authorization"] == f"Bearer {API_SECRET}"


def test_secrets_stored_in_clear_are_sealed_at_start(
    database_url: str, tmp_path: Path, make_server: Callable[..., LabelingServer]
) -> None:
    """Rows from before migration 0003 keep their secret in the old column until a start with a
    key seals them; with no key, the start fails and says what to set."""
    seed = make_server()
    user = seed.user("Acme")
    seed.close()
    engine = create_engine(database_url)
    with engine.begin() as connection:
        connection.execute(
            text(
                "INSERT INTO custom_apis (id, team_id, name, endpoint_url, secret, purpose, "
                "created_by, created_at) VALUES ('legacy', :team, 'Old', 'http://x.test/', "
                ":secret, 'OCR_API', :user, CURRENT_TIMESTAMP)"
            ),
            {"team": user.team_id, "user": user.user_id, "secret": API_SECRET},
        )
    engine.dispose()
    if database_url.startswith("postgresql"):
        keyless = fast_settings(database_url, tmp_path / "keyless", secret_keys="")
        with pytest.raises(SettingsError, match="SECRET_KEYS is not set"):
            build_state(keyless)
        assert stored_secrets(database_url) == [(API_SECRET, None)]
    state = build_state(fast_settings(database_url, tmp_path / "data"))
    state.close()
    ((clear, token),) = stored_secrets(database_url)
    assert clear is None and token is not None
    assert SecretBox([TEST_SECRET_KEY], "test").open(token) == API_SECRET


def test_a_keyless_sqlite_deployment_generates_its_key_file(tmp_path: Path) -> None:
    """The single-user default (SQLite in the data dir, no settings) keeps storing secrets."""
    settings = fast_settings("", tmp_path / "data", secret_keys="")
    box = load_secret_box(settings)
    assert box is not None
    key_path = tmp_path / "data" / KEY_FILE_NAME
    assert stat.S_IMODE(key_path.stat().st_mode) == 0o600
    again = load_secret_box(settings)  # a second worker process reads the same key
    assert again is not None and again.open(box.seal("x")) == "x"
    assert key_path.read_text().count("\n") == 1


def test_an_unusable_key_file_is_a_clear_start_error(tmp_path: Path) -> None:
    blocker = tmp_path / "data"
    blocker.write_text("a file where the data directory should be")
    with pytest.raises(SettingsError, match="cannot use the secret key file"):
        load_secret_box(fast_settings("", blocker, secret_keys=""))


def test_a_keyless_shared_database_refuses_to_store_secrets(
    make_server: Callable[..., LabelingServer], backend: str
) -> None:
    if backend != "postgresql":
        pytest.skip("SQLite without a key uses its generated key file")
    server = make_server(secret_keys="")
    user = server.user("Acme")
    result = register(server, user, "https://api.example.com/x")
    (error,) = result["errors"]
    assert error["extensions"]["code"] == "SECRETS_UNAVAILABLE"
    assert API_SECRET not in str(result)
    assert register(server, user, "https://api.example.com/x", secret=None)["data"]


def test_the_cli_refuses_to_start_when_stored_secrets_have_no_key(
    database_url: str, tmp_path: Path, make_server: Callable[..., LabelingServer]
) -> None:
    server = make_server()
    register(server, server.user("Acme"), "https://api.example.com/x")
    server.close()
    env = cli_env(database_url, tmp_path / "other-data", secret_keys=new_key())
    done = run_cli(env, "worker", "--concurrency", "1")
    assert done.returncode == 1
    assert "cannot be decrypted" in done.stderr and "rotate-secrets" in done.stderr


def test_settings_never_show_their_keys(tmp_path: Path) -> None:
    key = new_key()
    settings = fast_settings("", tmp_path, secret_keys=key)
    assert key not in repr(settings) and key not in str(settings)


def test_bad_keys_are_named_but_never_quoted() -> None:
    with pytest.raises(SettingsError, match="key 2 is not a Fernet key") as info:
        SecretBox([new_key(), "not-a-key-but-secret"], "EXTRACTOR_LABELING_SECRET_KEYS")
    assert "not-a-key-but-secret" not in str(info.value)


# -- tokens -----------------------------------------------------------------------------------


def test_revoked_tokens_get_the_unauthorized_shape(
    server: LabelingServer, database_url: str, tmp_path: Path
) -> None:
    first = server.user("Acme", email="ann@example.com")
    second = server.user(email="ann@example.com")
    other = server.user(email="bob@example.com")
    env = cli_env(database_url, tmp_path / "data")
    done = run_cli(env, "revoke-token", first.token)
    assert (done.returncode, done.stdout.strip()) == (0, '{"revoked": 1}'), done.stderr
    refused = server.gql(WHO, token=first.token)
    assert refused == {
        "data": None,
        "errors": [
            {
                "message": "Unauthorized",
                "extensions": {"code": "UNAUTHENTICATED", "type": "AuthenticationError"},
            }
        ],
        "extensions": {},
    }
    assert "errors" not in server.gql(WHO, token=second.token)
    done = run_cli(env, "revoke-token", "--user", "Ann@Example.com")
    assert done.stdout.strip() == '{"revoked": 1}'  # the first one was revoked already
    assert server.gql(WHO, token=second.token)["errors"][0]["message"] == "Unauthorized"
    assert "errors" not in server.gql(WHO, token=other.token)
    assert first.token not in done.stdout + done.stderr


def test_tokens_never_start_with_a_dash_and_after_two_dashes_any_is_revoked(
    server: LabelingServer, database_url: str, tmp_path: Path
) -> None:
    """One URL-safe token in 64 began with "-", which ``revoke-token TOKEN`` read as an
    option (a CI run failed on it: "unrecognized arguments: -WMaGH4ci...")."""
    tokens = [new_token() for _ in range(3000)]  # ~47 would start with "-" otherwise
    assert not [t for t in tokens if t.startswith("-")]
    assert len(set(tokens)) == len(tokens) and len({len(t) for t in tokens}) == 1
    user = server.user()
    done = run_cli(cli_env(database_url, tmp_path / "data"), "revoke-token", "--", user.token)
    assert done.stdout.strip() == '{"revoked": 1}', done.stderr


def test_revoke_token_reads_the_token_from_stdin(
    server: LabelingServer, database_url: str, tmp_path: Path
) -> None:
    """``-`` keeps the token out of the shell history and the process list."""
    user = server.user()
    env = cli_env(database_url, tmp_path / "data")
    done = subprocess.run(
        [sys.executable, "-m", "extractor.cli", "labeling", "revoke-token", "-"],
        input=user.token + "\n",
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.stdout.strip() == '{"revoked": 1}', done.stderr
    assert server.gql(WHO, token=user.token)["errors"][0]["message"] == "Unauthorized"


def test_tokens_expire_after_the_configured_lifetime(
    make_server: Callable[..., LabelingServer], database_url: str
) -> None:
    server = make_server(token_lifetime_days=1.0)
    fresh = server.user()
    old = server.user()
    engine = create_engine(database_url)
    with engine.begin() as connection:
        connection.execute(
            text("UPDATE access_tokens SET created_at = :t WHERE user_id = :u"),
            {"t": "2000-01-01 00:00:00", "u": old.user_id},
        )
    engine.dispose()
    assert "errors" not in server.gql(WHO, token=fresh.token)
    assert server.gql(WHO, token=old.token)["errors"][0]["message"] == "Unauthorized"
    # Without a lifetime (the default) the same token still works.
    with pytest.raises(AuthenticationError):
        authenticate(server.db, f"Bearer {old.token}", timedelta(days=1))
    assert authenticate(server.db, f"Bearer {old.token}").user_id == old.user_id
    made = add_user(server.db, "new@example.com")
    assert authenticate(server.db, f"Bearer {made['token']}", timedelta(days=1))


def test_a_negative_token_lifetime_fails_at_start(tmp_path: Path, database_url: str) -> None:
    with pytest.raises(SettingsError, match="TOKEN_LIFETIME_DAYS"):
        build_state(fast_settings(database_url, tmp_path / "data", token_lifetime_days=-1.0))


# -- migration 0003 ---------------------------------------------------------------------------


def test_migration_0003_matches_the_models_and_downgrades(database_url: str) -> None:
    from alembic import command
    from alembic.autogenerate import compare_metadata
    from alembic.migration import MigrationContext
    from sqlalchemy import inspect

    from extractor.labeling.db import alembic_config
    from extractor.labeling.models import Base

    config = alembic_config(database_url)
    engine = create_engine(database_url)
    try:
        command.downgrade(config, "0002")
        try:
            columns = {c["name"] for c in inspect(engine).get_columns("custom_apis")}
            assert "secret_token" not in columns and "secret" in columns
        finally:
            command.upgrade(config, "head")  # the database is shared with later tests
        with engine.connect() as connection:
            diffs = compare_metadata(MigrationContext.configure(connection), Base.metadata)
        mine = [d for d in diffs if "custom_apis" in str(d) or "access_tokens" in str(d)]
        assert mine == []
    finally:
        engine.dispose()

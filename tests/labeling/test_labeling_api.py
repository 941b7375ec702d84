"""The GraphQL API over real HTTP: the spec's request bodies, auth, tags, custom APIs, projects,
jobs, error codes, and that nobody sees another user's or team's things."""

from __future__ import annotations

from typing import Any

import pytest
from labeling_support import JOB_FIELDS, LabelingServer

# The spec's exact request bodies (sections 1-3).
PERSONAL_TAGS = {"query": "query { getPersonalTags { id name } }"}
TEAM_TAGS = "query GetTags($input: GetTagsInput!) { getTags(input: $input) { id name } }"
AUTO_LABEL = (
    "mutation AutoLabelTokenBasedProjectMutation($input: AutoLabelTokenBasedProjectInput!) "
    "{ result: autoLabelTokenBasedProject(input: $input) { id status progress } }"
)
CREATE_TAG = "mutation($input: CreateTagInput!) { createTag(input: $input) { id name globalTag } }"
CREATE_API = """mutation($teamId: ID!, $input: CreateCustomAPIInput!) {
  createCustomAPI(teamId: $teamId, input: $input) { id name endpointURL purpose teamId }
}"""
CUSTOM_APIS = """query($teamId: ID!, $purpose: CustomAPIPurpose) {
  getCustomAPIs(teamId: $teamId, purpose: $purpose) { id name endpointURL purpose teamId }
}"""


def error_of(result: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """The first error's message and extensions."""
    assert result.get("errors"), result
    error = result["errors"][0]
    return error["message"], error["extensions"]


def code_of(result: dict[str, Any]) -> str:
    return str(error_of(result)[1]["code"])


# -- authentication ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "authorization",
    [None, "Bearer", "Bearer not-a-token", "Basic dXNlcjpwYXNz", "not-even-a-scheme"],
    ids=["missing", "empty", "unknown", "basic", "garbage"],
)
def test_a_call_without_a_known_token_is_unauthorized(
    server: LabelingServer, authorization: str | None
) -> None:
    headers = {} if authorization is None else {"Authorization": authorization}
    response = server.http.post("/graphql", json=PERSONAL_TAGS, headers=headers)
    body = response.json()
    assert body["data"] is None
    assert body["extensions"] == {}
    assert body["errors"][0]["message"] == "Unauthorized"
    assert body["errors"][0]["extensions"] == {
        "code": "UNAUTHENTICATED",
        "type": "AuthenticationError",
    }


def test_tokens_are_stored_only_as_hashes(server: LabelingServer) -> None:
    user = server.user()
    with server.db.engine.connect() as connection:
        stored = [
            row[0] for row in connection.exec_driver_sql("SELECT token_hash FROM access_tokens")
        ]
    assert user.token not in stored
    assert len(stored) == 1 and len(stored[0]) == 64


def test_every_token_of_a_user_works(server: LabelingServer) -> None:
    first = server.user(email="twice@example.com")
    second = server.user(email="twice@example.com")
    assert first.user_id == second.user_id and first.token != second.token
    for token in (first.token, second.token):
        assert server.ok(PERSONAL_TAGS["query"], token=token) == {"getPersonalTags": []}


# -- request shape ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "content",
    [b"not json", b"[1, 2]", b'{"variables": {}}', b'{"query": 42}', b""],
    ids=["not-json", "array", "no-query", "query-not-string", "empty"],
)
def test_a_body_that_is_not_a_graphql_request_is_a_400_with_json(
    server: LabelingServer, content: bytes
) -> None:
    user = server.user()
    response = server.http.post(
        "/graphql",
        content=content,
        headers={"Authorization": f"Bearer {user.token}", "Content-Type": "application/json"},
    )
    assert response.status_code == 400
    body = response.json()
    assert body["extensions"] == {} and body["errors"][0]["extensions"]["code"] == "BAD_REQUEST"


def test_graphql_errors_are_reported_with_extensions(server: LabelingServer) -> None:
    user = server.user()
    invalid = server.gql("query { noSuchField }", token=user.token)
    assert code_of(invalid) == "GRAPHQL_VALIDATION_FAILED"
    broken = server.gql("query { getPersonalTags { id ", token=user.token)
    assert code_of(broken) == "GRAPHQL_PARSE_FAILED"
    bad_variable = server.gql(
        "query($p: CustomAPIPurpose, $t: ID!) { getCustomAPIs(teamId: $t, purpose: $p) { id } }",
        {"p": "NO_SUCH_PURPOSE", "t": "x"},
        token=user.token,
    )
    assert code_of(bad_variable) == "BAD_USER_INPUT"


def test_health_check(server: LabelingServer) -> None:
    response = server.http.get("/healthz")
    assert response.status_code == 200 and response.json() == {"status": "ok"}


def test_unexpected_errors_are_generic_and_only_logged(
    server: LabelingServer, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    user = server.user()

    def explode(*_: Any) -> None:
        raise RuntimeError("secret internals /etc/passwd")

    monkeypatch.setattr(server.state.service, "personal_tags", explode)
    result = server.gql(PERSONAL_TAGS["query"], token=user.token)
    message, extensions = error_of(result)
    assert message == "Internal server error"
    assert extensions == {"code": "INTERNAL_SERVER_ERROR", "type": "InternalServerError"}
    assert "passwd" not in str(result) and "Traceback" not in str(result)
    assert "secret internals" in caplog.text


# -- tags -------------------------------------------------------------------------------------


def test_personal_tags_with_the_spec_request_body(server: LabelingServer) -> None:
    user, other = server.user(), server.user()
    made = server.ok(CREATE_TAG, {"input": {"name": "urgent"}}, token=user.token)["createTag"]
    assert made["name"] == "urgent" and made["globalTag"] is False
    server.ok(CREATE_TAG, {"input": {"name": "theirs"}}, token=other.token)
    body = server.post(PERSONAL_TAGS, user.token).json()
    assert body == {
        "data": {"getPersonalTags": [{"id": made["id"], "name": "urgent"}]},
        "extensions": {},
    }


def test_team_tags_with_the_spec_request_body(server: LabelingServer) -> None:
    alice, bob = server.user("Acme"), server.user("Acme")
    assert alice.team_id == bob.team_id
    made = server.ok(
        CREATE_TAG, {"input": {"name": "invoice", "teamId": alice.team_id}}, token=alice.token
    )["createTag"]
    body = server.post(
        {
            "query": TEAM_TAGS,
            "variables": {"input": {"teamId": alice.team_id}},
            "operationName": "GetTags",
        },
        bob.token,
    ).json()
    assert body == {"data": {"getTags": [{"id": made["id"], "name": "invoice"}]}, "extensions": {}}
    # A team tag is not anybody's personal tag.
    assert server.ok(PERSONAL_TAGS["query"], token=alice.token) == {"getPersonalTags": []}


def test_another_teams_tags_are_forbidden(server: LabelingServer) -> None:
    alice, mallory = server.user("Acme"), server.user("Evil")
    server.ok(CREATE_TAG, {"input": {"name": "secret", "teamId": alice.team_id}}, token=alice.token)
    for team_id in (alice.team_id, "no-such-team"):
        read = server.gql(TEAM_TAGS, {"input": {"teamId": team_id}}, token=mallory.token)
        assert error_of(read)[1] == {"code": "FORBIDDEN", "type": "ForbiddenError"}
        assert read["data"] is None
        write = server.gql(
            CREATE_TAG, {"input": {"name": "x", "teamId": team_id}}, token=mallory.token
        )
        assert code_of(write) == "FORBIDDEN"
    assert "secret" not in str(server.ok(PERSONAL_TAGS["query"], token=mallory.token))


@pytest.mark.parametrize("name", ["", "   ", "x" * 201])
def test_a_tag_needs_a_reasonable_name(server: LabelingServer, name: str) -> None:
    user = server.user()
    assert code_of(server.gql(CREATE_TAG, {"input": {"name": name}}, token=user.token)) == (
        "BAD_USER_INPUT"
    )


def test_tag_names_are_unique_per_owner(server: LabelingServer) -> None:
    user = server.user("Acme")
    server.ok(CREATE_TAG, {"input": {"name": "dup"}}, token=user.token)
    again = server.gql(CREATE_TAG, {"input": {"name": "dup"}}, token=user.token)
    assert code_of(again) == "BAD_USER_INPUT"
    # The same name in the team is another owner.
    server.ok(CREATE_TAG, {"input": {"name": "dup", "teamId": user.team_id}}, token=user.token)


# -- custom APIs ------------------------------------------------------------------------------


def api_input(**overrides: Any) -> dict[str, Any]:
    return {
        "name": "Our OCR",
        "endpointURL": "https://ocr.example.com/extract",
        "secret": "s3cr3t-value",
        "purpose": "OCR_API",
        **overrides,
    }


def test_custom_apis_are_per_team_and_never_show_their_secret(server: LabelingServer) -> None:
    alice, bob, mallory = server.user("Acme"), server.user("Acme"), server.user("Evil")
    made = server.ok(
        CREATE_API, {"teamId": alice.team_id, "input": api_input()}, token=alice.token
    )["createCustomAPI"]
    assert made["teamId"] == alice.team_id and made["endpointURL"].endswith("/extract")
    server.ok(
        CREATE_API,
        {
            "teamId": alice.team_id,
            "input": api_input(name="Speech", purpose="ASR_API", secret=None),
        },
        token=alice.token,
    )
    listed = server.ok(CUSTOM_APIS, {"teamId": alice.team_id}, token=bob.token)["getCustomAPIs"]
    assert [api["name"] for api in listed] == ["Our OCR", "Speech"]
    ocr_only = server.ok(
        CUSTOM_APIS, {"teamId": alice.team_id, "purpose": "OCR_API"}, token=bob.token
    )["getCustomAPIs"]
    assert ocr_only == [made]
    assert code_of(server.gql(CUSTOM_APIS, {"teamId": alice.team_id}, token=mallory.token)) == (
        "FORBIDDEN"
    )
    # The secret is not in the schema at all.
    asked = server.gql(
        "query($t: ID!) { getCustomAPIs(teamId: $t) { secret } }",
        {"t": alice.team_id},
        token=alice.token,
    )
    assert code_of(asked) == "GRAPHQL_VALIDATION_FAILED"


def test_custom_apis_are_team_only(server: LabelingServer) -> None:
    loner, member = server.user(), server.user("Acme")
    for team_id in ("", "no-such-team", member.team_id):
        result = server.gql(
            CREATE_API, {"teamId": team_id, "input": api_input()}, token=loner.token
        )
        assert code_of(result) == "FORBIDDEN"


@pytest.mark.parametrize(
    "overrides",
    [
        {"endpointURL": "ftp://example.com/x"},
        {"endpointURL": "not a url"},
        {"endpointURL": "http://"},
        {"name": ""},
        {"secret": "has space"},
        {"secret": "naïve"},
    ],
    ids=["scheme", "garbage", "no-host", "no-name", "secret-space", "secret-non-ascii"],
)
def test_custom_api_input_is_checked(server: LabelingServer, overrides: dict[str, Any]) -> None:
    user = server.user("Acme")
    result = server.gql(
        CREATE_API, {"teamId": user.team_id, "input": api_input(**overrides)}, token=user.token
    )
    assert code_of(result) == "BAD_USER_INPUT"
    assert "has space" not in str(result) and "naïve" not in str(result)


# -- projects and jobs ------------------------------------------------------------------------


def test_token_based_project_is_created_by_a_job(server: LabelingServer) -> None:
    user = server.user("Acme")
    tag = server.ok(CREATE_TAG, {"input": {"name": "mine"}}, token=user.token)["createTag"]
    team_tag = server.ok(
        CREATE_TAG, {"input": {"name": "ours", "teamId": user.team_id}}, token=user.token
    )["createTag"]
    text = "John works at  Abcd Corp.\n\n   \nsecond\tline here\r\n"
    started = server.create_project(
        user.token,
        "Contracts",
        "TOKEN_BASED",
        [("a.txt", text.encode()), ("dir/b.txt", "\ufeffonly line".encode())],
        teamId=user.team_id,
        tagIds=[tag["id"], team_tag["id"]],
    )
    job = started["data"]["createProject"]
    assert job["id"].startswith("CreateProjectQueue:") and job["status"] in (
        "QUEUED",
        "IN_PROGRESS",
    )
    assert job["progress"] == 0 and job["errors"] == [] and job["resultId"] is None
    done = server.wait_job(user.token, job["id"])
    assert done["status"] == "DELIVERED" and done["progress"] == 100 and done["errors"] == []
    assert done["createdAt"].endswith("Z") and done["updatedAt"] >= done["createdAt"]
    project = server.project(user.token, done["resultId"])
    assert project is not None
    assert (project["name"], project["kind"], project["teamId"]) == (
        "Contracts",
        "TOKEN_BASED",
        user.team_id,
    )
    assert sorted(t["name"] for t in project["tags"]) == ["mine", "ours"]
    first, second = project["documents"]
    assert first["name"] == "a.txt" and second["name"] == "b.txt"
    assert first["importable"] == {
        "name": "a.txt",
        "type": "TOKEN_BASED",
        "cells": [
            {
                "content": "John works at Abcd Corp.",
                "index": 0,
                "line": 0,
                "metadata": [],
                "tokens": ["John", "works", "at", "Abcd", "Corp."],
            },
            {
                "content": "second line here",
                "index": 0,
                "line": 1,
                "metadata": [],
                "tokens": ["second", "line", "here"],
            },
        ],
        "labelSets": [],
        "labels": [],
        "pages": [],
    }
    assert second["importable"]["cells"][0]["tokens"] == ["only", "line"]


def test_a_project_that_cannot_be_read_fails_its_job_and_leaves_nothing(
    server: LabelingServer,
) -> None:
    user = server.user()
    started = server.create_project(
        user.token, "Broken", "TOKEN_BASED", [("ok.txt", b"fine"), ("bad.txt", b"\xff\xfe\x00bad")]
    )
    job = server.wait_job(user.token, started["data"]["createProject"]["id"])
    assert job["status"] == "FAILED" and job["resultId"] is None
    assert "'bad.txt' is not UTF-8 text" in job["errors"][0]["stack"]
    assert job["errors"][0]["id"]
    with server.db.engine.connect() as connection:
        assert connection.exec_driver_sql("SELECT count(*) FROM projects").scalar() == 0
        # A failed job keeps no upload either: nothing half-made stays behind.
        assert connection.exec_driver_sql("SELECT count(*) FROM job_uploads").scalar() == 0


def test_personal_and_team_projects_are_visible_only_to_their_people(
    server: LabelingServer,
) -> None:
    alice, bob, mallory = server.user("Acme"), server.user("Acme"), server.user("Evil")
    personal = server.wait_job(
        alice.token,
        server.create_project(alice.token, "Mine", "TOKEN_BASED", [("a.txt", b"a")])["data"][
            "createProject"
        ]["id"],
    )["resultId"]
    team = server.token_project(alice, ["hello"])
    assert server.project(alice.token, personal) is not None
    assert server.project(bob.token, personal) is None
    assert server.project(bob.token, team) is not None
    assert server.project(mallory.token, team) is None
    assert server.project(mallory.token, "no-such-project") is None


def test_jobs_are_visible_only_to_who_started_them(server: LabelingServer) -> None:
    alice, bob = server.user("Acme"), server.user("Acme")
    job_id = server.create_project(alice.token, "P", "TOKEN_BASED", [("a.txt", b"x")])["data"][
        "createProject"
    ]["id"]
    server.wait_job(alice.token, job_id)
    assert server.job(bob.token, job_id) is None
    jobs = server.ok(
        f"query($ids: [String!]!) {{ getJobs(jobIds: $ids) {{ {JOB_FIELDS} }} }}",
        {"ids": [job_id, "AutoLabelQueue:nope", job_id]},
        token=alice.token,
    )["getJobs"]
    assert [job and job["id"] for job in jobs] == [job_id, None, job_id]
    assert server.ok(
        "query($ids: [String!]!) { getJobs(jobIds: $ids) { id } }",
        {"ids": [job_id]},
        token=bob.token,
    ) == {"getJobs": [None]}


@pytest.mark.parametrize(
    ("fields", "code"),
    [
        ({"name": ""}, "BAD_USER_INPUT"),
        ({"teamId": "no-such-team"}, "FORBIDDEN"),
        ({"kind": "OCR"}, "FORBIDDEN"),  # custom APIs are team-only
        ({"kind": "AUDIO"}, "FORBIDDEN"),
        ({"kind": "OCR", "team": True}, "BAD_USER_INPUT"),  # no customAPIId
        ({"kind": "OCR", "team": True, "customAPIId": "nope"}, "NOT_FOUND"),
        ({"customAPIId": "anything", "team": True}, "BAD_USER_INPUT"),  # TOKEN_BASED
        ({"tagIds": ["no-such-tag"]}, "NOT_FOUND"),
    ],
)
def test_create_project_input_is_checked(
    server: LabelingServer, fields: dict[str, Any], code: str
) -> None:
    user = server.user("Acme")
    fields = dict(fields)
    if fields.pop("team", False):
        fields["teamId"] = user.team_id
    fields.setdefault("name", "P")
    kind = fields.pop("kind", "TOKEN_BASED")
    name = fields.pop("name")
    result = server.create_project(user.token, name, kind, [("a.png", b"x")], **fields)
    assert code_of(result) == code, result


def test_projects_cannot_use_another_teams_api_or_tags(server: LabelingServer) -> None:
    alice, mallory = server.user("Acme"), server.user("Evil")
    api = server.ok(CREATE_API, {"teamId": alice.team_id, "input": api_input()}, token=alice.token)[
        "createCustomAPI"
    ]
    tag = server.ok(CREATE_TAG, {"input": {"name": "t"}}, token=alice.token)["createTag"]
    stolen_api = server.create_project(
        mallory.token, "P", "OCR", [("a.png", b"x")], teamId=mallory.team_id, customAPIId=api["id"]
    )
    assert code_of(stolen_api) == "NOT_FOUND"
    stolen_tag = server.create_project(
        mallory.token, "P", "TOKEN_BASED", [("a.txt", b"x")], tagIds=[tag["id"]]
    )
    assert code_of(stolen_tag) == "NOT_FOUND"


def test_an_asr_api_cannot_make_an_ocr_project(server: LabelingServer) -> None:
    user = server.user("Acme")
    api = server.ok(
        CREATE_API,
        {"teamId": user.team_id, "input": api_input(purpose="ASR_API")},
        token=user.token,
    )["createCustomAPI"]
    result = server.create_project(
        user.token, "P", "OCR", [("a.png", b"x")], teamId=user.team_id, customAPIId=api["id"]
    )
    assert code_of(result) == "BAD_USER_INPUT"


def test_documents_must_be_uploads(server: LabelingServer) -> None:
    user = server.user()
    result = server.gql(
        "mutation($i: CreateProjectInput!) { createProject(input: $i) { id } }",
        {"i": {"name": "P", "kind": "TOKEN_BASED", "documents": ["not a file"]}},
        token=user.token,
    )
    assert code_of(result) == "BAD_USER_INPUT"


def test_uploads_over_the_limit_are_refused(make_server: Any) -> None:
    server = make_server(max_upload_bytes=10_000)
    user = server.user()
    response = server.http.post(
        "/graphql",
        data={"operations": "{}", "map": "{}"},
        files={"0": ("big.txt", b"x" * 20_000)},
        headers={"Authorization": f"Bearer {user.token}"},
    )
    assert response.status_code == 413
    assert response.json()["errors"][0]["extensions"]["code"] == "PAYLOAD_TOO_LARGE"


def test_a_broken_multipart_request_is_a_400(server: LabelingServer) -> None:
    user = server.user()
    response = server.http.post(
        "/graphql",
        data={"operations": "not json", "map": "{}"},
        files={"0": ("a.txt", b"x")},
        headers={"Authorization": f"Bearer {user.token}"},
    )
    assert response.status_code == 400 and response.json()["extensions"] == {}


# -- auto-label: the synchronous checks -------------------------------------------------------


def auto_label_input(project_id: str, labeler: str, **options: Any) -> dict[str, Any]:
    return {
        "labelerEmail": labeler,
        "projectId": project_id,
        "options": {"numberOfFilesPerRequest": 0, "serviceProvider": "CUSTOM", **options},
        "targetAPI": {"endpoint": "http://127.0.0.1:9/predict", "secretKey": "k3y"},
    }


def test_auto_label_rules(server: LabelingServer) -> None:
    alice, outsider, mallory = server.user("Acme"), server.user(), server.user("Evil")
    team_project = server.token_project(alice, ["John went home"])
    personal = server.wait_job(
        alice.token,
        server.create_project(alice.token, "Mine", "TOKEN_BASED", [("a.txt", b"a")])["data"][
            "createProject"
        ]["id"],
    )["resultId"]

    def run(token: str, variables: dict[str, Any]) -> dict[str, Any]:
        return server.gql(AUTO_LABEL, {"input": variables}, token=token, operation_name="Run1")

    assert (
        code_of(
            run(alice.token, auto_label_input(team_project, alice.email, serviceProvider="SPACY"))
        )
        == "BAD_USER_INPUT"
    )
    assert (
        code_of(run(alice.token, auto_label_input(team_project, outsider.email)))
        == "BAD_USER_INPUT"
    )
    assert (
        code_of(run(alice.token, auto_label_input(team_project, "nobody@example.com")))
        == "BAD_USER_INPUT"
    )
    assert (
        code_of(
            run(
                alice.token, auto_label_input(team_project, alice.email, numberOfFilesPerRequest=-1)
            )
        )
        == "BAD_USER_INPUT"
    )
    assert code_of(run(alice.token, auto_label_input(personal, alice.email))) == "FORBIDDEN"
    assert code_of(run(mallory.token, auto_label_input(team_project, mallory.email))) == "NOT_FOUND"
    assert (
        code_of(run(alice.token, auto_label_input("no-such-project", alice.email))) == "NOT_FOUND"
    )
    bad_url = auto_label_input(team_project, alice.email)
    bad_url["targetAPI"]["endpoint"] = "file:///etc/passwd"
    assert code_of(run(alice.token, bad_url)) == "BAD_USER_INPUT"


def test_nul_characters_are_a_user_error_on_every_engine(server: LabelingServer) -> None:
    user = server.user()
    cases: list[tuple[str, dict[str, Any]]] = [
        ("query($id: String!) { getJob(jobId: $id) { id } }", {"id": "a\x00b"}),
        (CREATE_TAG, {"input": {"name": "x\x00"}}),
    ]
    for query, variables in cases:
        assert code_of(server.gql(query, variables, token=user.token)) == "BAD_USER_INPUT"


def test_odd_bytes_in_uploads_are_stored_on_every_engine(server: LabelingServer) -> None:
    user = server.user()
    started = server.create_project(user.token, "P", "TOKEN_BASED", [("n\x00ul.txt", b"a\x00b c")])
    job = server.wait_job(user.token, started["data"]["createProject"]["id"])
    assert job["status"] == "DELIVERED", job
    project = server.project(user.token, job["resultId"])
    assert project is not None
    (document,) = project["documents"]
    assert "\x00" not in document["name"]
    assert document["importable"]["cells"][0]["tokens"] == ["a\x00b", "c"]

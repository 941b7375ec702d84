"""Issue 11, limits: what one tenant may upload, ask for and queue, each refusal a LIMIT_EXCEEDED
error naming its setting, before any job exists; paged documents; hostile request bodies."""

from __future__ import annotations

import io
import json
from collections.abc import Callable
from typing import Any

import httpx
import pytest
from hypothesis import given
from hypothesis import strategies as st
from labeling_support import (
    CREATE_PROJECT,
    JOB_FIELDS,
    LabelingServer,
    StartAPI,
    User,
)

from extractor.labeling.documents import (
    DocumentTooLarge,
    TextBudget,
    cells_from_text,
    importable_from_reply,
    iter_lines,
)

MakeServer = Callable[..., LabelingServer]

AUTO_LABEL = f"""
mutation($input: AutoLabelTokenBasedProjectInput!) {{
  autoLabelTokenBasedProject(input: $input) {{ {JOB_FIELDS} }}
}}"""
PAGE = """query($id: ID!, $offset: Int, $limit: Int) {
  getProject(projectId: $id) { documentCount documents(offset: $offset, limit: $limit) { name } }
}"""


def limit_of(result: dict[str, Any]) -> tuple[str, str]:
    """The (code, limit) of a response's only error, checked to carry its type and maximum."""
    assert result["data"] is None or all(v is None for v in result["data"].values()), result
    (error,) = result["errors"]
    extensions = error["extensions"]
    if extensions["code"] == "LIMIT_EXCEEDED":
        assert extensions["type"] == "LimitExceededError"
        assert isinstance(extensions["maximum"], int)
    return extensions["code"], extensions.get("limit", "")


def rows(server: LabelingServer, table: str) -> int:
    with server.db.engine.connect() as connection:
        return int(connection.exec_driver_sql(f"SELECT count(*) FROM {table}").scalar() or 0)


def auto_label_input(user: User, project_id: str) -> dict[str, Any]:
    return {
        "labelerEmail": user.email,
        "projectId": project_id,
        "options": {"numberOfFilesPerRequest": 0},
        "targetAPI": {"endpoint": "http://127.0.0.1:9/predict", "secretKey": "k"},
    }


# -- the counting itself (pure) ----------------------------------------------------------------

# Every line boundary str.splitlines knows and every kind of whitespace str.split knows.
TRICKY = st.text(st.sampled_from("ab \t\n\r\v\f\x1c\x1d\x1e\x1f\x85\xa0\u2028\u2029\u3000"))


@given(TRICKY)
def test_lines_and_tokens_are_split_exactly_as_before(text: str) -> None:
    assert list(iter_lines(text)) == text.splitlines()
    expected = [line.split() for line in text.splitlines() if line.split()]
    assert [cell["tokens"] for cell in cells_from_text(text)] == expected


@given(TRICKY, st.integers(0, 6), st.integers(0, 12))
def test_a_budget_refuses_exactly_past_its_limits(text: str, lines: int, tokens: int) -> None:
    budget = TextBudget(lines, tokens, lines, tokens)
    kept = [line.split() for line in text.splitlines() if line.split()]
    fits = len(kept) <= lines and sum(map(len, kept)) <= tokens
    try:
        budget.measure("t", text)
    except DocumentTooLarge as exc:
        assert not fits and exc.field in ("max_document_lines", "max_document_tokens")
    else:
        assert fits and (budget.project_lines, budget.project_tokens) == (
            len(kept),
            sum(map(len, kept)),
        )


def test_a_project_budget_spans_its_documents_and_json_replies() -> None:
    budget = TextBudget(max_document_lines=5, max_document_tokens=50, max_project_lines=6)
    assert len(cells_from_text("a\nb\nc", budget=budget)) == 3
    reply = {
        "name": "s.png",
        "type": "BOUNDING_BOX",
        "cells": [
            {"content": w, "index": 0, "line": i, "metadata": [], "tokens": [w]}
            for i, w in enumerate("defg")
        ],
        "labelSets": [],
        "labels": [],
        "pages": [],
    }
    with pytest.raises(DocumentTooLarge, match=r"MAX_PROJECT_LINES; 3 before 's\.png'"):
        importable_from_reply(
            "s.png", "OCR", "application/json", json.dumps(reply).encode(), None, budget
        )
    with pytest.raises(DocumentTooLarge, match="'one' has more than 5 lines"):
        cells_from_text("1\n2\n3\n4\n5\n6", name="one", budget=TextBudget(max_document_lines=5))


# -- what a project may hold, refused when the upload arrives ----------------------------------


def test_a_million_line_text_is_refused_on_upload_before_any_job(server: LabelingServer) -> None:
    # Issue 11, point 1: this 2 MB upload used to become a job that grew the server by 459 MB.
    user = server.user()
    result = server.create_project(user.token, "Big", "TOKEN_BASED", [("a.txt", b"a\n" * 10**6)])
    assert limit_of(result) == ("LIMIT_EXCEEDED", "EXTRACTOR_LABELING_MAX_DOCUMENT_LINES")
    message = result["errors"][0]["message"]
    assert "'a.txt'" in message and "50000" in message
    assert rows(server, "jobs") == rows(server, "job_uploads") == 0


@pytest.mark.parametrize(
    ("settings", "files", "limit"),
    [
        ({"max_document_bytes": 10}, [("a.txt", b"x" * 11)], "MAX_DOCUMENT_BYTES"),
        ({"max_document_lines": 2}, [("a.txt", b"one\n\n two \nthree")], "MAX_DOCUMENT_LINES"),
        ({"max_document_tokens": 3}, [("a.txt", b"a b\nc d")], "MAX_DOCUMENT_TOKENS"),
        ({"max_document_tokens": 3}, [("a.txt", b"a\xc2\xa0b\x1fc d")], "MAX_DOCUMENT_TOKENS"),
        ({"max_project_documents": 2}, [("a.txt", b"a")] * 3, "MAX_PROJECT_DOCUMENTS"),
        ({"max_project_bytes": 5}, [("a.txt", b"abc"), ("b.txt", b"def")], "MAX_PROJECT_BYTES"),
        ({"max_project_lines": 3}, [("a.txt", b"1\n2"), ("b.txt", b"3\n4")], "MAX_PROJECT_LINES"),
        ({"max_project_tokens": 3}, [("a.txt", b"1 2"), ("b.txt", b"3 4")], "MAX_PROJECT_TOKENS"),
    ],
    ids=lambda value: value if isinstance(value, str) else None,
)
def test_each_text_limit_refuses_its_upload_with_its_name(
    make_server: MakeServer, settings: dict[str, Any], files: list[tuple[str, bytes]], limit: str
) -> None:
    server = make_server(**settings)
    user = server.user()
    result = server.create_project(user.token, "P", "TOKEN_BASED", files)
    assert limit_of(result) == ("LIMIT_EXCEEDED", f"EXTRACTOR_LABELING_{limit}")
    assert rows(server, "jobs") == 0


def test_a_project_exactly_at_its_limits_is_built(make_server: MakeServer) -> None:
    server = make_server(
        max_document_bytes=11, max_document_lines=2, max_document_tokens=3,
        max_project_lines=4, max_project_tokens=6, max_project_bytes=22,
    )  # fmt: skip
    user = server.user("Acme")
    project_id = server.token_project(user, ["a b", "", "c"])
    project = server.project(user.token, project_id)
    assert project is not None
    (document,) = project["documents"]
    assert [c["tokens"] for c in document["importable"]["cells"]] == [["a", "b"], ["c"]]


def test_an_extractor_reply_over_the_line_limit_fails_its_job_naming_the_limit(
    make_server: MakeServer, fake_api: StartAPI
) -> None:
    # OCR and AUDIO text only exists once the extraction API answers: the job checks it.
    server = make_server(max_document_lines=3)
    user = server.user("Acme")
    extractor = fake_api(lambda _: (200, {"Content-Type": "text/plain"}, b"w\n" * 4))
    api = server.ok(
        """mutation($t: ID!, $i: CreateCustomAPIInput!) { createCustomAPI(teamId: $t, input: $i) {
           id } }""",
        {"t": user.team_id, "i": {"name": "x", "endpointURL": extractor.url, "purpose": "ASR_API"}},
        token=user.token,
    )["createCustomAPI"]["id"]
    started = server.create_project(
        user.token, "Talk", "AUDIO", [("a.wav", b"RIFF")], teamId=user.team_id, customAPIId=api
    )
    job = server.wait_job(user.token, started["data"]["createProject"]["id"])
    assert job["status"] == "FAILED", job
    (error,) = job["errors"]
    assert "EXTRACTOR_LABELING_MAX_DOCUMENT_LINES" in error["stack"]
    assert error["args"]["limit"] == "EXTRACTOR_LABELING_MAX_DOCUMENT_LINES"
    assert rows(server, "projects") == 0


# -- point 8: one upload mapped to two variables ------------------------------------------------


def test_one_upload_mapped_to_two_documents_gives_both_its_content(server: LabelingServer) -> None:
    user = server.user()
    variables = {"input": {"name": "Twice", "kind": "TOKEN_BASED", "documents": [None, None]}}
    response = server.http.post(
        "/graphql",
        data={
            "operations": json.dumps({"query": CREATE_PROJECT, "variables": variables}),
            "map": json.dumps(
                {"0": ["variables.input.documents.0", "variables.input.documents.1"]}
            ),
        },
        files={"0": ("same.txt", io.BytesIO(b"hello world\nagain"), "text/plain")},
        headers={"Authorization": f"Bearer {user.token}"},
    )
    started = response.json()
    assert "errors" not in started, started
    job = server.wait_job(user.token, started["data"]["createProject"]["id"])
    assert job["status"] == "DELIVERED", job
    project = server.project(user.token, job["resultId"])
    assert project is not None
    contents = [[c["content"] for c in d["importable"]["cells"]] for d in project["documents"]]
    assert contents == [["hello world", "again"]] * 2


# -- what one request may ask for ---------------------------------------------------------------


def test_a_hundred_aliases_of_get_project_are_refused(server: LabelingServer) -> None:
    # Issue 11, point 2: this 6 KB query returned 85 MB with a peak of 792 MB.
    user = server.user("Acme")
    project_id = server.token_project(user, ["some words"])

    def aliased(selection: str) -> dict[str, Any]:
        fields = " ".join(
            f'p{i}: getProject(projectId: "{project_id}") {{ {selection} }}' for i in range(100)
        )
        return server.gql(f"{{ {fields} }}", token=user.token)

    attack = aliased("id name documents { id name importable }")
    assert attack["data"] is None and attack["errors"]
    assert {e["extensions"]["code"] for e in attack["errors"]} == {"LIMIT_EXCEEDED"}
    cheap = aliased("id")  # costs 100: only the aliases are too many
    assert limit_of(cheap) == ("LIMIT_EXCEEDED", "EXTRACTOR_LABELING_MAX_QUERY_ALIASES")


def test_three_hundred_aliased_auto_label_mutations_queue_nothing(server: LabelingServer) -> None:
    # Issue 11, point 2: one 15 KB request used to queue 300 jobs.
    user = server.user("Acme")
    project_id = server.token_project(user, ["some words"])
    before = rows(server, "jobs")
    fields = " ".join(
        f"m{i}: autoLabelTokenBasedProject(input: $input) {{ id }}" for i in range(300)
    )
    query = f"mutation($input: AutoLabelTokenBasedProjectInput!) {{ {fields} }}"
    result = server.gql(query, {"input": auto_label_input(user, project_id)}, token=user.token)
    assert result["data"] is None
    messages = {e["extensions"].get("limit"): e["message"] for e in result["errors"]}
    assert (
        "job mutations per request" in messages
        and "EXTRACTOR_LABELING_MAX_QUERY_ALIASES" in messages
    )
    assert rows(server, "jobs") == before


def test_two_job_mutations_in_one_request_are_refused_even_without_aliases(
    server: LabelingServer,
) -> None:
    user = server.user("Acme")
    project_id = server.token_project(user, ["some words"])
    before = rows(server, "jobs")
    query = """mutation($input: AutoLabelTokenBasedProjectInput!) {
      ...Start
      autoLabelTokenBasedProject(input: $input) { id }
    }
    fragment Start on Mutation { again: autoLabelTokenBasedProject(input: $input) { status } }"""
    result = server.gql(query, {"input": auto_label_input(user, project_id)}, token=user.token)
    assert limit_of(result) == ("LIMIT_EXCEEDED", "job mutations per request")
    assert rows(server, "jobs") == before
    # One aliased job mutation with other mutations is fine (the README's curl flow aliases one).
    single = """mutation($input: AutoLabelTokenBasedProjectInput!) {
      result: autoLabelTokenBasedProject(input: $input) { id status }
      createTag(input: {name: "t"}) { id }
    }"""
    data = server.ok(single, {"input": auto_label_input(user, project_id)}, token=user.token)
    assert data["result"]["status"] == "IN_PROGRESS"


@pytest.mark.parametrize(
    ("query", "variables", "limit"),
    [
        # Deep: fragments count as the fields they expand to.
        (
            'query { getJob(jobId: "x") { ...A } } fragment A on Job { errors { ...B } } '
            "fragment B on JobError { id }",
            None,
            None,
        ),
        (
            "query($id: ID!) { getProject(projectId: $id) { documents(limit: 20) { importable "
            "id name } tags { id } } a: getProject(projectId: $id) { documents(limit: 20) { "
            "importable } } b: getProject(projectId: $id) { documents { importable } } "
            "c: getProject(projectId: $id) { documents { importable } } "
            "d: getProject(projectId: $id) { documents { importable } } "
            "e: getProject(projectId: $id) { documents { importable } } }",
            {"id": "p"},
            "EXTRACTOR_LABELING_MAX_QUERY_COST",
        ),
        (
            "query($ids: [String!]!) { getJobs(jobIds: $ids) { id status progress resultId "
            "createdAt updatedAt errors { id stack args } } }",
            {"ids": [f"j{i}" for i in range(80)]},
            None,
        ),
        (
            "query($ids: [String!]!) { getJobs(jobIds: $ids) { id status } }",
            {"ids": [f"j{i}" for i in range(501)]},
            "EXTRACTOR_LABELING_MAX_QUERY_COST",
        ),
        (
            "{ " + "x: getPersonalTags { id } " * 11 + "}",
            None,
            "EXTRACTOR_LABELING_MAX_QUERY_ALIASES",
        ),
        (
            "{ " + "getPersonalTags { id } " * 2000 + "}",
            None,
            "EXTRACTOR_LABELING_MAX_QUERY_TOKENS",
        ),
        (
            "fragment F0 on Query { getPersonalTags { id } } "
            + " ".join(
                f"fragment F{i} on Query {{ ...F{i - 1} ...F{i - 1} }}" for i in range(1, 60)
            )
            + " { ...F59 }",
            None,
            "EXTRACTOR_LABELING_MAX_QUERY_COST",
        ),
    ],
    ids=[
        "fragments-within-depth",
        "cost",
        "80-jobs-within-cost",
        "501-jobs",
        "aliases",
        "tokens",
        "fragment-bomb",
    ],
)
def test_query_shape_limits(
    server: LabelingServer, query: str, variables: dict[str, Any] | None, limit: str | None
) -> None:
    user = server.user()
    result = server.gql(query, variables, token=user.token)
    if limit is None:
        assert "errors" not in result, result
    else:
        assert limit in {e["extensions"].get("limit") for e in result["errors"]}, result
        assert result["data"] is None


@pytest.mark.parametrize(
    "query",
    [
        "{ getJob(jobId: " + "[" * 2000 + "]" * 2000 + ") { id } }",
        "{ getPersonalTags " + "{ id " * 1600 + "}" * 1600 + "}",
        "{ " + "... on Query { " * 1000 + "getPersonalTags { id }" + "}" * 1000 + "}",
    ],
    ids=["list-literal", "selections", "inline-fragments"],
)
def test_a_query_nested_thousands_deep_is_a_parse_error_not_a_crash(
    server: LabelingServer, query: str
) -> None:
    user = server.user()
    result = server.gql(query, token=user.token)
    (error,) = result["errors"]
    assert error["extensions"]["code"] == "GRAPHQL_PARSE_FAILED"
    assert "nested too deeply" in error["message"]


def test_a_chain_of_hundreds_of_fragments_is_a_validation_error_not_a_crash(
    server: LabelingServer,
) -> None:
    chain = " ".join(f"fragment F{i} on Query {{ ...F{i + 1} }}" for i in range(450))
    query = chain + " fragment F450 on Query { getPersonalTags { id } } { ...F0 }"
    result = server.gql(query, token=server.user().token)
    (error,) = result["errors"]
    assert error["extensions"]["code"] == "GRAPHQL_VALIDATION_FAILED" and result["data"] is None


def test_a_query_deeper_than_the_limit_is_refused(make_server: MakeServer) -> None:
    server = make_server(max_query_depth=2)
    user = server.user()
    shallow = server.gql('{ getJob(jobId: "x") { id } }', token=user.token)
    assert "errors" not in shallow
    deep = server.gql('{ getJob(jobId: "x") { errors { id } } }', token=user.token)
    assert limit_of(deep) == ("LIMIT_EXCEEDED", "EXTRACTOR_LABELING_MAX_QUERY_DEPTH")


def test_introspection_still_works_but_cannot_nest_without_end(server: LabelingServer) -> None:
    from graphql import get_introspection_query

    user = server.user()
    assert "errors" not in server.gql(get_introspection_query(), token=user.token)
    nested = "{ __schema { types { fields { type { fields { type { fields { name } } } } } } } }"
    result = server.gql(nested, token=user.token)
    assert result["errors"] and result["data"] is None


# -- per-user job cap ---------------------------------------------------------------------------


def test_a_user_at_the_job_cap_is_refused_and_others_are_not(make_server: MakeServer) -> None:
    server = make_server(embedded_workers=0, max_queued_jobs_per_user=2)  # jobs stay queued
    greedy, other = server.user("Acme"), server.user("Acme")
    for _ in range(2):
        started = server.create_project(greedy.token, "P", "TOKEN_BASED", [("a.txt", b"a")])
        assert "errors" not in started, started
    refused = server.create_project(greedy.token, "P", "TOKEN_BASED", [("a.txt", b"a")])
    assert limit_of(refused) == ("LIMIT_EXCEEDED", "EXTRACTOR_LABELING_MAX_QUEUED_JOBS_PER_USER")
    assert "2 unfinished jobs" in refused["errors"][0]["message"]
    assert rows(server, "jobs") == 2
    assert "errors" not in server.create_project(other.token, "P", "TOKEN_BASED", [("a.txt", b"a")])
    # Finished jobs free their slot.
    with server.db.engine.begin() as connection:
        connection.exec_driver_sql("UPDATE jobs SET status = 'DELIVERED'")
    assert "errors" not in server.create_project(
        greedy.token, "P", "TOKEN_BASED", [("a.txt", b"a")]
    )


def test_concurrent_requests_of_one_user_cannot_overshoot_the_job_cap(
    make_server: MakeServer,
) -> None:
    from concurrent.futures import ThreadPoolExecutor

    server = make_server(embedded_workers=0, max_queued_jobs_per_user=3)
    user = server.user()
    with ThreadPoolExecutor(8) as pool:
        results = list(
            pool.map(
                lambda _: server.create_project(user.token, "P", "TOKEN_BASED", [("a.txt", b"a")]),
                range(8),
            )
        )
    created = [r for r in results if "errors" not in r]
    assert len(created) == 3 and rows(server, "jobs") == 3
    assert {limit_of(r)[1] for r in results if "errors" in r} == {
        "EXTRACTOR_LABELING_MAX_QUEUED_JOBS_PER_USER"
    }


def test_the_job_cap_counts_auto_label_jobs_too(make_server: MakeServer) -> None:
    server = make_server(max_queued_jobs_per_user=1)
    user = server.user("Acme")
    project_id = server.token_project(user, ["some words"])  # delivered: no longer counted
    server.state.workers.stop()  # keep the next job unfinished
    first = server.gql(AUTO_LABEL, {"input": auto_label_input(user, project_id)}, token=user.token)
    assert "errors" not in first, first
    second = server.gql(AUTO_LABEL, {"input": auto_label_input(user, project_id)}, token=user.token)
    assert limit_of(second) == ("LIMIT_EXCEEDED", "EXTRACTOR_LABELING_MAX_QUEUED_JOBS_PER_USER")


# -- paged documents ----------------------------------------------------------------------------


def test_documents_are_paged_with_a_bounded_default(make_server: MakeServer) -> None:
    server = make_server(max_documents_page=2)
    user = server.user()
    files = [(f"d{i}.txt", f"text {i}".encode()) for i in range(3)]
    started = server.create_project(user.token, "Pages", "TOKEN_BASED", files)
    project_id = server.wait_job(user.token, started["data"]["createProject"]["id"])["resultId"]

    def page(**arguments: Any) -> Any:
        return server.ok(PAGE, {"id": project_id, **arguments}, token=user.token)["getProject"]

    assert page() == {"documentCount": 3, "documents": [{"name": "d0.txt"}, {"name": "d1.txt"}]}
    assert page(offset=2)["documents"] == [{"name": "d2.txt"}]
    assert page(offset=1, limit=1)["documents"] == [{"name": "d1.txt"}]
    assert page(offset=5)["documents"] == []
    # The old query shape still works (first page).
    assert len(server.project(user.token, project_id)["documents"]) == 2  # type: ignore[index]
    too_long = server.gql(PAGE, {"id": project_id, "limit": 3}, token=user.token)
    assert limit_of(too_long) == ("LIMIT_EXCEEDED", "EXTRACTOR_LABELING_MAX_DOCUMENTS_PAGE")
    negative = server.gql(PAGE, {"id": project_id, "offset": -1}, token=user.token)
    assert limit_of(negative)[0] == "BAD_USER_INPUT"


# -- hostile request bodies (point 8) -----------------------------------------------------------


def raw_post(server: LabelingServer, token: str, **kwargs: Any) -> httpx.Response:
    return server.http.post("/graphql", headers={"Authorization": f"Bearer {token}"}, **kwargs)


@pytest.mark.parametrize("depth", [40, 5000, 200_000])
def test_a_deeply_nested_json_body_is_a_400_bad_request(server: LabelingServer, depth: int) -> None:
    user = server.user()
    body = '{"query": "{ getPersonalTags { id } }", "variables": {"x": ' + "[" * depth + "]" * depth
    response = server.http.post(
        "/graphql",
        content=(body + "}}").encode(),
        headers={"Authorization": f"Bearer {user.token}", "Content-Type": "application/json"},
    )
    assert response.status_code == 400, response.text
    assert response.json()["errors"][0]["extensions"] == {
        "code": "BAD_REQUEST",
        "type": "BadRequestError",
    }


def test_a_deeply_nested_multipart_operations_field_is_a_400(server: LabelingServer) -> None:
    user = server.user()
    response = raw_post(
        server,
        user.token,
        data={"operations": "[" * 5000 + "]" * 5000, "map": "{}"},
        files={"0": ("a.txt", io.BytesIO(b"a"), "text/plain")},
    )
    assert response.status_code == 400, response.text
    assert response.json()["errors"][0]["extensions"]["code"] == "BAD_REQUEST"


def test_an_oversized_json_body_is_a_413(make_server: MakeServer) -> None:
    server = make_server(max_request_json_bytes=1000)
    user = server.user()
    body = {"query": "{ getPersonalTags { id } }", "variables": {"pad": "x" * 2000}}
    response = raw_post(server, user.token, json=body)
    assert response.status_code == 413, response.text
    assert response.json()["errors"][0]["extensions"]["code"] == "PAYLOAD_TOO_LARGE"
    operations = json.dumps(body)
    response = raw_post(
        server,
        user.token,
        data={"operations": operations, "map": "{}"},
        files={"0": ("a.txt", io.BytesIO(b"a"), "text/plain")},
    )
    assert response.status_code == 413, response.text

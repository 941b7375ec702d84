"""Issue 18, point 2: a reply's documents are charged by their stored bytes, capped by
EXTRACTOR_LABELING_MAX_REPLY_BYTES (the whole request refused before any document is read),
and copied into the reply exactly as stored."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest
from labeling_support import LabelingServer, User
from sqlalchemy import select

from extractor.labeling.models import Document

MakeServer = Callable[..., LabelingServer]
LIMIT = "EXTRACTOR_LABELING_MAX_REPLY_BYTES"


def project_of(server: LabelingServer, user: User, texts: list[str]) -> str:
    """A delivered TOKEN_BASED project of ``texts``, one document each; its id."""
    started = server.create_project(
        user.token, "P", "TOKEN_BASED",
        [(f"d{i}.txt", text.encode()) for i, text in enumerate(texts)], teamId=user.team_id,
    )  # fmt: skip
    job = server.wait_job(user.token, started["data"]["createProject"]["id"])
    assert job["status"] == "DELIVERED", job
    return str(job["resultId"])


def stored_documents(server: LabelingServer) -> dict[str, tuple[int, dict[str, Any]]]:
    """Every document's recorded size and importable, by id."""
    with server.db.session() as session:
        return {d.id: (d.size_bytes or 0, d.importable) for d in session.scalars(select(Document))}


def refused_for_size(result: dict[str, Any]) -> None:
    """The request was refused whole, naming the reply limit."""
    assert result["data"] is None, str(result)[:300]
    (error,) = result["errors"]
    assert error["extensions"]["code"] == "LIMIT_EXCEEDED"
    assert error["extensions"]["limit"] == LIMIT
    assert LIMIT in error["message"]


def aliased(project_id: str, count: int, selection: str = "documents { id importable }") -> str:
    fields = " ".join(
        f'p{i}: getProject(projectId: "{project_id}") {{ {selection} }}' for i in range(count)
    )
    return f"{{ {fields} }}"


def test_a_reply_over_its_byte_cap_is_refused_whole_and_one_within_is_exact(
    make_server: MakeServer,
) -> None:
    texts = [f"Document {i} Zürich 東京 " + "word " * 2000 for i in range(5)]
    probe = make_server()
    user = probe.user("Acme")
    project_id = project_of(probe, user, texts)
    stored = stored_documents(probe)
    total = sum(size for size, _ in stored.values())
    # The shape: 4 aliases of every document, 4x the project's bytes.
    server = make_server(max_reply_bytes=4 * total - 1)
    refused_for_size(server.gql(aliased(project_id, 4), token=user.token))
    # Exactly at the cap: answered, each document identical to what is stored.
    server = make_server(max_reply_bytes=4 * total)
    data = server.ok(aliased(project_id, 4), token=user.token)
    for alias in data.values():
        assert len(alias["documents"]) == 5
        for document in alias["documents"]:
            assert document["importable"] == stored[document["id"]][1]
    # Names and ids cost nothing of the reply budget.
    tiny = make_server(max_reply_bytes=1)
    assert tiny.ok(aliased(project_id, 4, "documents { id name }"), token=user.token)
    alone = tiny.gql(aliased(project_id, 1), token=user.token)
    refused_for_size(alone)
    assert "alone has" in alone["errors"][0]["message"]  # no page is small enough: say so


@pytest.mark.parametrize(
    ("selection", "copies"),
    [
        # Not in the issue: the same bytes asked for through fragments, aliases of the field
        # itself, overlapping pages and an inline fragment: every copy of a document is charged.
        ("documents { ...D }", [1, 1, 1, 1, 1]),
        ("documents { a: importable b: importable c: importable d: importable }", [4] * 5),
        ("a: documents(limit: 3) { importable } b: documents(offset: 2) { importable }",
         [1, 1, 2, 1, 1]),
        ("documents { ... on Document { importable } }", [1, 1, 1, 1, 1]),
    ],
    ids=["fragment", "field-aliases", "overlapping-pages", "inline-fragment"],
)  # fmt: skip
def test_every_way_to_ask_for_the_bytes_is_charged(
    make_server: MakeServer, selection: str, copies: list[int]
) -> None:
    probe = make_server()
    user = probe.user("Acme")
    # Documents of different sizes, so a wrong count cannot add up by chance.
    project_id = project_of(probe, user, [f"doc {i} " + "w " * (500 + 97 * i) for i in range(5)])
    with probe.db.session() as session:
        sizes = [d.size_bytes or 0 for d in session.scalars(select(Document).order_by("position"))]
    asked = sum(n * size for n, size in zip(copies, sizes, strict=True))
    query = f'{{ getProject(projectId: "{project_id}") {{ {selection} }} }}'
    query += " fragment D on Document { importable }" if "...D" in selection else ""
    refused_for_size(make_server(max_reply_bytes=asked - 1).gql(query, token=user.token))
    assert make_server(max_reply_bytes=asked).ok(query, token=user.token)["getProject"]


def test_the_reply_is_the_stored_json_and_still_valid_after_a_label_update(
    server: LabelingServer,
) -> None:
    user = server.user("Acme")
    project_id = project_of(server, user, ['Quotes " and \\ back\nslashes\tand \u2028 lines'])
    with server.db.session() as session:
        document = session.scalars(select(Document)).one()
        document.importable = {**document.importable, "labels": [{"x": "é"}]}
    data = server.ok(aliased(project_id, 1), token=user.token)
    [(size, importable)] = stored_documents(server).values()
    assert data["p0"]["documents"][0]["importable"] == importable
    assert size == len(json.dumps(importable))


# -- lists that are not paged: bounded where they grow ------------------------------------------

CREATE_TAG = "mutation($input: CreateTagInput!) { createTag(input: $input) { id } }"
CREATE_API = """mutation($teamId: ID!, $input: CreateCustomAPIInput!) {
  createCustomAPI(teamId: $teamId, input: $input) { id }
}"""


def test_tags_and_custom_apis_stop_at_their_owners_limit(make_server: MakeServer) -> None:
    # 100,000 tags (one request each) would make every getPersonalTags load 100,000 rows.
    server = make_server(max_tags_per_owner=2, max_custom_apis_per_team=1)
    user, teammate, stranger = server.user("Acme"), server.user("Acme"), server.user("Other")

    def tag(who: User, name: str, team: str | None = None) -> dict[str, Any]:
        return server.gql(CREATE_TAG, {"input": {"name": name, "teamId": team}}, token=who.token)

    def over(result: dict[str, Any], limit: str) -> None:
        assert result["data"] is None, result
        (error,) = result["errors"]
        assert (error["extensions"]["code"], error["extensions"]["limit"]) == (
            "LIMIT_EXCEEDED",
            f"EXTRACTOR_LABELING_{limit}",
        )

    for name in ("a", "b"):
        assert "errors" not in tag(user, name)
        assert "errors" not in tag(teammate, name, user.team_id)
    over(tag(user, "c"), "MAX_TAGS_PER_OWNER")
    over(tag(user, "c", user.team_id), "MAX_TAGS_PER_OWNER")  # the team's two, by anyone
    assert "errors" not in tag(stranger, "c")  # others count their own
    assert len(server.ok("{ getPersonalTags { id } }", token=user.token)["getPersonalTags"]) == 2

    api = {"name": "OCR", "endpointURL": "https://ocr.example.com/x", "purpose": "OCR_API"}
    first = server.gql(CREATE_API, {"teamId": user.team_id, "input": api}, token=user.token)
    assert "errors" not in first
    again = server.gql(CREATE_API, {"teamId": user.team_id, "input": api}, token=teammate.token)
    over(again, "MAX_CUSTOM_APIS_PER_TEAM")
    other = server.gql(CREATE_API, {"teamId": stranger.team_id, "input": api}, token=stranger.token)
    assert "errors" not in other


@pytest.mark.slow  # seconds of CPU each: make test runs it, make test-fast leaves it out
def test_a_document_labeled_while_its_reply_is_written_is_sent_whole_as_it_was(
    server: LabelingServer,
) -> None:
    # Documents are read in pieces as the reply goes out: the pieces must all be of one version.
    user = server.user("Acme")
    project_id = project_of(server, user, [("abcdefghij " * 10 + "\n") * 40_000])  # 9 MB JSON
    [(_, before)] = stored_documents(server).values()
    query = {"query": aliased(project_id, 1)}
    headers = {"Authorization": f"Bearer {user.token}"}
    with server.http.stream("POST", "/graphql", json=query, headers=headers) as response:
        chunks = response.iter_bytes()
        body = b""
        while len(body) < 2 * 1024 * 1024:  # well into the document's text
            body += next(chunks)
        assert len(body) < 6 * 1024 * 1024  # and the server still reading it
        with server.db.session() as session:
            document = session.scalars(select(Document)).one()
            document.importable = {**document.importable, "labels": [{"new": True}] * 1000}
        body += b"".join(chunks)
    assert json.loads(body)["data"]["p0"]["documents"][0]["importable"] == before

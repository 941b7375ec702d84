"""Issue 18, point 1: introspection counts like any other field (aliases, depth, an exact cost),
and the standard introspection query still works, answered from a cache."""

from __future__ import annotations

from typing import Any

import pytest
from graphql import get_introspection_query, graphql_sync, parse
from labeling_support import LabelingServer

from extractor.labeling.graphql import labeling_schema
from extractor.labeling.introspection import full_description_cost
from extractor.labeling.query_limits import introspection_cost


def limits(result: dict[str, Any]) -> set[str]:
    """The limits a refused request names (checked to have run nothing)."""
    assert result["data"] is None, result
    named = {e["extensions"].get("limit") for e in result["errors"]}
    assert {e["extensions"]["code"] for e in result["errors"]} <= {
        "LIMIT_EXCEEDED",
        "GRAPHQL_VALIDATION_FAILED",  # graphql-core's own introspection depth rule, with ours
    }, result
    return named - {None}


# The issue's 823-character query: 10 aliases of __schema, each spreading a fragment of 7
# aliases of types -> fields -> type -> name (22.8 MB and 10.5 s of CPU each, before).
ISSUE_QUERY = (
    "{ "
    + " ".join(f"s{i}: __schema {{ ...T }}" for i in range(10))
    + " } fragment T on __Schema { "
    + " ".join(f"t{i}: types {{ ...F }}" for i in range(7))
    + " } fragment F on __Type { fields { type { name } } }"
)
FULL_TYPE = (
    "fragment Full on __Type { name kind fields { name args { name type { name } } "
    "type { name kind ofType { name kind ofType { name } } } } inputFields { name } "
    "enumValues { name } interfaces { name } possibleTypes { name } }"
)


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        (ISSUE_QUERY, {"EXTRACTOR_LABELING_MAX_QUERY_ALIASES"}),
        (
            "{ __schema { " + " ".join(f"t{i}: types {{ name }}" for i in range(50)) + " } }",
            {"EXTRACTOR_LABELING_MAX_QUERY_ALIASES"},
        ),
        # Not in the issue: no aliases at all, the reply multiplied by fragments and nesting.
        (
            "{ ...A } fragment A on Query { __schema { types { ...Full } directives { name } } "
            '__type(name: "Query") { ...Full } } ' + FULL_TYPE + " query Again { ...A }",
            set(),  # two operations, each within the allowance: no refusal
        ),
        (
            "{ a: __schema { types { ...Full } } b: __schema { types { ...Full } } "
            "c: __schema { types { ...Full } } } " + FULL_TYPE,
            {"EXTRACTOR_LABELING_MAX_QUERY_COST"},
        ),
        (
            "{ "
            + " ".join(f"s{i}: __schema {{ types {{ ...Full }} }}" for i in range(10))
            + " } "
            + FULL_TYPE,
            {"EXTRACTOR_LABELING_MAX_QUERY_COST"},
        ),
        (
            '{ __type(name: "Query") { fields { type { fields { type { fields { type { '
            "fields { name } } } } } } } } }",
            {"EXTRACTOR_LABELING_MAX_QUERY_DEPTH"},
        ),
        ("{ " + " ".join(f"n{i}: __typename" for i in range(11)) + " }", None),
        # With the service's fields, introspection costs like them, against MAX_QUERY_COST.
        (
            "{ getPersonalTags { id } __schema { types { ...Full } directives { name args { "
            "name type { name } } } } } " + FULL_TYPE,
            {"EXTRACTOR_LABELING_MAX_QUERY_COST"},
        ),
        # The introspection allowance is not the service's: 1,100 selections of nothing
        # (an empty page) are still more steps than MAX_QUERY_COST allows.
        (
            '{ getProject(projectId: "x") { documents(limit: 0) { ...D } } } '
            "fragment D on Document { " + "id " * 1100 + "}",
            {"EXTRACTOR_LABELING_MAX_QUERY_COST"},
        ),
    ],
    ids=[
        "issue-10x7-aliases",
        "issue-50-types",
        "fragments-within-allowance",
        "three-descriptions",
        "ten-descriptions",
        "deep-type",
        "typename-aliases",
        "mixed-with-fields",
        "steps-of-an-empty-page",
    ],
)
def test_introspection_shapes_are_refused_by_the_query_limits(
    server: LabelingServer, query: str, expected: set[str] | None
) -> None:
    user = server.user()
    if expected == set():  # several operations: each is checked on its own
        for name in (None, "Again"):
            result = server.gql(query, token=user.token, operation_name=name)
            assert "errors" not in result or "LIMIT_EXCEEDED" not in str(result["errors"])
        return
    result = server.gql(query, token=user.token)
    if expected is None:
        expected = {"EXTRACTOR_LABELING_MAX_QUERY_ALIASES"}
    assert expected <= limits(result)


@pytest.mark.parametrize(
    "options",
    [
        {},
        {"descriptions": False},
        {"type_depth": 12},
        {"specified_by_url": True, "directive_is_repeatable": True, "schema_description": True},
        {
            "input_value_deprecation": True,
            "one_of": True,
            "experimental_directive_deprecation": True,
        },
    ],
)
def test_the_standard_introspection_query_works_and_is_answered_from_a_cache(
    server: LabelingServer, options: dict[str, Any]
) -> None:
    user = server.user()
    query = get_introspection_query(**options)
    expected = graphql_sync(labeling_schema(), query).data
    first = server.gql(query, token=user.token)
    assert first == {"data": expected, "extensions": {}}
    # The same query spelled differently (whitespace, commas) is the same cached answer.
    again = server.gql(query.replace("\n", " ,, "), token=user.token)
    assert again == first
    answers = server.state.introspection._answers
    assert len({id(answer) for answer in answers.values()}) == 1  # ran once


def test_introspection_costs_exactly_the_values_of_its_reply() -> None:
    schema = labeling_schema()

    def values(node: Any) -> int:
        if isinstance(node, dict):
            return len(node) + sum(values(v) for v in node.values())
        if isinstance(node, list):
            return sum(values(v) if isinstance(v, dict | list) else 1 for v in node)
        return 0

    for query in (
        get_introspection_query(),
        get_introspection_query(descriptions=False, type_depth=3),
        '{ __type(name: "Job") { name fields { name type { name ofType { name } } } } }',
        "{ __schema { directives { name locations args { name } } } }",
        '{ __typename __type(name: "Nope") { name } }',
    ):
        result = graphql_sync(schema, query)
        assert not result.errors
        assert introspection_cost(schema, parse(query)) == values(result.data), query
    # The allowance is one full description: about 2,000 values, 46 KB.
    assert 1500 < full_description_cost(schema) < 3000

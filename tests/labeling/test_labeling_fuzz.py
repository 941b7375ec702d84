"""Any valid operation the schema allows, with any values, gets a GraphQL answer: data or
errors with a code, ``extensions: {}``, and never an internal error or a stack trace."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import graphql
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from labeling_support import fast_settings

from extractor.labeling.app import create_labeling_app
from extractor.labeling.auth import add_user
from extractor.replies.schemas import SCHEMAS_DIR

# A dev dependency (schemathesis brings it too); without it this one test is skipped.
from_schema = pytest.importorskip("hypothesis_graphql").from_schema

SDL = (SCHEMAS_DIR / "labeling.graphql").read_text()
# Literal values for our custom scalars: uploads cannot be literals, so none is sent.
SCALARS = {
    "Upload": st.just(graphql.NullValueNode()),
    "JSON": st.just(graphql.StringValueNode(value="x")),
}
KNOWN_CODES = {
    "BAD_USER_INPUT",
    "FORBIDDEN",
    "NOT_FOUND",
    "GRAPHQL_VALIDATION_FAILED",
    "GRAPHQL_PARSE_FAILED",
    "LIMIT_EXCEEDED",
}


def test_generated_operations_never_break_the_server(database_url: str, tmp_path: Path) -> None:
    # Workers stay off: generated jobs would call generated URLs.
    app = create_labeling_app(fast_settings(database_url, tmp_path, embedded_workers=0))
    state = app.extensions["labeling"]
    token = add_user(state.db, "fuzz@example.com", "Fuzzers")["token"]
    client = app.test_client()

    @settings(
        max_examples=60,
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
    )
    @given(operation=from_schema(SDL, custom_scalars=SCALARS))
    def check(operation: str) -> None:
        response = client.post(
            "/graphql", json={"query": operation}, headers={"Authorization": f"Bearer {token}"}
        )
        assert response.status_code == 200, response.data
        body: dict[str, Any] = response.get_json()
        assert body["extensions"] == {} and "data" in body
        for error in body.get("errors", []):
            assert error["extensions"]["code"] in KNOWN_CODES, error
            assert "Traceback" not in str(error)

    try:
        check()
    finally:
        state.close()

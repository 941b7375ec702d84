"""The allow-list as the service applies it (issue 11, point 5): an entry opens one origin, a
redirect cannot bounce a job to another port, a bare entry stops the start, and users read one
generic sentence while the log keeps the detail. Loopback only: 127.0.0.1 is the allowed
address, other ports of it and 127.0.0.2 are the internal targets that must stay untouched."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from labeling_support import FakeAPI, LabelingServer, StartAPI, cli_env, run_cli

CREATE_API = """mutation($teamId: ID!, $input: CreateCustomAPIInput!) {
  createCustomAPI(teamId: $teamId, input: $input) { id }
}"""
INTERNAL_PAGE = b"internal admin page: do not store"


def origin(api: FakeAPI) -> str:
    return api.url.removesuffix("/predict")


def run_ocr_project(server: LabelingServer, url: str) -> tuple[dict, str]:
    user = server.user("Acme")
    fields = {"name": "OCR", "endpointURL": url, "purpose": "OCR_API", "secret": None}
    made = server.ok(CREATE_API, {"teamId": user.team_id, "input": fields}, token=user.token)
    started = server.create_project(
        user.token,
        "Scans",
        "OCR",
        [("scan.png", b"x")],
        teamId=user.team_id,
        customAPIId=made["createCustomAPI"]["id"],
    )
    assert "errors" not in started, started
    return server.wait_job(user.token, started["data"]["createProject"]["id"]), user.token


def test_a_303_to_another_local_port_is_not_followed(
    make_server: Callable[..., LabelingServer],
    fake_api: StartAPI,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Issue 11's reproduction: with the README's allow-list, a registered API that answered
    303 to http://127.0.0.1:<other port>/internal had that page stored as a document."""
    internal = fake_api(lambda _: (200, {"Content-Type": "text/plain"}, INTERNAL_PAGE))
    bouncer = fake_api(lambda _: (303, {"Location": origin(internal) + "/internal"}, b""))
    server = make_server(outbound_allow=origin(bouncer))  # http://127.0.0.1:<port>, one port
    caplog.set_level("WARNING")
    job, _ = run_ocr_project(server, bouncer.url)
    assert job["status"] == "FAILED" and job["resultId"] is None
    assert len(bouncer.received) == 1 and internal.received == []
    stack = job["errors"][0]["stack"]
    internal_port = origin(internal).rsplit(":", 1)[1]
    assert stack.startswith("cannot reach the custom extraction API at " + bouncer.url)
    assert internal_port not in stack and "loopback" not in stack
    reference = job["errors"][0]["args"]["reference"]
    # The operator's log has what the user does not: where the redirect went and why not.
    logged = [r.getMessage() for r in caplog.records if reference in r.getMessage()]
    assert logged and f"port {internal_port}" in logged[0] and "loopback" in logged[0]


def test_an_entry_for_one_origin_opens_nothing_else(
    make_server: Callable[..., LabelingServer], fake_api: StartAPI
) -> None:
    allowed = fake_api(lambda _: (200, {"Content-Type": "text/plain"}, b"hello"))
    other = fake_api(lambda _: (200, {"Content-Type": "text/plain"}, INTERNAL_PAGE))
    server = make_server(outbound_allow=origin(allowed))
    assert run_ocr_project(server, allowed.url)[0]["status"] == "DELIVERED"
    refused, _ = run_ocr_project(server, other.url)
    https, _ = run_ocr_project(server, allowed.url.replace("http://", "https://"))
    assert refused["status"] == https["status"] == "FAILED"
    # One sentence for "not allowed here", whatever the port or scheme (no port-scan oracle).
    generic = [
        job["errors"][0]["stack"]
        .split(": ", 1)[1]
        .replace(job["errors"][0]["args"]["reference"], "")
        for job in (refused, https)
    ]
    assert generic[0] == generic[1]
    assert other.received == [] and len(allowed.received) == 1


def test_a_bare_allow_entry_stops_the_start_with_the_syntax(tmp_path: Path) -> None:
    env = cli_env(f"sqlite:///{tmp_path / 'l.db'}", tmp_path, outbound_allow="127.0.0.1/32")
    done = run_cli(env, "worker")
    assert done.returncode == 1
    assert "EXTRACTOR_LABELING_OUTBOUND_ALLOW" in done.stderr and "names no port" in done.stderr
    assert "127.0.0.1/32:*" in done.stderr or "http://127.0.0.1:8000" in done.stderr

"""Issue 11: the real server (``extractor labeling serve`` under gunicorn) stays small while it
refuses the attacks of points 1, 2 and 8, its memory read from /proc."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
from labeling_support import (
    CREATE_PROJECT,
    ServiceProcess,
    cli_env,
    free_port,
    group_rss,
    run_cli,
)

MB = 1024 * 1024


class Client:
    """GraphQL over HTTP with one user's token."""

    def __init__(self, url: str, token: str) -> None:
        self.http = httpx.Client(
            base_url=url, timeout=60, headers={"Authorization": f"Bearer {token}"}
        )

    def gql(self, query: str, variables: dict[str, Any] | None = None) -> dict[str, Any]:
        response = self.http.post("/graphql", json={"query": query, "variables": variables})
        assert response.status_code == 200, response.text
        return dict(response.json())

    def upload(self, name: str, content: bytes, **fields: Any) -> dict[str, Any]:
        variables = {"input": {"name": "P", "kind": "TOKEN_BASED", "documents": [None], **fields}}
        response = self.http.post(
            "/graphql",
            data={
                "operations": json.dumps({"query": CREATE_PROJECT, "variables": variables}),
                "map": json.dumps({"0": ["variables.input.documents.0"]}),
            },
            files={"0": (name, content, "text/plain")},
        )
        assert response.status_code == 200, response.text
        return dict(response.json())


def refused(result: dict[str, Any]) -> str:
    """The code of a refusal, checked to be a limit and to have done nothing."""
    assert result["data"] is None or all(v is None for v in result["data"].values()), result
    codes = {error["extensions"]["code"] for error in result["errors"]}
    assert codes == {"LIMIT_EXCEEDED"}, result
    return "LIMIT_EXCEEDED"


def status_of(response: httpx.Response, status: int) -> None:
    assert response.status_code == status, response.text[:300]
    assert response.json()["errors"][0]["extensions"]["code"] in (
        "BAD_REQUEST",
        "PAYLOAD_TOO_LARGE",
    )


@pytest.mark.slow
@pytest.mark.serial  # the server's RSS, measured alone (make test's second pass)
def test_refusing_the_attacks_keeps_the_server_under_100_mb_more(
    tmp_path: Path, processes: list[ServiceProcess]
) -> None:
    if not Path("/proc/self/status").exists():
        pytest.skip("needs /proc to read the server's memory")
    env = cli_env(f"sqlite:///{tmp_path / 'rss.db'}", tmp_path)
    made = json.loads(run_cli(env, "add-user", "tenant@example.com", "--team", "Acme").stdout)
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    server = ServiceProcess(env, "serve", "--bind", f"127.0.0.1:{port}", log=tmp_path / "s.log")
    processes.append(server)
    server.wait_healthy(url)
    client = Client(url, made["token"])

    # Warm up every path the attacks take, with requests that succeed.
    started = client.upload("notes.txt", b"Alice met Bob\nin Paris", teamId=made["teamId"])
    job_id = started["data"]["createProject"]["id"]
    deadline = time.monotonic() + 30
    while True:
        job = client.gql(
            "query($id: String!) { getJob(jobId: $id) { status resultId } }", {"id": job_id}
        )
        if job["data"]["getJob"]["status"] == "DELIVERED":
            project_id = job["data"]["getJob"]["resultId"]
            break
        assert time.monotonic() < deadline, job
        time.sleep(0.1)
    project_query = 'getProject(projectId: "%s") { id name documents { id name importable } }'
    assert "errors" not in client.gql("{ " + project_query % project_id + " }")
    baseline = group_rss(server.process.pid)

    auto_label = {
        "labelerEmail": "tenant@example.com",
        "projectId": project_id,
        "options": {"numberOfFilesPerRequest": 0},
        "targetAPI": {"endpoint": "http://127.0.0.1:9/predict", "secretKey": "k"},
    }
    mutations = " ".join(
        f"m{i}: autoLabelTokenBasedProject(input: $in) {{ id }}" for i in range(300)
    )
    attacks = [
        # Point 1: lines, then tokens on one 10 MB line, then bytes.
        lambda: refused(client.upload("lines.txt", b"a\n" * 10**6, teamId=made["teamId"])),
        lambda: refused(client.upload("words.txt", b"a " * 5_000_000, teamId=made["teamId"])),
        lambda: refused(client.upload("big.txt", b"a" * 20 * MB, teamId=made["teamId"])),
        # Point 2: a hundred aliased projects, three hundred job mutations, a huge query.
        lambda: refused(
            client.gql(
                "{ " + " ".join(f"p{i}: " + project_query % project_id for i in range(100)) + " }"
            )
        ),
        lambda: refused(
            client.gql(
                f"mutation($in: AutoLabelTokenBasedProjectInput!) {{ {mutations} }}",
                {"in": auto_label},
            )
        ),
        lambda: refused(client.gql("{ " + "getPersonalTags { id } " * 40_000 + "}")),
        # Point 8 and friends: deep JSON (400), a JSON body past its limit (413).
        lambda: status_of(
            client.http.post(
                "/graphql",
                content=b'{"query": "{ getPersonalTags { id } }", "variables": '
                + b"[" * 500_000
                + b"]" * 500_000
                + b"}",
                headers={"Content-Type": "application/json"},
            ),
            400,
        ),
        lambda: status_of(
            client.http.post(
                "/graphql",
                json={"query": "{ getPersonalTags { id } }", "variables": {"x": ["y"] * 3_000_000}},
            ),
            413,
        ),
    ]
    peak = baseline
    for _ in range(3):
        for attack in attacks:
            attack()
            peak = max(peak, group_rss(server.process.pid))

    grown = peak - baseline
    # Nothing was queued, and the server still answers.
    assert client.gql("{ getPersonalTags { id } }") == {
        "data": {"getPersonalTags": []},
        "extensions": {},
    }
    print(f"server RSS: {baseline / MB:.0f} MB before, {peak / MB:.0f} MB peak after the attacks")
    assert grown < 100 * MB, f"grew by {grown / MB:.0f} MB"
    assert server.terminate() == 0

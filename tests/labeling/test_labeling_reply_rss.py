"""Issue 18, points 1 and 2, against the real server (``extractor labeling serve`` under
gunicorn, memory read from /proc): four attackers sending the issue's introspection and
document queries, and the same shapes scaled 2x, while another tenant times a small query."""

from __future__ import annotations

import json
import multiprocessing
import statistics
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
from labeling_support import CREATE_PROJECT, ServiceProcess, cli_env, free_port, group_rss, run_cli
from test_labeling_introspection_limits import FULL_TYPE, ISSUE_QUERY

MB = 1024 * 1024
# The issue's project: five documents of 10 MiB of text each (the project's byte limit), in
# lines of 10 tokens of 55 characters: 190,650 tokens and 19,065 lines each, within the
# project's 1,000,000 tokens and 100,000 lines. Each is 21 MB of JSON once built.
WORD = b"w" * 54
DOCUMENT = (b" ".join([WORD] * 10) + b"\n") * 19_065
DOCUMENTS = 5


def post(http: httpx.Client, query: str, variables: dict[str, Any] | None = None) -> Any:
    """One GraphQL request; the parsed body (the whole reply read, as a client would).

    A reply of megabytes is checked by its start and length instead: parsing it would hold
    this process's GIL for a second, and delay the other tenant's timing thread here, not the
    server.
    """
    response = http.post("/graphql", json={"query": query, "variables": variables})
    assert response.status_code == 200, response.text[:300]
    if len(response.content) > MB:
        return response.content
    return response.json()


def create_project(http: httpx.Client, team_id: str) -> str:
    """The issue's five 10 MiB documents as one TOKEN_BASED project; its id once delivered."""
    variables = {
        "input": {
            "name": "Big",
            "kind": "TOKEN_BASED",
            "teamId": team_id,
            "documents": [None] * DOCUMENTS,
        }
    }
    response = http.post(
        "/graphql",
        data={
            "operations": json.dumps({"query": CREATE_PROJECT, "variables": variables}),
            "map": json.dumps({str(i): [f"variables.input.documents.{i}"] for i in range(5)}),
        },
        files={str(i): (f"d{i}.txt", DOCUMENT, "text/plain") for i in range(DOCUMENTS)},
    )
    job_id = response.json()["data"]["createProject"]["id"]
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        job = post(http, "query($id: String!) { getJob(jobId: $id) { status resultId errors "
                   "{ args } } }", {"id": job_id})["data"]["getJob"]  # fmt: skip
        if job["status"] in ("DELIVERED", "FAILED"):
            assert job["status"] == "DELIVERED", job
            return str(job["resultId"])
        time.sleep(0.2)
    raise AssertionError("the project was not built in 300 s")


def documents_query(project_id: str, aliases: int, page: str = "") -> str:
    """The issue's 190-byte shape: ``aliases`` aliases of every document's importable."""
    fields = " ".join(
        f'p{i}: getProject(projectId: "{project_id}") {{ documents{page} {{ importable }} }}'
        for i in range(aliases)
    )
    return f"{{ {fields} }}"


def refused(limit: str) -> Callable[[Any], None]:
    def check(result: Any) -> None:
        assert result["data"] is None, str(result)[:300]
        assert limit in {e["extensions"].get("limit") for e in result["errors"]}, result

    return check


def answered(result: Any) -> None:
    if isinstance(result, bytes):  # one whole 21 MB document
        assert result.startswith(b'{"data":{"p0":{"documents":[{"importable":{"')
        assert result.endswith(b'}]}},"extensions":{}}') and len(result) > 20 * MB
        return
    assert "errors" not in result, str(result)[:300]


@pytest.mark.slow
@pytest.mark.serial  # the server's RSS, measured alone (make test's second pass)
def test_introspection_and_document_attacks_keep_the_server_small_and_others_served(
    tmp_path: Path, processes: list[ServiceProcess], database_url: str, backend: str
) -> None:
    if not Path("/proc/self/status").exists():
        pytest.skip("needs /proc to read the server's memory")
    env = cli_env(database_url, tmp_path)
    attacker = json.loads(run_cli(env, "add-user", "mallory@example.com", "--team", "M").stdout)
    other = json.loads(run_cli(env, "add-user", "olivia@example.com", "--team", "O").stdout)
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    server = ServiceProcess(env, "serve", "--bind", f"127.0.0.1:{port}", log=tmp_path / "s.log")
    processes.append(server)
    server.wait_healthy(url)

    def client(token: str) -> httpx.Client:
        return httpx.Client(base_url=url, timeout=120, headers={"Authorization": f"Bearer {token}"})

    setup = client(attacker["token"])
    project_id = create_project(setup, attacker["teamId"])
    cost = "EXTRACTOR_LABELING_MAX_QUERY_COST"
    aliases = "EXTRACTOR_LABELING_MAX_QUERY_ALIASES"
    reply = "EXTRACTOR_LABELING_MAX_REPLY_BYTES"
    attacks: list[tuple[str, dict[str, Any] | None, Callable[[Any], None]]] = [
        # Point 1, and twice its size; a shape not in the issue (three full descriptions).
        (ISSUE_QUERY, None, refused(aliases)),
        (ISSUE_QUERY.replace("{ s0:", "{ x0: __schema { ...T } s0:"), None, refused(aliases)),
        ("{ __schema { " + " ".join(f"t{i}: types {{ name }}" for i in range(50)) + " } }",
         None, refused(aliases)),
        ("{ __schema { " + " ".join(f"t{i}: types {{ name }}" for i in range(100)) + " } }",
         None, refused(aliases)),
        ("{ " + " ".join(f"s{i}: __schema {{ types {{ ...Full }} }}" for i in range(3)) + " } "
         + FULL_TYPE, None, refused(cost)),
        # Point 2 (409 MB, +1.3 GB before), and twice: refused before any document is read.
        (documents_query(project_id, 4), None, refused(reply)),
        (documents_query(project_id, 8, "(limit: 5)"), None, refused(reply)),
        # What may still be asked: the full standard introspection, and one 21 MB document.
        (__import__("graphql").get_introspection_query(), None, answered),
        (documents_query(project_id, 1, "(limit: 1)"), None, answered),
    ]  # fmt: skip
    # Warm every path once (caches, pools, the first reply of a document).
    warm = client(attacker["token"])
    for query, variables, check in attacks:
        check(post(warm, query, variables))
    time.sleep(1)
    before = group_rss(server.process.pid)

    peak = before
    stop = threading.Event()

    def sample() -> None:
        nonlocal peak
        while not stop.is_set():
            peak = max(peak, group_rss(server.process.pid))
            time.sleep(0.02)

    def attack() -> None:
        http = client(attacker["token"])
        for _ in range(3):
            for query, variables, check in attacks:
                check(post(http, query, variables))

    latencies: list[float] = []

    def other_tenant() -> None:
        http = client(other["token"])
        query = "query($t: ID!) { getTags(input: {teamId: $t}) { id } }"
        while not stop.is_set():
            started = time.monotonic()
            assert post(http, query, {"t": other["teamId"]}) == {
                "data": {"getTags": []},
                "extensions": {},
            }
            latencies.append(time.monotonic() - started)
            time.sleep(0.05)

    sampler = threading.Thread(target=sample)
    bystander = threading.Thread(target=other_tenant)
    # Attackers in processes of their own: reading 21 MB replies in threads of this process
    # would hold its GIL and delay the other tenant's timing here rather than on the server.
    forked = multiprocessing.get_context("fork")
    attackers = [forked.Process(target=attack) for _ in range(4)]
    started = time.monotonic()
    for process in attackers:
        process.start()
    sampler.start()
    bystander.start()
    for process in attackers:
        process.join(600)
    took = time.monotonic() - started
    assert [process.exitcode for process in attackers] == [0] * 4  # every check held
    stop.set()
    sampler.join()
    bystander.join()
    time.sleep(2)
    after = group_rss(server.process.pid)
    print(
        f"{backend}: RSS {before / MB:.0f} MB before, {peak / MB:.0f} MB peak during "
        f"(+{(peak - before) / MB:.0f}), {after / MB:.0f} MB after (+{(after - before) / MB:.0f});"
        f" 4 attackers x {3 * len(attacks)} requests in {took:.1f} s; the other tenant's getTags:"
        f" {len(latencies)} answers, median {statistics.median(latencies) * 1000:.0f} ms, "
        f"max {max(latencies) * 1000:.0f} ms"
    )
    assert peak - before < 150 * MB
    assert after - before < 50 * MB  # the memory comes back
    # 44.9 s before, with point 1 alone. Measured 0.4-1.3 s (SQLite) and 0.8-3.6 s (PostgreSQL,
    # which reads each 21 MB document in three slices) at a load average of 14 on 2 cores.
    assert max(latencies) < 5.0
    assert server.terminate() == 0

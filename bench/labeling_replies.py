"""Issue 18's introspection and document queries against the real labeling server:
``python -m bench.labeling_replies [--database-url URL] [--out bench/labeling_replies.md]``.

Starts ``extractor labeling serve`` (gunicorn, one process of 4 threads, the defaults) on a
loopback port and a fresh database (SQLite in a temporary folder unless ``--database-url``),
builds the issue's project (five TOKEN_BASED documents of 10 MiB of text, 21 MB of JSON each),
then sends each query shape ``--runs`` times, one at a time, and reports what the server
answered, the reply's bytes, the median wall time, and the server's RSS (its process group)
before and at most while the shape ran, sampled every 20 ms.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx
from graphql import get_introspection_query

from bench.server import group_status_sums

MB = 1024 * 1024
REPO = Path(__file__).resolve().parents[1]
WORD = b"w" * 54
DOCUMENT = (b" ".join([WORD] * 10) + b"\n") * 19_065  # 10 MiB, 190,650 tokens, 19,065 lines
CREATE = "mutation($input: CreateProjectInput!) { createProject(input: $input) { id } }"
FULL = (
    "fragment Full on __Type { name kind fields { name args { name type { name } } "
    "type { name kind ofType { name kind ofType { name } } } } inputFields { name } "
    "enumValues { name } interfaces { name } possibleTypes { name } }"
)


def issue_introspection(aliases: int) -> str:
    """The issue's 823-character query: ``aliases`` aliases of ``__schema``, each spreading 7
    aliases of types -> fields -> type -> name."""
    return (
        "{ "
        + " ".join(f"s{i}: __schema {{ ...T }}" for i in range(aliases))
        + " } fragment T on __Schema { "
        + " ".join(f"t{i}: types {{ ...F }}" for i in range(7))
        + " } fragment F on __Type { fields { type { name } } }"
    )


def documents(project_id: str, aliases: int, page: str = "") -> str:
    """``aliases`` aliases of ``getProject { documents { importable } }`` (190 bytes for 4)."""
    return "{ " + " ".join(
        f'p{i}: getProject(projectId: "{project_id}") {{ documents{page} {{ importable }} }}'
        for i in range(aliases)
    ) + " }"  # fmt: skip


def shapes(project_id: str) -> dict[str, str]:
    """Each shape the bench sends, by the name its row gets."""
    return {
        "issue 1: 10 aliases of __schema x 7 of types": issue_introspection(10),
        "issue 1 x2: 20 aliases of __schema": issue_introspection(20),
        "issue 1: 50 aliases of types": "{ __schema { "
        + " ".join(f"t{i}: types {{ name }}" for i in range(50))
        + " } }",
        "3 full schema descriptions, no alias past 3": "{ "
        + " ".join(f"s{i}: __schema {{ types {{ ...Full }} }}" for i in range(3))
        + " } "
        + FULL,
        "standard introspection query": get_introspection_query(),
        "issue 2: 4 aliases of every document (409 MB)": documents(project_id, 4),
        "issue 2 x2: 8 aliases of 5 documents": documents(project_id, 8, "(limit: 5)"),
        "one whole document (21 MB)": documents(project_id, 1, "(limit: 1)"),
        "other tenant's getPersonalTags": "{ getPersonalTags { id } }",
    }


def group_rss(group: int) -> int:
    """Resident bytes of every process in the process group (gunicorn's master and workers)."""
    return group_status_sums(group, "VmRSS")["VmRSS"] * 1024


def cli(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "extractor.cli", "labeling", *args],
        env=env, cwd=REPO, capture_output=True, text=True, check=True, timeout=300,
    )  # fmt: skip


def build_project(http: httpx.Client, team_id: str) -> str:
    """The issue's five 10 MiB documents as one project; its id once delivered."""
    variables = {"input": {"name": "Big", "kind": "TOKEN_BASED", "teamId": team_id,
                           "documents": [None] * 5}}  # fmt: skip
    response = http.post(
        "/graphql",
        data={
            "operations": json.dumps({"query": CREATE, "variables": variables}),
            "map": json.dumps({str(i): [f"variables.input.documents.{i}"] for i in range(5)}),
        },
        files={str(i): (f"d{i}.txt", DOCUMENT, "text/plain") for i in range(5)},
    )
    job_id = response.json()["data"]["createProject"]["id"]
    while True:
        job = http.post(
            "/graphql",
            json={"query": "query($id: String!) { getJob(jobId: $id) { status resultId } }",
                  "variables": {"id": job_id}},
        ).json()["data"]["getJob"]  # fmt: skip
        if job["status"] == "DELIVERED":
            return str(job["resultId"])
        if job["status"] == "FAILED":
            raise SystemExit(f"the project failed: {job}")
        time.sleep(0.5)


def outcome(body: bytes) -> str:
    """``answered`` or the limit a refusal names."""
    if len(body) > MB:
        return "answered"
    reply = json.loads(body)
    if "errors" not in reply:
        return "answered"
    limits = sorted({str(e["extensions"].get("limit", e["extensions"]["code"]))
                     for e in reply["errors"]})  # fmt: skip
    return "refused: " + ", ".join(name.removeprefix("EXTRACTOR_LABELING_") for name in limits)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--database-url", default="")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    folder = Path(tempfile.mkdtemp(prefix="bench-replies-"))
    env = {k: v for k, v in os.environ.items() if not k.startswith("EXTRACTOR_LABELING_")}
    env.update({"EXTRACTOR_LABELING_DATA_DIR": str(folder), "PYTHONPATH": str(REPO)})
    if args.database_url:
        env["EXTRACTOR_LABELING_DATABASE_URL"] = args.database_url
    user = json.loads(cli(env, "add-user", "bench@example.com", "--team", "Bench").stdout)
    port = 18100 + os.getpid() % 1000
    server = subprocess.Popen(
        [sys.executable, "-m", "extractor.cli", "labeling", "serve", "--bind",
         f"127.0.0.1:{port}"],
        env=env, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        start_new_session=True,
    )  # fmt: skip
    rows: list[str] = []
    try:
        http = httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=300,
                            headers={"Authorization": f"Bearer {user['token']}"})  # fmt: skip
        for _ in range(300):
            try:
                if http.get("/healthz").status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(0.2)
        project_id = build_project(http, user["teamId"])
        for name, query in shapes(project_id).items():
            http.post("/graphql", json={"query": query})  # warm: caches, first reads
            before = group_rss(server.pid)
            peak = [before]
            done = threading.Event()

            def sample(peak: list[int] = peak, done: threading.Event = done) -> None:
                while not done.is_set():
                    peak[0] = max(peak[0], group_rss(server.pid))
                    time.sleep(0.02)

            sampler = threading.Thread(target=sample)
            sampler.start()
            times, body = [], b""
            for _ in range(args.runs):
                started = time.monotonic()
                body = http.post("/graphql", json={"query": query}).content
                times.append(time.monotonic() - started)
            done.set()
            sampler.join()
            rows.append(
                f"| {name} | {len(query)} | {outcome(body)} | {len(body):,} | "
                f"{statistics.median(times) * 1000:.0f} | {before / MB:.0f} | "
                f"+{(peak[0] - before) / MB:.0f} |"
            )
            print(rows[-1], flush=True)
    finally:
        os.killpg(server.pid, 15)
        server.wait(30)
    backend = "PostgreSQL" if args.database_url.startswith("postgresql") else "SQLite"
    report = "\n".join(
        [
            "# Introspection and document replies (issue 18, points 1 and 2)",
            "",
            f"`python -m bench.labeling_replies{' --database-url ...' if args.database_url else ''}"
            f" --out bench/labeling_replies.md` ({backend}; {args.runs} runs of each shape, one at "
            "a time, after one warm-up; RSS: the server's process group, before and at most "
            "while the runs went, sampled every 20 ms).",
            "",
            "| Shape | Query bytes | Outcome | Reply bytes | Median ms | RSS MB | RSS growth MB |",
            "|---|---|---|---|---|---|---|",
            *rows,
            "",
        ]
    )
    if args.out:
        args.out.write_text(report)
    print(report)


if __name__ == "__main__":
    main()

"""Run compose.yaml with podman-compose and drive it as a user would.

    python image/compose_test.py [IMAGE]      # IMAGE: the extractor image, already built

Brings up the four services (extractor, labeling, worker, postgres) with Debian's
podman-compose under a throw-away project name, on free host ports, with a random database
password; then: one curl-like POST through the extractor's published port; a user added with
``extractor labeling add-user`` inside the labeling container; the extractor registered as the
team's OCR API by its service name (``http://extractor:8000/extract``, allowed through the SSRF
guard by the compose file); an OCR project created from a generated page. The project job is
done by the worker service (the server runs no embedded workers), which calls the extractor
across the compose network and writes to PostgreSQL, so DELIVERED proves the whole topology.
Everything, the named volume included, is removed afterwards.

The official ``postgres`` image cannot be pulled here (no Docker Hub), so
image/compose-test/compose.podman.yaml swaps in a stand-in built from Debian's PostgreSQL
(postgres.Containerfile, same environment interface) and sets ulimits within the hard limits.
"""

from __future__ import annotations

import json
import os
import secrets
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from smoke_test import container_limits

from extractor import samples

ROOT = Path(__file__).resolve().parent.parent
HERE = Path(__file__).resolve().parent / "compose-test"
STANDIN = "localhost/postgres-standin:latest"
PAGE = ["Invoice number 4417 for garden tools", "Delivered to Harbor Street warehouse"]
UP_SECONDS = 240  # four containers, model loading and migrations on two busy cores
JOB_SECONDS = 180
SERVICES = ("extractor", "labeling", "worker", "postgres")  # the default profile's


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def run(*command: str, env: dict[str, str] | None = None) -> str:
    result = subprocess.run(command, env=env, capture_output=True, text=True, timeout=600)
    if result.returncode != 0:
        raise SystemExit(
            f"{' '.join(command)} failed:\n{result.stdout[-2000:]}{result.stderr[-2000:]}"
        )
    return result.stdout


def build_standin() -> None:
    """Build (or, from cached layers, re-tag in seconds) the PostgreSQL stand-in."""
    nofile, _ = container_limits()
    run(
        "buildah", "bud", "--isolation", "chroot", "--network", "host", "--format", "docker", "--layers",
        "--ulimit", f"nofile={nofile}:{nofile}", "--file", str(HERE / "postgres.Containerfile"),
        "--tag", STANDIN, str(HERE),
    )  # fmt: skip


def wait_http(url: str, seconds: float) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(url, timeout=5) as reply:
                if reply.status == 200:
                    return
        except (urllib.error.URLError, OSError):
            pass
        time.sleep(2)
    raise SystemExit(f"{url} did not answer 200 in {seconds:.0f} s")


def multipart(fields: dict[str, str], files: dict[str, tuple[str, bytes]]) -> tuple[bytes, str]:
    boundary = uuid.uuid4().hex
    parts = [
        f'--{boundary}\r\nContent-Disposition: form-data; name="{name}"\r\n\r\n{value}\r\n'.encode()
        for name, value in fields.items()
    ]
    for name, (filename, data) in files.items():
        head = (
            f'--{boundary}\r\nContent-Disposition: form-data; name="{name}"; '
            f'filename="{filename}"\r\nContent-Type: application/octet-stream\r\n\r\n'
        )
        parts.append(head.encode() + data + b"\r\n")
    return b"".join(
        parts
    ) + f"--{boundary}--\r\n".encode(), f"multipart/form-data; boundary={boundary}"


def post(url: str, body: bytes, content_type: str, headers: dict[str, str] | None = None) -> str:
    request = urllib.request.Request(
        url, data=body, method="POST", headers={"Content-Type": content_type, **(headers or {})}
    )
    with urllib.request.urlopen(request, timeout=120) as reply:
        return str(reply.read().decode())


class GraphQL:
    def __init__(self, url: str, token: str) -> None:
        self.url, self.headers = url, {"Authorization": f"Bearer {token}"}

    def __call__(self, query: str, **variables: Any) -> dict[str, Any]:
        body = json.dumps({"query": query, "variables": variables}).encode()
        reply = json.loads(post(self.url, body, "application/json", self.headers))
        if reply.get("errors"):
            raise SystemExit(f"GraphQL errors: {reply['errors']}")
        return dict(reply["data"])

    def upload(
        self, query: str, variables: dict[str, Any], path: str, file: tuple[str, bytes]
    ) -> dict[str, Any]:
        operations = json.dumps({"query": query, "variables": variables})
        body, content_type = multipart(
            {"operations": operations, "map": json.dumps({"0": [path]})}, {"0": file}
        )
        reply = json.loads(post(self.url, body, content_type, self.headers))
        if reply.get("errors"):
            raise SystemExit(f"GraphQL errors: {reply['errors']}")
        return dict(reply["data"])


@contextmanager
def compose_project(
    project: str, env: dict[str, str], dump: tuple[str, ...], tail: int
) -> Iterator[list[str]]:
    """podman-compose on compose.yaml (with the podman overrides) as ``project``: on a failure
    the last ``tail`` log lines of the ``dump`` services go to stderr; the stack, its volumes and
    its network are removed however it ends."""
    compose = [
        "podman-compose", "--project-name", project, "--file", str(ROOT / "compose.yaml"),
        "--file", str(HERE / "compose.podman.yaml"),
    ]  # fmt: skip
    try:
        yield compose
    except BaseException:
        for service in dump:
            logs = subprocess.run(
                ["podman", "logs", "--tail", str(tail), f"{project}_{service}_1"],
                capture_output=True, text=True,
            )  # fmt: skip
            print(f"--- {service}\n{logs.stdout}{logs.stderr}", file=sys.stderr)
        raise
    finally:
        subprocess.run([*compose, "down", "--volumes"], env=env, capture_output=True, timeout=300)
        # podman-compose 1.0.3's down leaves the project's network behind.
        subprocess.run(["podman", "network", "rm", f"{project}_default"], capture_output=True)


def main(image: str) -> None:
    build_standin()
    project = f"extractor-ci-{uuid.uuid4().hex[:6]}"
    extractor_port, labeling_port = free_port(), free_port()
    nofile, nproc = container_limits()
    env = {
        **os.environ,
        "EXTRACTOR_IMAGE": image,
        "EXTRACTOR_PORT": str(extractor_port),
        "LABELING_PORT": str(labeling_port),
        "POSTGRES_PASSWORD": secrets.token_urlsafe(16),
        "NOFILE": str(nofile),
        "NPROC": str(nproc),
    }
    started = time.monotonic()
    with compose_project(project, env, ("labeling", "worker", "postgres"), 15) as compose:
        # Named: podman-compose 1.0.3 knows no profiles and would start the replicas too.
        run(*compose, "up", "--detach", "--no-build", *SERVICES, env=env)
        extractor = f"http://127.0.0.1:{extractor_port}"
        labeling = f"http://127.0.0.1:{labeling_port}"
        wait_http(extractor + "/readyz", UP_SECONDS)
        wait_http(labeling + "/healthz", UP_SECONDS)
        up_after = time.monotonic() - started

        # One request through the extractor's published port, as the docs' curl does.
        page = samples.encode_image(samples.text_page(PAGE).image, "PNG")
        body, content_type = multipart({}, {"upload": ("page.png", page)})
        text = post(extractor + "/extract", body, content_type, {"Accept": "text/plain"})
        assert "Harbor Street" in text, text

        added = run(
            "podman", "exec", f"{project}_labeling_1", "extractor", "labeling", "add-user",
            "ann@example.com", "--team", "Acme",
        )  # fmt: skip
        user = json.loads(added)
        gql = GraphQL(labeling + "/graphql", user["token"])
        api = gql(
            "mutation($teamId: ID!, $input: CreateCustomAPIInput!) "
            "{ createCustomAPI(teamId: $teamId, input: $input) { id } }",
            teamId=user["teamId"],
            input={"name": "Compose OCR", "endpointURL": "http://extractor:8000/extract",
                   "purpose": "OCR_API"},
        )["createCustomAPI"]["id"]  # fmt: skip
        job = gql.upload(
            "mutation($input: CreateProjectInput!) { createProject(input: $input) { id status } }",
            {"input": {"name": "Scans", "kind": "OCR", "teamId": user["teamId"],
                       "customAPIId": api, "documents": [None]}},
            "variables.input.documents.0", ("page.png", page),
        )["createProject"]["id"]  # fmt: skip
        deadline = time.monotonic() + JOB_SECONDS
        while True:
            state = gql(
                "query($id: String!) { getJob(jobId: $id) { status resultId errors { stack } } }",
                id=job,
            )["getJob"]
            if state["status"] in ("DELIVERED", "FAILED") or time.monotonic() > deadline:
                break
            time.sleep(1)
        assert state["status"] == "DELIVERED", state
        documents = gql(
            "query($id: ID!) { getProject(projectId: $id) { documents { importable } } }",
            id=state["resultId"],
        )["getProject"]["documents"]
        cells = [cell["content"] for cell in documents[0]["importable"]["cells"]]
        assert any("Harbor Street" in cell for cell in cells), cells

        # Health checks are not scheduled here (podman does that with systemd timers, and
        # there is no systemd): run each service's once, as its timer would.
        for service in ("extractor", "labeling", "worker", "postgres"):
            health = subprocess.run(
                ["podman", "healthcheck", "run", f"{project}_{service}_1"],
                capture_output=True, text=True,
            )  # fmt: skip
            assert health.returncode == 0, f"{service} unhealthy: {health.stdout}{health.stderr}"

        users = {
            service: run("podman", "exec", f"{project}_{service}_1", "id", "-u").strip()
            for service in ("extractor", "labeling", "worker")
        }
        assert all(uid == "10001" for uid in users.values()), users
        print(
            f"compose: 4 services up in {up_after:.0f} s; /extract answered; an OCR project job "
            f"ran on the worker through http://extractor:8000 into PostgreSQL; all 4 health "
            f"checks pass; uids {users}"
        )


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "localhost/extractor:latest")

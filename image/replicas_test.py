"""Run compose.yaml's ``replicas`` profile and kill a replica in the middle of a job.

    python image/replicas_test.py [IMAGE]      # IMAGE: the extractor image, already built

Two extractor replicas share one job queue in PostgreSQL (the stack's ``postgres`` service,
database ``extractor``, made by the one-shot ``jobs-database``). The order is fixed so the test
proves a hand-over every time rather than by luck: with only extractor-1 up, a two-minute
recording is submitted to it (POST /v1/jobs, 202); once the job runs and has progressed,
extractor-1 is killed with SIGKILL; extractor-2 then starts, takes the job over when its lease
lapses (EXTRACTOR_JOB_LEASE_SECONDS) and finishes it, and its result, read through extractor-2,
holds the words spoken. Everything, the volume included, is removed afterwards.

Debian's podman-compose 1.0.3 knows no profiles and ignores depends_on conditions, so services
are named on each ``up`` and the database is waited for here; ``docker compose --profile
replicas up`` needs neither. Same overrides as image/compose_test.py (compose.podman.yaml).
"""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import sys
import time
import urllib.request
from typing import Any

from compose_test import build_standin, compose_project, free_port, multipart, run, wait_http
from smoke_test import container_limits

from extractor import samples

SPOKEN = "The weather is sunny today and we will walk to the park"
RECORDING_SECONDS = 120  # killed at a third done (progress 0.34); five minutes took 3 min longer
UP_SECONDS = 240
JOB_SECONDS = 600  # the lease (30 s), a cold replica and two minutes of speech on busy cores


class Replica:
    """One replica's published port, called with the shared secret."""

    def __init__(self, port: int, secret: str) -> None:
        self.url = f"http://127.0.0.1:{port}"
        self.headers = {"Authorization": f"Bearer {secret}"}

    def call(self, method: str, path: str, body: bytes | None = None, **headers: str) -> Any:
        request = urllib.request.Request(
            self.url + path, data=body, method=method, headers={**self.headers, **headers}
        )
        with urllib.request.urlopen(request, timeout=60) as reply:
            data = reply.read()
            if reply.headers.get_content_type() == "application/json":
                return reply.status, json.loads(data)
            return reply.status, data.decode()


def wait_exited(container: str, seconds: float) -> None:
    """Wait for a one-shot container to end, and fail unless it ended well."""
    code = run("timeout", str(int(seconds)), "podman", "wait", container).strip()
    if code != "0":
        logs = subprocess.run(["podman", "logs", container], capture_output=True, text=True)
        raise SystemExit(f"{container} exited {code}: {logs.stdout}{logs.stderr}")


def main(image: str) -> None:
    build_standin()
    project = f"extractor-replicas-{secrets.token_hex(3)}"
    ports = free_port(), free_port()
    secret = secrets.token_urlsafe(24)
    nofile, nproc = container_limits()
    env = {
        **os.environ,
        "EXTRACTOR_IMAGE": image,
        "REPLICA_1_PORT": str(ports[0]),
        "REPLICA_2_PORT": str(ports[1]),
        "POSTGRES_PASSWORD": secrets.token_urlsafe(16),
        "EXTRACTOR_SECRET": secret,
        "NOFILE": str(nofile),
        "NPROC": str(nproc),
    }
    first, second = (Replica(port, secret) for port in ports)
    recording = samples.repeat_speech(SPOKEN, RECORDING_SECONDS, "flac")
    services = ("extractor-1", "extractor-2", "jobs-database", "postgres")
    with compose_project(project, env, services, 20) as compose:
        run(*compose, "up", "--detach", "--no-build", "postgres", "jobs-database", env=env)
        wait_exited(f"{project}_jobs-database_1", UP_SECONDS)
        run(*compose, "up", "--detach", "--no-build", "--no-deps", "extractor-1", env=env)
        wait_http(first.url + "/readyz", UP_SECONDS)

        body, content_type = multipart({}, {"upload": ("talk.flac", recording)})
        status, job = first.call("POST", "/v1/jobs", body, **{"Content-Type": content_type})
        assert status == 202, (status, job)
        deadline = time.monotonic() + JOB_SECONDS
        while job["status"] != "running" or job["progress"] <= 0:
            assert job["status"] in ("queued", "running"), job
            assert time.monotonic() < deadline, f"never ran: {job}"
            time.sleep(0.2)
            job = first.call("GET", f"/v1/jobs/{job['id']}")[1]
        killed_at = job["progress"]
        run("podman", "kill", "--signal", "KILL", f"{project}_extractor-1_1")

        run(*compose, "up", "--detach", "--no-build", "--no-deps", "extractor-2", env=env)
        wait_http(second.url + "/readyz", UP_SECONDS)
        seen = [job["status"]]
        while job["status"] in ("queued", "running"):
            assert time.monotonic() < deadline, f"not finished after the kill: {job}"
            time.sleep(1)
            job = second.call("GET", f"/v1/jobs/{job['id']}")[1]
            seen.append(job["status"])
        assert job["status"] == "succeeded", job
        status, text = second.call("GET", f"/v1/jobs/{job['id']}/result", Accept="text/plain")
        assert status == 200 and "sunny" in text.lower(), text[:300]
        print(
            f"replicas: a {RECORDING_SECONDS} s recording submitted to extractor-1, which was "
            f"killed (SIGKILL) at progress {killed_at:.2f}; extractor-2 finished it "
            f"({len(text.split())} words; statuses seen {sorted(set(seen))})"
        )


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "localhost/extractor:latest")

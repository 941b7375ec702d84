"""Named API keys over a real gunicorn server, on SQLite and PostgreSQL job stores: each key's
jobs are its own (another key's are a 404 everywhere, absent from its list), the shared secret
keeps working and sees its own, keys change with their file without a restart, the metrics
count by key name and never show a key, and the worker refuses a wrong key before the body."""

from __future__ import annotations

import os
import re
import socket
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from jobs_support import Server, fresh_database, serve, submit, wait_for
from support import PAGE_ONE

from extractor import samples

pytestmark = pytest.mark.slow  # real servers and engines: make test, not test-fast

SECRET = "shared-s3cret"
KEYS = {"alpha": "alpha-key-0123456789", "beta": "beta-key-0123456789ab"}
GAMMA = "gamma-key-0123456789"


def write_keys(path: Path, keys: dict[str, str]) -> None:
    """Replace the keys file as an operator should: a new file renamed over the old one."""
    fresh = path.with_suffix(".new")
    fresh.write_text("".join(f"{name}:{key}\n" for name, key in keys.items()))
    os.replace(fresh, path)


@pytest.fixture(scope="module", params=["sqlite", "postgresql"])
def server(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[Server, Path]]:
    tmp = tmp_path_factory.mktemp("job-keys")
    keys_path = tmp / "api-keys"
    write_keys(keys_path, KEYS)
    admin = request.getfixturevalue("postgres_admin_url") if request.param != "sqlite" else None
    with fresh_database(request.param, tmp, admin) as url:
        running = serve(tmp, url, job_workers=1, secret=SECRET, api_keys=keys_path)
        yield running, keys_path
        running.stop()


@pytest.fixture
def keys_path(server: tuple[Server, Path]) -> Iterator[Path]:
    path = server[1]
    yield path
    write_keys(path, KEYS)  # the next test starts from the module's keys


def as_(server: tuple[Server, Path], key: str) -> httpx.Client:
    return httpx.Client(
        base_url=server[0].url, timeout=120, headers={"Authorization": f"Bearer {key}"}
    )


@pytest.fixture(scope="module")
def png() -> bytes:
    return samples.encode_image(samples.text_page(PAGE_ONE).image, "PNG")


def test_a_key_s_jobs_are_invisible_to_another_key(server: tuple[Server, Path], png: bytes) -> None:
    with as_(server, KEYS["alpha"]) as alpha, as_(server, KEYS["beta"]) as beta:
        job = submit(alpha, png, "scan.png", params={"ocr_rotate": "off"}).json()
        done = wait_for(alpha, job["id"])
        assert done["status"] == "succeeded", done
        path = f"/v1/jobs/{job['id']}"
        for reply in (beta.get(path), beta.get(path + "/result"), beta.delete(path)):
            assert reply.status_code == 404, reply.text
            assert reply.json()["error"]["code"] == "job_not_found"
        assert job["id"] not in [j["id"] for j in beta.get("/v1/jobs").json()["data"]]
        assert job["id"] in [j["id"] for j in alpha.get("/v1/jobs").json()["data"]]
        assert alpha.get(path + "/result").status_code == 200  # B's delete changed nothing
        assert alpha.delete(path).json()["deleted"] is True


def test_the_shared_secret_still_works_and_sees_only_its_own_jobs(
    server: tuple[Server, Path], png: bytes
) -> None:
    with as_(server, SECRET) as shared, as_(server, KEYS["alpha"]) as alpha:
        own = submit(shared, png, "scan.png").json()
        keyed = submit(alpha, png, "scan.png").json()
        assert wait_for(shared, own["id"])["status"] == "succeeded"
        assert shared.get(f"/v1/jobs/{keyed['id']}").status_code == 404
        assert alpha.get(f"/v1/jobs/{own['id']}").status_code == 404
        listed = [j["id"] for j in shared.get("/v1/jobs").json()["data"]]
        assert own["id"] in listed and keyed["id"] not in listed
        assert shared.post("/extract", files={"upload": ("scan.png", png)}).status_code == 200


def test_keys_change_with_their_file_without_a_restart(
    server: tuple[Server, Path], keys_path: Path, png: bytes
) -> None:
    with as_(server, GAMMA) as gamma, as_(server, KEYS["beta"]) as beta:
        assert gamma.get("/v1/jobs").status_code == 401
        write_keys(keys_path, {"alpha": KEYS["alpha"], "gamma": GAMMA})  # beta removed
        assert gamma.get("/v1/jobs").status_code == 200
        assert submit(gamma, png, "scan.png").status_code == 202
        for reply in (beta.get("/v1/jobs"), submit(beta, png, "scan.png")):
            assert reply.status_code == 401, reply.text
            assert reply.json()["error"]["code"] == "unauthorized"


def test_the_metrics_count_by_key_name_and_never_show_a_key(
    server: tuple[Server, Path], png: bytes
) -> None:
    with as_(server, KEYS["beta"]) as beta, as_(server, SECRET) as shared:
        assert beta.post("/extract", files={"upload": ("scan.png", png)}).status_code == 200
        assert shared.get("/v1/jobs").status_code == 200
        text = beta.get("/metrics").text
    counted = [line for line in text.splitlines() if line.startswith("extractor_requests_total{")]
    assert any('key="beta"' in line and 'status="200"' in line for line in counted), counted
    assert any('key="shared"' in line for line in counted), counted
    assert {re.search(r'key="([^"]*)"', line)[1] for line in counted} <= {  # type: ignore[index]
        "alpha", "beta", "gamma", "shared", "none",
    }  # fmt: skip
    for key in (*KEYS.values(), GAMMA, SECRET):
        assert key not in text


def head_reply(url: str, key: str) -> bytes:
    """What the server answers to an upload's head alone (50 MB announced, none sent):
    b"" when it waits for the body, i.e. admitted it."""
    host, port = url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        sock.sendall(
            f"POST /extract HTTP/1.1\r\nHost: {host}\r\nAuthorization: Bearer {key}\r\n"
            "Content-Type: multipart/form-data; boundary=x\r\nContent-Length: 50000000\r\n\r\n"
            .encode()
        )  # fmt: skip
        sock.settimeout(2)
        try:
            return sock.recv(4096)
        except TimeoutError:
            return b""


def test_the_worker_refuses_a_wrong_key_before_the_body_and_admits_a_named_one(
    server: tuple[Server, Path],
) -> None:
    url = server[0].url
    refused = head_reply(url, "wrong-key-0123456789")
    assert refused.startswith(b"HTTP/1.1 401"), refused[:200]
    assert head_reply(url, KEYS["alpha"]) == b""
    assert head_reply(url, SECRET) == b""

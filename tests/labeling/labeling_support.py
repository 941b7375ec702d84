"""Helpers of the labeling tests: a real server over loopback HTTP, users, fake customer APIs,
throwaway PostgreSQL clusters and the CLI as subprocesses.

A module of its own, not conftest.py: the suite's root tests import from ``conftest``, and every
directory's conftest.py is imported under that one name.
"""

from __future__ import annotations

import functools
import io
import json
import os
import shutil
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
from postgres_support import ThrowawayCluster as ThrowawayCluster  # the fixtures' import
from postgres_support import free_port as free_port
from sqlalchemy import create_engine, make_url, text
from werkzeug.serving import BaseWSGIServer
from werkzeug.serving import make_server as make_wsgi_server

from bench.server import group_status_sums
from extractor.config import LabelingSettings
from extractor.jobs import JobsBase
from extractor.labeling.app import create_labeling_app
from extractor.labeling.auth import add_user
from extractor.labeling.credentials import new_key
from extractor.labeling.db import Database, migrate
from extractor.labeling.models import Base
from extractor.labeling.state import LabelingState

REPO = Path(__file__).resolve().parents[2]


TERMINAL = ("DELIVERED", "FAILED")


JOB_FIELDS = "id status progress resultId createdAt updatedAt errors { id stack args }"


class DatabaseFactory:
    """Fresh, migrated databases cloned from a template migrated once per session."""

    def __init__(self, backend: str, tmp: Path, admin_url: str | None) -> None:
        self.backend = backend
        self.tmp = tmp
        self.admin_url = admin_url
        self.template = f"labeling_template_{uuid.uuid4().hex[:8]}"
        if backend == "sqlite":
            self.template_file = tmp / "template.db"
            migrate(f"sqlite:///{self.template_file}")
        else:
            assert admin_url is not None
            self._admin(f'CREATE DATABASE "{self.template}"')
            migrate(self._url_of(self.template))

    def _url_of(self, name: str) -> str:
        assert self.admin_url is not None
        return make_url(self.admin_url).set(database=name).render_as_string(hide_password=False)

    def _admin(self, statement: str) -> None:
        assert self.admin_url is not None
        engine = create_engine(self.admin_url, isolation_level="AUTOCOMMIT")
        try:
            with engine.connect() as connection:
                connection.execute(text(statement))
        finally:
            engine.dispose()

    def create(self) -> str:
        """The URL of a migrated database with no rows, for one test.

        SQLite: a copy of the template file. PostgreSQL: one shared database emptied by
        TRUNCATE, ten times faster than CREATE DATABASE ... TEMPLATE per test.
        """
        if self.backend == "sqlite":
            target = self.tmp / f"labeling_{uuid.uuid4().hex[:12]}.db"
            shutil.copyfile(self.template_file, target)
            return f"sqlite:///{target}"
        url = self._url_of(self.template)
        engine = create_engine(url)
        try:
            with engine.begin() as connection:
                every = [*Base.metadata.sorted_tables, *JobsBase.metadata.sorted_tables]
                tables = ", ".join(t.name for t in every)
                connection.execute(text(f"TRUNCATE {tables} CASCADE"))
        finally:
            engine.dispose()
        return url

    def drop(self, url: str) -> None:
        """Remove a database made by :meth:`create` (PostgreSQL's is emptied by the next test)."""
        if self.backend == "sqlite":
            for suffix in ("", "-wal", "-shm"):
                Path(str(make_url(url).database) + suffix).unlink(missing_ok=True)


# -- the labeling server ----------------------------------------------------------------------


# One key for the whole run: the servers and CLI processes of one test share a database.
TEST_SECRET_KEY = new_key()


def fast_settings(database_url: str, data_dir: Path, **overrides: Any) -> LabelingSettings:
    """Settings with short timeouts and polls, loopback allowed for the test's fake APIs."""
    values: dict[str, Any] = {
        "data_dir": data_dir,
        "database_url": database_url,
        "embedded_workers": 2,
        "job_poll_seconds": 0.05,
        "job_heartbeat_seconds": 0.3,
        "job_lease_seconds": 3.0,
        "outbound_allow": "127.0.0.1/32:*",
        "secret_keys": TEST_SECRET_KEY,
        "outbound_connect_timeout": 2.0,
        "outbound_read_timeout": 2.0,
        "outbound_total_timeout": 10.0,
        "prediction_connect_timeout": 2.0,
        "prediction_read_timeout": 2.0,
        "prediction_total_timeout": 10.0,
        "outbound_retries": 2,
        "outbound_backoff_seconds": 0.05,
    }
    values.update(overrides)
    return LabelingSettings(**values)


@dataclass
class User:
    """A user made through ``add_user``: ids and the bearer token."""

    email: str
    user_id: str
    token: str
    team_id: str | None


class LabelingServer:
    """The labeling app served over real loopback HTTP, with its embedded workers running."""

    def __init__(self, settings: LabelingSettings) -> None:
        self.settings = settings
        self.app = create_labeling_app(settings, start_workers=True)
        self.state: LabelingState = self.app.extensions["labeling"]
        self._server: BaseWSGIServer = make_wsgi_server("127.0.0.1", 0, self.app, threaded=True)
        self.url = f"http://127.0.0.1:{self._server.server_port}"
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True
        )
        self._thread.start()
        self.http = httpx.Client(base_url=self.url, timeout=30)

    @property
    def db(self) -> Database:
        return self.state.db

    def close(self) -> None:
        self.http.close()
        self._server.shutdown()
        self._thread.join(10)
        self.state.close()

    def user(self, team: str | None = None, email: str | None = None) -> User:
        """A new user (and token), member of ``team`` (created if new)."""
        email = email or f"user-{uuid.uuid4().hex[:10]}@example.com"
        made = add_user(self.db, email, team)
        return User(email, str(made["userId"]), str(made["token"]), made["teamId"])

    def post(self, body: Any, token: str | None, **kwargs: Any) -> httpx.Response:
        headers = {"Authorization": f"Bearer {token}"} if token is not None else {}
        return self.http.post("/graphql", json=body, headers=headers, **kwargs)

    def gql(
        self,
        query: str,
        variables: dict[str, Any] | None = None,
        *,
        token: str | None,
        operation_name: str | None = None,
    ) -> dict[str, Any]:
        """Run one operation; returns the whole JSON body (checked to have ``extensions: {}``)."""
        body: dict[str, Any] = {"query": query}
        if variables is not None:
            body["variables"] = variables
        if operation_name is not None:
            body["operationName"] = operation_name
        response = self.post(body, token)
        assert response.status_code == 200, response.text
        result = response.json()
        assert result["extensions"] == {}
        assert "data" in result
        return result

    def ok(self, query: str, variables: dict[str, Any] | None = None, *, token: str) -> Any:
        """Run one operation that must succeed; returns ``data``."""
        result = self.gql(query, variables, token=token)
        assert "errors" not in result, result["errors"]
        return result["data"]

    def upload(
        self,
        query: str,
        variables: dict[str, Any],
        files: dict[str, tuple[str, bytes]],
        *,
        token: str,
    ) -> dict[str, Any]:
        """A GraphQL multipart request: ``files`` maps a variable path to (file name, bytes)."""
        files_map = {str(i): [path] for i, path in enumerate(files)}
        form_files = {
            str(i): (name, io.BytesIO(content), "application/octet-stream")
            for i, (name, content) in enumerate(files.values())
        }
        response = self.http.post(
            "/graphql",
            data={
                "operations": json.dumps({"query": query, "variables": variables}),
                "map": json.dumps(files_map),
            },
            files=form_files,
            headers={"Authorization": f"Bearer {token}"},
        )
        assert response.status_code == 200, response.text
        result = response.json()
        assert result["extensions"] == {}
        return result

    def create_project(
        self,
        token: str,
        name: str,
        kind: str,
        documents: list[tuple[str, bytes]],
        **fields: Any,
    ) -> dict[str, Any]:
        """Start ``createProject``; returns the whole response body."""
        variables = {
            "input": {
                "name": name,
                "kind": kind,
                "documents": [None] * len(documents),
                **fields,
            }
        }
        files = {f"variables.input.documents.{i}": doc for i, doc in enumerate(documents)}
        return self.upload(CREATE_PROJECT, variables, files, token=token)

    def job(self, token: str, job_id: str) -> dict[str, Any] | None:
        return self.ok(
            f"query($id: String!) {{ getJob(jobId: $id) {{ {JOB_FIELDS} }} }}",
            {"id": job_id},
            token=token,
        )["getJob"]

    def wait_job(
        self, token: str, job_id: str, timeout: float = 30.0, until: tuple[str, ...] = TERMINAL
    ) -> dict[str, Any]:
        """Poll ``getJob`` until its status is one of ``until``; returns the last job seen."""
        deadline = time.monotonic() + timeout
        while True:
            job = self.job(token, job_id)
            assert job is not None
            if job["status"] in until:
                return job
            if time.monotonic() > deadline:
                raise AssertionError(f"job still {job} after {timeout} s")
            time.sleep(0.05)

    def project(self, token: str, project_id: str) -> dict[str, Any] | None:
        return self.ok(PROJECT_QUERY, {"id": project_id}, token=token)["getProject"]

    def token_project(self, user: User, lines: list[str], name: str = "notes.txt") -> str:
        """A delivered TOKEN_BASED project of the user's team with one document; its id."""
        started = self.create_project(
            user.token, "Notes", "TOKEN_BASED", [(name, "\n".join(lines).encode())],
            teamId=user.team_id,
        )  # fmt: skip
        job = self.wait_job(user.token, started["data"]["createProject"]["id"])
        assert job["status"] == "DELIVERED", job
        return str(job["resultId"])


CREATE_PROJECT = f"""
mutation($input: CreateProjectInput!) {{ createProject(input: $input) {{ {JOB_FIELDS} }} }}
"""


PROJECT_QUERY = """
query($id: ID!) {
  getProject(projectId: $id) {
    id name kind teamId tags { id name globalTag } documents { id name importable }
  }
}
"""


# -- fake customer APIs -----------------------------------------------------------------------


@dataclass
class Received:
    """One request a fake API got."""

    method: str
    path: str
    headers: dict[str, str]
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)


Reply = tuple[int, dict[str, str], bytes]


@dataclass
class FakeAPI:
    """A loopback HTTP server answering with ``respond(request)`` and recording every request."""

    respond: Callable[[Received], Reply]
    received: list[Received] = field(default_factory=list)
    release: threading.Event = field(default_factory=threading.Event)

    def start(self) -> FakeAPI:
        fake = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                request = Received(
                    "POST",
                    self.path,
                    {k.lower(): v for k, v in self.headers.items()},
                    self.rfile.read(length),
                )
                fake.received.append(request)
                status, headers, body = fake.respond(request)
                self.send_response(status)
                for name, value in headers.items():
                    self.send_header(name, value)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self._server.server_port}/predict"
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    def stop(self) -> None:
        self.release.set()
        self._server.shutdown()
        self._server.server_close()


def json_reply(payload: Any, status: int = 200) -> Reply:
    return status, {"Content-Type": "application/json"}, json.dumps(payload).encode()


# What the ``fake_api`` fixture is: start a FakeAPI that answers with the given function.
StartAPI = Callable[[Callable[[Received], Reply]], FakeAPI]


def hanging_api(start: StartAPI) -> FakeAPI:
    """A prediction API that holds every request until released (30 s at most), then answers
    with no documents."""
    started: list[FakeAPI] = []

    def hang(_: Received) -> Reply:
        started[0].release.wait(30)
        return json_reply({"documents": []})

    started.append(start(hang))
    return started[0]


def capitalized_words_model(request: Received) -> Reply:
    """A prediction API that labels every capitalized word ``PROPER`` (exclusive char ends)."""
    body = request.json()
    documents = []
    for document in body["documents"]:
        labels = []
        for sentence in document["sentences"]:
            entities = []
            position = 0
            for word in sentence["text"].split(" "):
                if word[:1].isupper():
                    entities.append(
                        {
                            "label": "PROPER",
                            "start_char": position,
                            "end_char": position + len(word),
                            "layer": 0,
                            "confidence_score": 0.9,
                        }
                    )
                position += len(word) + 1
            labels.append({"id": sentence["id"], "entities": entities})
        documents.append({"id": document["id"], "labels": labels})
    return json_reply({"id": body["id"], "documents": documents})


# -- the service as separate processes (CLI) --------------------------------------------------


def cli_env(database_url: str, data_dir: Path, **settings: Any) -> dict[str, str]:
    """The environment of a CLI subprocess: our test settings as EXTRACTOR_LABELING_* variables."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("EXTRACTOR_LABELING_")}
    values = {
        "DATABASE_URL": database_url,
        "DATA_DIR": str(data_dir),
        "JOB_POLL_SECONDS": "0.05",
        "JOB_HEARTBEAT_SECONDS": "0.3",
        "JOB_LEASE_SECONDS": "2",
        "OUTBOUND_ALLOW": "127.0.0.1/32:*",
        "SECRET_KEYS": TEST_SECRET_KEY,
        "OUTBOUND_READ_TIMEOUT": "5",
        "PREDICTION_READ_TIMEOUT": "5",
        "OUTBOUND_BACKOFF_SECONDS": "0.05",
    }
    values.update({key.upper(): str(value) for key, value in settings.items()})
    env.update({f"EXTRACTOR_LABELING_{key}": value for key, value in values.items()})
    env["PYTHONPATH"] = str(REPO)
    return env


def run_cli(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    """Run ``python -m extractor.cli labeling ARGS`` to the end."""
    return subprocess.run(
        [sys.executable, "-m", "extractor.cli", "labeling", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        cwd=REPO,
    )


class ServiceProcess:
    """``extractor labeling serve|worker`` in its own process group, killed at the end."""

    def __init__(self, env: dict[str, str], *args: str, log: Path) -> None:
        self.log = log
        self._log_file = log.open("ab")
        self.process = subprocess.Popen(
            [sys.executable, "-m", "extractor.cli", "labeling", *args],
            env=env,
            cwd=REPO,
            stdout=self._log_file,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )

    def wait_healthy(self, url: str, timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise AssertionError(f"server exited: {self.log.read_text()[-3000:]}")
            try:
                if httpx.get(f"{url}/healthz", timeout=1).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.1)
        raise AssertionError(f"server not healthy: {self.log.read_text()[-3000:]}")

    def kill(self) -> None:
        """SIGKILL the whole group (gunicorn master and workers): a crash, no clean-up."""
        if self.process.poll() is None:
            os.killpg(self.process.pid, 9)
        self.process.wait(30)
        self._log_file.close()

    def terminate(self, timeout: float = 30.0) -> int:
        """SIGTERM and wait: the graceful stop."""
        if self.process.poll() is None:
            os.killpg(self.process.pid, 15)
        code = self.process.wait(timeout)
        self._log_file.close()
        return code


AUTO_LABEL = (
    "mutation($input: AutoLabelTokenBasedProjectInput!) "
    "{ result: autoLabelTokenBasedProject(input: $input) { id status } }"
)


def auto_label_input(
    email: str, project_id: str, endpoint: str, *, secret: str = "model-key", per_request: int = 1
) -> dict[str, Any]:
    """The variables of an ``autoLabelTokenBasedProject`` mutation for a CUSTOM prediction API."""
    return {
        "input": {
            "labelerEmail": email,
            "projectId": project_id,
            "options": {"numberOfFilesPerRequest": per_request, "serviceProvider": "CUSTOM"},
            "targetAPI": {"endpoint": endpoint, "secretKey": secret},
        }
    }


def auto_label(server: LabelingServer, user: User, project_id: str, url: str) -> str:
    """Queue auto-labeling one line per request; the job id."""
    data = server.ok(AUTO_LABEL, auto_label_input(user.email, project_id, url), token=user.token)
    return str(data["result"]["id"])


def group_rss(group: int) -> int:
    """Resident bytes of every process in the process group (gunicorn's master and workers)."""
    return group_status_sums(group, "VmRSS")["VmRSS"] * 1024


# -- hostile prediction replies (issue 18) ----------------------------------------------------

# The one line of the project the hostile replies are sent for (their spans fit in it).
CELL_TEXT = "John met Mary in Paris"


@functools.cache
def hostile_prediction_replies(
    scale: int, document_id: str = "d1", sentence: int = 0
) -> dict[str, tuple[bytes, str]]:
    """Each attack shape on the prediction reply (issue 18's and others), ``scale`` times the
    issue's size: shape -> (reply body, what the job's reason must say)."""
    entity = b'{"label": "PER", "start_char": 0, "end_char": 4}'

    def reply(entities: bytes, document: bytes = b"") -> bytes:
        return (
            b'{"documents": [{"id": "' + document_id.encode() + b'", "labels": [{"id": '
            + str(sentence).encode() + b', "entities": [' + entities + b"]}]" + document + b"}]}"
        )  # fmt: skip

    deep = 100_000 * scale
    empty_entities = 300_000 * scale
    return {
        # Attack 3: nesting at the top level, inside `labels`, and of objects.
        "deep-arrays": (b"[" * deep + b"]" * deep, "nested too deeply"),
        "deep-in-labels": (
            b'{"documents": [{"id": "d", "labels": ' + b"[" * deep + b"]" * deep + b"}]}",
            "nested too deeply",
        ),
        "deep-objects": (b'{"a": ' * deep + b"1" + b"}" * deep, "nested too deeply"),
        # Attack 4: every entity empty (one schema error each); 2x is past the values limit.
        "empty-entities": (
            reply(b",".join([b"{}"] * empty_entities)),
            "malformed: at documents/0/labels/0/entities/0" if scale == 1 else "too many values",
        ),
        # Attack 5: 400,000 labels (16 MB), 10 million empty lists (30 MB).
        "many-labels": (reply(b",".join([entity] * 400_000 * scale)), "too many values"),
        "empty-lists": (
            b'{"documents": [], "x": [' + b",".join([b"[]"] * 10_000_000 * scale) + b"]}",
            "too many values",
        ),
        # Shapes not in the issue.
        "entities-past-limit": (
            reply(b",".join([entity] * (20_000 * scale + 1))),
            "more than 20000 entities",
        ),
        "many-keys": (
            b"{" + b",".join(b'"k%d": 0' % i for i in range(1_000_000 * scale)) + b"}",
            "too many values",
        ),
        "huge-string": (
            reply(
                b'{"label": "' + b"P" * (10 * 1024 * 1024 * scale) + b'", "start_char": 0, '
                b'"end_char": 4}'
            ),
            "string too long",
        ),
        "long-number": (
            reply(b'{"label": "P", "start_char": ' + b"9" * 10_000 * scale + b', "end_char": 4}'),
            "number too long",
        ),
        "duplicate-keys": (
            reply(entity, b', "labels": []'),
            "repeating a key",
        ),
        "lone-surrogate": (
            reply(b'{"label": "\\ud800", "start_char": 0, "end_char": 4}'),
            "unpaired UTF-16 surrogate",
        ),
    }

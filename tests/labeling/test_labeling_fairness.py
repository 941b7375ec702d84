"""Jobs shared fairly by tenants, bounded in time, stopped without loss, checkpointed in O(batch)
(issue 11, points 3, 4 and 6): real servers on loopback, real SQLite and PostgreSQL, fake
prediction APIs that are slow or hang on purpose (the faults under test).
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable
from typing import Any

import pytest
from labeling_support import (
    LabelingServer,
    Received,
    Reply,
    StartAPI,
    User,
    auto_label,
    capitalized_words_model,
    hanging_api,
)
from sqlalchemy import event, func, select, text

from extractor.jobs.tables import Job, JobResult
from extractor.labeling.db import Database


def text_of(request: Received) -> str:
    """The one sentence a one-line batch carries."""
    return str(request.json()["documents"][0]["sentences"][0]["text"])


def job_row(server: LabelingServer, job_id: str) -> Job:
    with server.db.session() as session:
        job = session.get(Job, job_id)
        assert job is not None
        session.expunge(job)
        return job


# -- fairness ---------------------------------------------------------------------------------


@pytest.mark.slow  # seconds of CPU each: make test runs it, make test-fast leaves it out
def test_one_teams_twenty_slow_jobs_delay_another_teams_job_by_one_batch_at_most(
    make_server: Callable[..., LabelingServer], fake_api: StartAPI
) -> None:
    server = make_server(embedded_workers=1)
    team_a = [server.user("Team A") for _ in range(4)]
    team_b = server.user("Team B")
    project_a = server.token_project(team_a[0], ["Alpha one", "Alpha two"])
    project_b = server.token_project(team_b, ["Beta"])

    def slow_model(request: Received) -> Reply:
        if text_of(request).startswith("Alpha"):
            time.sleep(0.15)  # a slow model: every batch of team A holds the only worker
        return capitalized_words_model(request)

    api = fake_api(slow_model)
    # Twenty jobs from four members of team A (per-user caps on queued jobs stay out of play).
    jobs_a = [auto_label(server, team_a[i % 4], project_a, api.url) for i in range(20)]
    deadline = time.monotonic() + 30
    while len(api.received) < 3:  # team A is well into its queue
        assert time.monotonic() < deadline, "team A's jobs never started"
        time.sleep(0.02)
    job_b = auto_label(server, team_b, project_b, api.url)
    seen_before_b = len(api.received)  # B's job is in the queue now
    assert server.wait_job(team_b.token, job_b)["status"] == "DELIVERED"
    # Fair claims count a job against its team (the labeling service's tenant).
    assert job_row(server, job_b).tenant == f"team:{team_b.team_id}"

    texts = [text_of(request) for request in api.received]
    first_b = texts.index("Beta")
    # The batch in flight when B's job was queued ends first; at most one more of team A's may
    # be sent if the worker had looked for waiting tenants just before B's job was committed.
    # Oldest-first claiming made B wait for all forty of A's batches.
    assert first_b - seen_before_b <= 1, texts[: first_b + 1]

    # Handing the worker over loses and repeats nothing: every batch of A's sent exactly once.
    for index, job_id in enumerate(jobs_a):
        owner = team_a[index % 4]  # a job is visible to the user who queued it
        assert server.wait_job(owner.token, job_id, timeout=60)["status"] == "DELIVERED"
    counts = Counter(text_of(request) for request in api.received)
    assert counts == {"Alpha one": 20, "Alpha two": 20, "Beta": 1}
    project = server.project(team_a[0].token, project_a)
    assert project is not None
    labels = project["documents"][0]["importable"]["labels"]
    assert Counter(label["startCellLine"] for label in labels) == {0: 20, 1: 20}
    with server.db.session() as session:
        assert session.scalar(select(func.count()).select_from(JobResult)) == 0
        assert set(session.scalars(select(Job.attempts).where(Job.kind == "AutoLabel"))) == {1}


# -- deadlines and timeouts -------------------------------------------------------------------


def test_a_job_past_its_deadline_ends_failed_saying_so(
    make_server: Callable[..., LabelingServer], fake_api: StartAPI
) -> None:
    server = make_server(job_deadline_seconds=1.0)
    user = server.user("Acme")
    project_id = server.token_project(user, [f"Line {i}" for i in range(10)])

    def slow_model(request: Received) -> Reply:
        time.sleep(0.3)
        return capitalized_words_model(request)

    api = fake_api(slow_model)
    done = server.wait_job(user.token, auto_label(server, user, project_id, api.url))
    assert done["status"] == "FAILED", done
    assert "deadline of 1 seconds" in done["errors"][0]["stack"]
    assert done["errors"][0]["args"] == {"deadlineSeconds": 1.0}
    assert len(api.received) < 10  # stopped at the first step past one second of work
    row = job_row(server, done["id"])
    assert row.run_seconds >= 1.0 and row.checkpoint is None
    with server.db.session() as session:
        assert session.scalar(select(func.count()).select_from(JobResult)) == 0


def test_the_prediction_api_has_timeouts_of_its_own(
    make_server: Callable[..., LabelingServer], fake_api: StartAPI
) -> None:
    # Extraction APIs may take minutes; a prediction API answering one batch may not.
    server = make_server(
        outbound_read_timeout=60.0,
        outbound_total_timeout=120.0,
        prediction_read_timeout=0.5,
        prediction_total_timeout=2.0,
    )
    user = server.user("Acme")
    project_id = server.token_project(user, ["John"])
    model = hanging_api(fake_api)
    started = time.monotonic()
    done = server.wait_job(user.token, auto_label(server, user, project_id, model.url))
    # Users see one generic refusal for refused and timed-out calls (no port scanning), so the
    # proof that the prediction timeouts applied is the time: the outbound ones allow 120 s.
    assert done["status"] == "FAILED" and "did not answer" in done["errors"][0]["stack"]
    assert time.monotonic() - started < 10


# -- a stopping worker ------------------------------------------------------------------------


def test_a_stopping_worker_keeps_the_reply_in_flight_and_hands_the_job_over(
    make_server: Callable[..., LabelingServer], fake_api: StartAPI
) -> None:
    # A long lease: the job can only move on quickly if the stopping worker releases it.
    first = make_server(embedded_workers=1, job_lease_seconds=120.0, prediction_read_timeout=10.0)
    user = first.user("Acme")
    project_id = first.token_project(user, ["Alpha", "Beta", "Gamma"])
    arrived = threading.Event()

    def model(request: Received) -> Reply:
        if text_of(request) == "Beta" and not arrived.is_set():
            arrived.set()
            time.sleep(2.5)  # in flight for longer than the grace period below
        return capitalized_words_model(request)

    api = fake_api(model)
    job_id = auto_label(first, user, project_id, api.url)
    assert arrived.wait(30)
    # What LabelingState.close does on a deploy, with a grace period shorter than the call.
    state = first.state
    started = time.monotonic()
    state.workers.stop(timeout=0.5)
    assert time.monotonic() - started >= 1.5  # it waited for the call instead of cutting it
    assert not [t for t in threading.enumerate() if t.name.startswith("labeling-worker")]
    state.client.close()  # only now, with no thread left to use it

    stopped = job_row(first, job_id)
    assert stopped.status == "IN_PROGRESS" and stopped.locked_by is None  # claimable at once
    assert stopped.attempts == 0 and stopped.progress == 66  # Beta's reply was kept
    assert not stopped.errors

    second = make_server(embedded_workers=1, job_lease_seconds=120.0)
    done = second.wait_job(user.token, job_id, timeout=20)
    assert done["status"] == "DELIVERED", done
    assert Counter(text_of(request) for request in api.received) == {
        "Alpha": 1,
        "Beta": 1,
        "Gamma": 1,
    }
    assert job_row(second, job_id).attempts == 1
    project = second.project(user.token, project_id)
    assert project is not None
    lines = [label["startCellLine"] for label in project["documents"][0]["importable"]["labels"]]
    assert sorted(lines) == [0, 1, 2]


def test_a_stopped_project_job_goes_on_with_the_next_upload(
    make_server: Callable[..., LabelingServer], fake_api: StartAPI
) -> None:
    first = make_server(embedded_workers=1, job_lease_seconds=120.0, outbound_read_timeout=10.0)
    user = first.user("Listeners")
    arrived = threading.Event()

    def transcribe(request: Received) -> Reply:
        name = next(
            n for n in ("a.wav", "b.wav", "c.wav") if f'filename="{n}"'.encode() in request.body
        )
        if name == "b.wav" and not arrived.is_set():
            arrived.set()
            time.sleep(2.0)  # in flight when the worker is told to stop
        return 200, {"Content-Type": "text/plain"}, f"words of {name}".encode()

    extractor = fake_api(transcribe)
    api_id = first.ok(
        "mutation($t: ID!, $i: CreateCustomAPIInput!) { createCustomAPI(teamId: $t, input: $i) { id } }",
        {
            "t": user.team_id,
            "i": {"name": "ASR", "endpointURL": extractor.url, "purpose": "ASR_API"},
        },
        token=user.token,
    )["createCustomAPI"]["id"]
    files = [(name, b"RIFF....") for name in ("a.wav", "b.wav", "c.wav")]
    started = first.create_project(
        user.token, "Talks", "AUDIO", files, teamId=user.team_id, customAPIId=api_id
    )
    job_id = started["data"]["createProject"]["id"]
    assert arrived.wait(30)
    first.state.workers.stop(timeout=0.5)
    stopped = job_row(first, job_id)
    assert (stopped.status, stopped.locked_by, stopped.checkpoint) == (
        "IN_PROGRESS",
        None,
        {"uploadsDone": 2},
    )

    second = make_server(embedded_workers=1, job_lease_seconds=120.0, outbound_read_timeout=10.0)
    done = second.wait_job(user.token, job_id, timeout=20)
    assert done["status"] == "DELIVERED", done
    assert len(extractor.received) == 3  # b.wav was not sent again, nor a.wav
    project = second.project(user.token, done["resultId"])
    assert project is not None
    assert [d["importable"]["cells"][0]["content"] for d in project["documents"]] == [
        "words of a.wav",
        "words of b.wav",
        "words of c.wav",
    ]


# -- checkpoints ------------------------------------------------------------------------------


def bytes_written_by_auto_label(
    server: LabelingServer, user: User, lines: int, url: str
) -> tuple[int, int]:
    """Bytes of INSERT/UPDATE parameters sent while one job labels ``lines`` lines one per
    request, and the most one statement carried."""
    project_id = server.token_project(user, [f"Word{i} Name{i} and more" for i in range(lines)])
    sizes: list[int] = []

    def count(_conn: Any, _cursor: Any, statement: str, parameters: Any, *_: Any) -> None:
        writes = statement.lstrip().upper().startswith(("INSERT", "UPDATE"))
        if writes and "access_tokens" not in statement:
            sizes.append(len(repr(parameters)))

    event.listen(server.db.engine, "before_cursor_execute", count)
    try:
        job_id = auto_label(server, user, project_id, url)
        assert server.wait_job(user.token, job_id, timeout=60)["status"] == "DELIVERED"
    finally:
        event.remove(server.db.engine, "before_cursor_execute", count)
    return sum(sizes), max(sizes)


@pytest.mark.slow  # seconds of CPU each: make test runs it, make test-fast leaves it out
def test_checkpoint_bytes_grow_linearly_with_lines(
    make_server: Callable[..., LabelingServer], fake_api: StartAPI
) -> None:
    server = make_server(embedded_workers=1)
    user = server.user("Acme")
    api = fake_api(capitalized_words_model)
    small_total, small_largest = bytes_written_by_auto_label(server, user, 30, api.url)
    large_total, large_largest = bytes_written_by_auto_label(server, user, 120, api.url)
    # Four times the lines: linear writes grow about 4x, rewriting every label so far 16x.
    assert large_total < 5 * small_total, (small_total, large_total)
    # The largest write is the delivery (the document with its labels), itself linear.
    assert large_largest < 5 * small_largest, (small_largest, large_largest)


def test_migration_0002_moves_old_checkpoints_into_step_rows(
    database_url: str, backend: str
) -> None:
    from alembic import command

    from extractor.labeling.db import alembic_config

    config = alembic_config(database_url)
    command.downgrade(config, "0001")
    db = Database(database_url)
    try:
        with db.engine.begin() as connection:
            connection.execute(
                text("INSERT INTO users (id, email, created_at) VALUES ('u1', 'a@b.c', :now)"),
                {"now": "2026-01-01 00:00:00"},
            )
            connection.execute(
                text("INSERT INTO teams (id, name, created_at) VALUES ('t1', 'T', :now)"),
                {"now": "2026-01-01 00:00:00"},
            )
            connection.execute(
                text(
                    "INSERT INTO projects (id, name, kind, team_id, owner_id, created_at) "
                    "VALUES ('p1', 'P', 'TOKEN_BASED', 't1', 'u1', :now)"
                ),
                {"now": "2026-01-01 00:00:00"},
            )
            connection.execute(
                text(
                    "INSERT INTO jobs (id, kind, owner_id, status, progress, errors, payload, "
                    "checkpoint, attempts, created_at, updated_at) VALUES "
                    "('j1', 'AutoLabel', 'u1', 'IN_PROGRESS', 50, '[]', :payload, :checkpoint, "
                    "1, :now, :now), "
                    "('j2', 'CreateProject', 'u1', 'DELIVERED', 100, '[]', '{}', NULL, 1, "
                    ":now, :now)"
                ),
                {
                    "payload": '{"projectId": "p1"}',
                    "checkpoint": '{"batchesDone": 2, "labels": [{"documentId": "d", "label": 1}]}',
                    "now": "2026-01-01 00:00:00",
                },
            )
    finally:
        db.dispose()
    command.upgrade(config, "head")
    db = Database(database_url)
    try:
        with db.session() as session:
            running = session.get(Job, "j1")
            finished = session.get(Job, "j2")
            assert running is not None and finished is not None
            assert running.checkpoint == {"batchesDone": 2}
            assert (running.tenant, finished.tenant) == ("team:t1", "user:u1")
            assert running.run_seconds == 0.0
            rows = session.execute(select(JobResult.job_id, JobResult.step, JobResult.data)).all()
            assert [tuple(row) for row in rows] == [("j1", 0, [{"documentId": "d", "label": 1}])]
    finally:
        db.dispose()

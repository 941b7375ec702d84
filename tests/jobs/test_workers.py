"""Workers on SQLite and PostgreSQL: handlers run to success or failure, a cancelled job stops,
and a worker process killed with SIGKILL loses nothing (another finishes the job, no finished
step runs twice)."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from step_worker import POLICY, StepsJob, marks_of

from extractor.jobs import JobQueue, JobRecord, JobStatus, WorkerPool
from extractor.jobs.db import Database

HERE = Path(__file__).resolve().parent


def wait_until(predicate: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, what
        time.sleep(0.05)


def job_of(queue: JobQueue, job_id: str) -> JobRecord:
    (job,) = queue.get("alice", [job_id])
    assert job is not None
    return job


def submit(queue: JobQueue, db: Database, marks: Path, **payload: Any) -> str:
    with db.session() as session:
        body = {"steps": 3, "seconds": 0.05, "marks": str(marks), **payload}
        return queue.enqueue(session, "Steps", "alice", body).id


@pytest.fixture
def pool(db: Database) -> Iterator[WorkerPool]:
    """One worker thread in this process, running ``Steps`` jobs."""
    workers = WorkerPool(JobQueue(db, POLICY), {StepsJob.kind: StepsJob()}, threads=1)
    workers.start()
    yield workers
    workers.stop()


def test_handlers_run_to_success_or_failure(pool: WorkerPool, tmp_path: Path) -> None:
    queue, db = pool.queue, pool.queue.db
    assert isinstance(db, Database)
    ok = submit(queue, db, tmp_path / "ok")
    failing = submit(queue, db, tmp_path / "failing", fail_at=1)
    crashing = submit(queue, db, tmp_path / "crashing", crash_at=0)
    with db.session() as session:
        unknown = queue.enqueue(session, "Nobody", "alice", {}).id
    ended = (JobStatus.SUCCEEDED, JobStatus.FAILED)
    for job_id in (ok, failing, crashing):

        def ended_yet(job_id: str = job_id) -> bool:
            return job_of(queue, job_id).status in ended

        wait_until(ended_yet, 30, f"{job_id} never ended")
    done = job_of(queue, ok)
    assert (done.status, done.progress, done.result_id) == (JobStatus.SUCCEEDED, 100, "3")
    failed = job_of(queue, failing)
    assert failed.status == JobStatus.FAILED and failed.progress == 33
    assert [(e["stack"], e["args"]) for e in failed.errors] == [("step 1 went wrong", {"step": 1})]
    assert "internal error" in job_of(queue, crashing).errors[0]["stack"]  # no traceback shown
    # A kind this pool has no handler for is left to a pool that has one.
    assert job_of(queue, unknown).status == JobStatus.QUEUED


def test_a_cancelled_running_job_stops_within_a_heartbeat(pool: WorkerPool, tmp_path: Path) -> None:
    queue, db = pool.queue, pool.queue.db
    assert isinstance(db, Database)
    marks = tmp_path / "marks"
    job_id = submit(queue, db, marks, steps=100, seconds=0.1)
    wait_until(lambda: len(marks_of(marks)) >= 2, 30, "the job never started")
    assert queue.cancel("alice", job_id) is not None
    time.sleep(1.0)  # a step (0.1 s) and a heartbeat (0.2 s) later it has stopped
    steps_then = len(marks_of(marks))
    time.sleep(1.0)
    assert len(marks_of(marks)) == steps_then < 100
    job = job_of(queue, job_id)
    assert job.status == JobStatus.CANCELLED and job.result_id is None


def test_a_worker_killed_mid_job_loses_nothing(
    database_url: str, db: Database, tmp_path: Path
) -> None:
    queue = JobQueue(db, POLICY)
    marks = tmp_path / "marks"
    job_id = submit(queue, db, marks, steps=8, seconds=0.4)
    command = [sys.executable, str(HERE / "step_worker.py"), database_url]
    first = subprocess.Popen(command, stdout=subprocess.PIPE)
    second: subprocess.Popen[bytes] | None = None
    try:
        wait_until(lambda: len(marks_of(marks)) >= 3, 60, "the first worker never ran the job")
        first.send_signal(signal.SIGKILL)  # no handler runs, no lease is released
        first.wait(10)
        midway = job_of(queue, job_id)
        assert midway.status == JobStatus.RUNNING and 0 < midway.progress < 100
        second = subprocess.Popen(command, stdout=subprocess.PIPE)
        wait_until(lambda: job_of(queue, job_id).status == JobStatus.SUCCEEDED, 60, "not resumed")
    finally:
        for process in (first, second):
            if process is not None and process.poll() is None:
                process.kill()
                process.wait()
    done = job_of(queue, job_id)
    assert (done.result_id, done.attempts) == (str(sum(range(8))), 2)
    ran = marks_of(marks)
    assert {pid for pid, _ in ran} == {first.pid, second.pid}
    # Every step ran; only the one in flight at the kill may have run twice.
    twice = [step for step, count in Counter(step for _, step in ran).items() if count > 1]
    assert sorted({step for _, step in ran}) == list(range(8)) and len(twice) <= 1

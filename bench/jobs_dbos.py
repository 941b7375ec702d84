"""DBOS 3.4 against the job queue's own tests (issue 20): each job once, SIGKILL, fairness.

Run (PostgreSQL from any server you can create databases on; SQLite needs nothing):

    python -m bench.jobs_dbos --database-url postgresql+psycopg://postgres@127.0.0.1:5432/dbos_bench
    python -m bench.jobs_dbos --database-url sqlite:////tmp/dbos_bench.db

Each scenario starts real worker processes (DBOS is one instance per process), enqueues through
``DBOSClient`` and counts step executions from marker files the workflows append to. The
figures are in ARCHITECTURE.md ("The job queue"). DBOS is a measurement-only dependency: it is
not in pyproject.toml (install it with ``pip install dbos==3.4.0`` to run this).
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

QUEUE = "bench_jobs"


def worker_main(url: str, executor: str, concurrency: int, marks: Path, partitioned: bool) -> None:
    """One DBOS process: a queue and a workflow of ``steps`` steps that mark each run."""
    from dbos import DBOS, DBOSConfig

    config: DBOSConfig = {
        "name": "jobs-bench",
        "system_database_url": url,
        "executor_id": executor,
        "log_level": "WARNING",
    }
    DBOS(config=config)

    @DBOS.step()
    def step(job: str, index: int, seconds: float) -> None:
        with open(marks / job, "a") as out:
            out.write(f"{executor} {index} {time.time():.3f}\n")
        time.sleep(seconds)

    @DBOS.workflow(name="bench_job")
    def bench_job(job: str, steps: int, seconds: float) -> None:
        for index in range(steps):
            step(job, index, seconds)
        (marks / f"{job}.done").write_text(executor)

    DBOS.launch()
    # Queues live in the system database in 3.x: registered once it is there.
    if partitioned:
        DBOS.register_queue(
            QUEUE, worker_concurrency=concurrency, partition_concurrency=1, polling_interval_sec=0.1
        )
    else:
        DBOS.register_queue(QUEUE, worker_concurrency=concurrency, polling_interval_sec=0.1)
    while True:
        time.sleep(1)


class Workers:
    """Worker processes of this script, killed at the end."""

    def __init__(self, url: str, marks: Path, partitioned: bool = False) -> None:
        self.url, self.marks, self.partitioned = url, marks, partitioned
        self.started: dict[str, subprocess.Popen[bytes]] = {}

    def start(self, executor: str, concurrency: int) -> None:
        command = [sys.executable, "-m", "bench.jobs_dbos", "--worker", executor,
                   "--concurrency", str(concurrency), "--marks", str(self.marks),
                   "--database-url", self.url]  # fmt: skip
        if self.partitioned:
            command.append("--partitioned")
        self.started[executor] = subprocess.Popen(command)

    def kill(self, executor: str) -> None:
        self.started[executor].send_signal(signal.SIGKILL)
        self.started[executor].wait()

    def close(self) -> None:
        for process in self.started.values():
            if process.poll() is None:
                process.kill()
                process.wait()


def client(url: str) -> Any:
    from dbos import DBOSClient

    deadline = time.monotonic() + 60
    while True:  # the first worker creates the system tables
        try:
            return DBOSClient(system_database_url=url)
        except Exception:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.5)


def enqueue(dbos: Any, job: str, steps: int, seconds: float, tenant: str | None = None) -> None:
    options: dict[str, Any] = {"workflow_name": "bench_job", "queue_name": QUEUE}
    if tenant is not None:
        options["queue_partition_key"] = tenant
    for _ in range(100):  # the queue row appears once a worker registered it
        try:
            dbos.enqueue(options, job, steps, seconds)
            return
        except Exception as exc:
            last = exc
            time.sleep(0.2)
    raise last


def wait_done(marks: Path, jobs: list[str], timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if all((marks / f"{job}.done").exists() for job in jobs):
            return True
        time.sleep(0.1)
    return False


def runs(marks: Path, job: str) -> list[str]:
    path = marks / job
    return path.read_text().splitlines() if path.exists() else []


def fresh(url: str, name: str) -> str:
    """A database of its own for one scenario."""
    if url.startswith("sqlite"):
        return f"sqlite:///{tempfile.mkdtemp(prefix='dbos-')}/{name}.db"
    from sqlalchemy import create_engine, make_url, text

    parsed = make_url(url)
    admin = create_engine(parsed.set(database="postgres"), isolation_level="AUTOCOMMIT")
    with admin.connect() as connection:
        connection.execute(text(f'DROP DATABASE IF EXISTS "{name}"'))
        connection.execute(text(f'CREATE DATABASE "{name}"'))
    admin.dispose()
    return parsed.set(database=name).render_as_string(hide_password=False)


def each_job_once(url: str) -> str:
    """Two processes of three threads take 30 one-step jobs: each must run exactly once."""
    marks = Path(tempfile.mkdtemp(prefix="dbos-marks-"))
    workers = Workers(fresh(url, "dbos_once"), marks)
    try:
        workers.start("a", 3)
        workers.start("b", 3)
        dbos = client(workers.url)
        jobs = [f"j{i}" for i in range(30)]
        started = time.monotonic()
        for job in jobs:
            enqueue(dbos, job, 1, 0.05)
        done = wait_done(marks, jobs, 120)
        took = time.monotonic() - started
        counts = [len(runs(marks, job)) for job in jobs]
        return f"each job once: all done={done} in {took:.1f} s, runs per job {set(counts)}"
    finally:
        workers.close()


def sigkill(url: str, wait: float) -> str:
    """A job of ten 1 s steps; its process is SIGKILLed after two steps while another runs.

    The queue's own test asks that another worker finishes the job within a lease (a few
    seconds) and that finished steps are not redone.
    """
    marks = Path(tempfile.mkdtemp(prefix="dbos-marks-"))
    workers = Workers(fresh(url, "dbos_kill"), marks)
    try:
        workers.start("a", 1)
        workers.start("b", 1)  # a survivor on the same database, idle
        dbos = client(workers.url)
        enqueue(dbos, "long", 10, 1.0)
        deadline = time.monotonic() + 60
        while len(runs(marks, "long")) < 2:
            assert time.monotonic() < deadline, "the job never started"
            time.sleep(0.05)
        runner = runs(marks, "long")[0].split()[0]
        workers.kill(runner)
        killed = time.monotonic()
        on_other = wait_done(marks, ["long"], wait)
        report = f"SIGKILL: finished by the surviving process within {wait:g} s: {on_other}"
        if not on_other:
            workers.start(runner, 1)  # the same executor id comes back
            resumed = wait_done(marks, ["long"], 60)
            report += (
                f"; after restarting executor {runner!r}: finished={resumed}, "
                f"{time.monotonic() - killed:.1f} s after the kill"
            )
        steps = [line.split()[1] for line in runs(marks, "long")]
        return report + f"; steps run {steps}"
    finally:
        workers.close()


def fairness(url: str, partitioned: bool) -> str:
    """One worker; tenant A queues 20 jobs, then tenant B one: how many of A's run before B's?

    The queue's own test allows one (the job in flight) or two.
    """
    marks = Path(tempfile.mkdtemp(prefix="dbos-marks-"))
    name = "dbos_fair_p" if partitioned else "dbos_fair"
    workers = Workers(fresh(url, name), marks, partitioned=partitioned)
    try:
        workers.start("a", 1)
        dbos = client(workers.url)
        jobs_a = [f"a{i}" for i in range(20)]
        for job in jobs_a:
            enqueue(dbos, job, 1, 0.15, tenant="A" if partitioned else None)
        deadline = time.monotonic() + 60
        while not runs(marks, "a2"):
            assert time.monotonic() < deadline, "team A's jobs never started"
            time.sleep(0.02)
        enqueue(dbos, "b", 1, 0.0, tenant="B" if partitioned else None)
        wait_done(marks, ["b"], 60)
        b_at = float(runs(marks, "b")[0].split()[2])
        before = sum(
            1
            for job in jobs_a[3:]
            if runs(marks, job) and float(runs(marks, job)[0].split()[2]) < b_at
        )
        how = "partitioned queue (partition = tenant)" if partitioned else "plain queue"
        return f"fairness, {how}: A jobs started after B was queued and before B: {before}"
    finally:
        workers.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--database-url", required=True)
    parser.add_argument("--worker")
    parser.add_argument("--concurrency", type=int, default=1)
    parser.add_argument("--marks", type=Path)
    parser.add_argument("--partitioned", action="store_true")
    parser.add_argument("--kill-wait", type=float, default=30.0)
    args = parser.parse_args()
    if args.worker:
        worker_main(args.database_url, args.worker, args.concurrency, args.marks, args.partitioned)
        return
    os.environ.setdefault("PYTHONPATH", str(Path(__file__).resolve().parents[1]))
    print(each_job_once(args.database_url), flush=True)
    print(sigkill(args.database_url, args.kill_wait), flush=True)
    print(fairness(args.database_url, partitioned=False), flush=True)
    print(fairness(args.database_url, partitioned=True), flush=True)


if __name__ == "__main__":
    main()

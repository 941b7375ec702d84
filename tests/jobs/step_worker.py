"""A job kind for the queue's tests, and a worker process running it.

``Steps`` jobs write one line per step to the file their payload names (``<pid> <step>``), so a
test can tell which process ran which step and whether any finished step ran twice. Run as a
script, this is a worker process: ``python step_worker.py DATABASE_URL`` until killed.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

from sqlalchemy.orm import Session

from extractor.jobs import JobFailure, JobQueue, JobRun, QueuePolicy, WorkerPool, step_results
from extractor.jobs.db import Database

# Short leases so a killed worker's job moves within seconds.
POLICY = QueuePolicy(lease_seconds=1.0, heartbeat_seconds=0.2, poll_seconds=0.1)


class StepsJob:
    """``steps`` steps of ``seconds`` each; fails at step ``fail_at`` when the payload says so."""

    kind = "Steps"

    def run(self, run: JobRun) -> None:
        payload = run.job.payload
        steps = payload["steps"]
        done = (run.job.checkpoint or {}).get("done", 0)
        for step in range(done, steps):
            run.check()
            with open(payload["marks"], "a") as marks:
                marks.write(f"{os.getpid()} {step}\n")
            if step == payload.get("fail_at"):
                raise JobFailure(f"step {step} went wrong", step=step)
            if step == payload.get("crash_at"):
                raise RuntimeError("a bug in the handler")
            time.sleep(payload["seconds"])
            run.progress(int(100 * (step + 1) / steps), {"done": step + 1}, result=(step, step))

        def write(session: Session) -> str:
            return str(sum(step_results(session, run.job.id)))

        run.succeed(write)


def marks_of(path: Path) -> list[tuple[int, int]]:
    """The ``(pid, step)`` lines written so far."""
    if not path.exists():
        return []
    return [
        (int(pid), int(step))
        for pid, step in (line.split() for line in path.read_text().split("\n") if line)
    ]


def main(url: str) -> None:
    db = Database(url)
    pool = WorkerPool(JobQueue(db, POLICY), {StepsJob.kind: StepsJob()}, threads=1)
    pool.start()
    print("ready", flush=True)
    while True:
        time.sleep(1)


if __name__ == "__main__":
    main(sys.argv[1])

"""How long a fair claim takes with a long queue: ``python -m bench.labeling_claims``.

Fills a fresh labeling database with ``--jobs`` queued jobs spread over ``--tenants`` teams, then
times ``--rounds`` claims, each followed by its release (so the queue stays the same length), and
prints the median and the 90th percentile. SQLite in a temporary folder by default;
``--database-url`` points it at an empty PostgreSQL database instead (its tables are filled, not
dropped). The claim orders candidates by their tenant's running jobs and last service, two
correlated subqueries per candidate, so this is the number to watch as queues grow.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from extractor.config import LabelingSettings
from extractor.jobs import JobQueue
from extractor.labeling.db import Database, migrate
from extractor.labeling.models import Team, User
from extractor.labeling.state import queue_policy


def fill(db: Database, queue: JobQueue, jobs: int, tenants: int) -> None:
    """``jobs`` queued jobs, round-robin over ``tenants`` teams, oldest first."""
    with db.session() as session:
        owner = User(email=f"bench-{time.monotonic_ns()}@example.com")
        teams = [Team(name=f"bench-{time.monotonic_ns()}-{i}") for i in range(tenants)]
        session.add_all([owner, *teams])
        session.flush()
        for index in range(jobs):
            team = teams[index % tenants].id
            queue.enqueue(session, "Bench", owner.id, {"teamId": team}, tenant=f"team:{team}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=5000)
    parser.add_argument("--tenants", type=int, default=50)
    parser.add_argument("--rounds", type=int, default=50)
    parser.add_argument("--database-url", default="")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as folder:
        url = args.database_url or f"sqlite:///{Path(folder) / 'bench.db'}"
        migrate(url)
        db = Database(url)
        try:
            queue = JobQueue(db, queue_policy(LabelingSettings(database_url=url)))
            fill(db, queue, args.jobs, args.tenants)
            timings = []
            for round_ in range(args.rounds):
                started = time.perf_counter()
                job = queue.claim(f"bench-{round_}")
                timings.append(time.perf_counter() - started)
                assert job is not None
                queue.release(job.id, f"bench-{round_}")
        finally:
            db.dispose()
    timings.sort()
    print(
        f"{db.engine.dialect.name}: {args.jobs} queued jobs, {args.tenants} tenants, "
        f"{args.rounds} claims: median {1000 * statistics.median(timings):.1f} ms, "
        f"p90 {1000 * timings[int(0.9 * (len(timings) - 1))]:.1f} ms"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

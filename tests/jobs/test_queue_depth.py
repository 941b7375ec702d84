"""The queue depth KEDA scales on (deploy/kubernetes/autoscaling/keda.yaml): its SQL, run as
written against the queue's real tables, counts the extraction jobs waiting or running and
nothing else (ended jobs, other kinds such as the labeling service's in a shared database)."""

from __future__ import annotations

from kubernetes_manifests import queue_depth_query
from sqlalchemy import text

from extractor.async_jobs.extraction_jobs import KIND as EXTRACT_KIND
from extractor.jobs import JobFailure, JobQueue, QueuePolicy
from extractor.jobs.db import Database


def test_the_keda_query_counts_queued_and_running_extractions(db: Database) -> None:
    queue = JobQueue(db, QueuePolicy())
    ids = []
    for n in range(6):
        with db.session() as session:
            ids.append(queue.enqueue(session, EXTRACT_KIND, "alice", {"n": n}).id)
    with db.session() as session:  # another service's job in the same table
        queue.enqueue(session, "AutoLabel", "alice", {})
    running = queue.claim("replica-1", kinds=[EXTRACT_KIND])
    finished = queue.claim("replica-1", kinds=[EXTRACT_KIND])
    failed = queue.claim("replica-2", kinds=[EXTRACT_KIND])
    assert running and finished and failed
    assert queue.succeed(finished.id, "replica-1", lambda _session: None)
    assert queue.fail(failed.id, "replica-2", JobFailure("broken upload"))
    queue.cancel("alice", ids[-1])
    with db.session() as session:
        depth = session.execute(text(queue_depth_query())).scalar_one()
    # Six extractions: one running, two queued still, one succeeded, one failed, one cancelled.
    assert depth == 3

"""The queue itself on SQLite and PostgreSQL: each job claimed once, leases that expire and move
the job, late workers that cannot settle, reaping, progress that never goes down, cancel,
paginated lists, per-owner caps and fair claims between tenants."""

from __future__ import annotations

import threading
from datetime import timedelta
from typing import Any

import pytest
from sqlalchemy import select, update

from extractor.jobs import (
    JobFailure,
    JobQueue,
    JobStatus,
    OwnerCapReached,
    QueuePolicy,
    utcnow,
)
from extractor.jobs import queue as queue_module
from extractor.jobs.db import Database
from extractor.jobs.tables import Job, JobResult, JobUpload

POLICY = QueuePolicy(lease_seconds=30, secret_payload_keys=frozenset({"secret"}))


def add(
    queue: JobQueue, db: Database, count: int, owner: str = "alice", **options: Any
) -> list[str]:
    """``count`` jobs of kind Test, each in its own transaction (so creation order is clear)."""
    ids: list[str] = []
    for _ in range(count):
        with db.session() as session:
            ids.append(queue.enqueue(session, "Test", owner, {"n": len(ids)}, **options).id)
    return ids


def expire_leases(db: Database) -> None:
    with db.session() as session:
        session.execute(
            update(Job)
            .where(Job.locked_by.is_not(None))
            .values(locked_until=utcnow() - timedelta(seconds=1))
        )


def row(db: Database, job_id: str) -> Job:
    with db.session() as session:
        job = session.get(Job, job_id)
        assert job is not None
        session.expunge(job)
        return job


# -- claims and leases ------------------------------------------------------------------------


def test_concurrent_claims_take_each_job_once(db: Database) -> None:
    queue = JobQueue(db, POLICY)
    ids = add(queue, db, 30)
    claimed: list[str] = []
    lock = threading.Lock()

    def claimer(worker: int) -> None:
        while (job := queue.claim(f"w{worker}")) is not None:
            with lock:
                claimed.append(job.id)

    threads = [threading.Thread(target=claimer, args=(i,)) for i in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert sorted(claimed) == sorted(ids)


def test_an_expired_lease_moves_the_job_and_the_late_worker_cannot_settle(db: Database) -> None:
    queue = JobQueue(db, POLICY)
    (job_id,) = add(queue, db, 1)
    first = queue.claim("slow")
    assert first is not None and queue.claim("other") is None  # leased
    expire_leases(db)
    second = queue.claim("fast")
    assert second is not None and second.id == job_id and second.attempts == 2
    assert not queue.heartbeat(job_id, "slow")
    assert not queue.save_step(job_id, "slow", 50, None)
    assert not queue.succeed(job_id, "slow", lambda _: "nope")
    assert not queue.fail(job_id, "slow", JobFailure("late"))
    assert queue.succeed(job_id, "fast", lambda _: "result")
    job = row(db, job_id)
    assert (job.status, job.result_id, job.progress) == (JobStatus.SUCCEEDED, "result", 100)


def test_a_claim_that_read_the_clock_before_the_job_was_made_starts_it_after(
    db: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A worker reads the clock, then (descheduled on a busy machine) its query finds a job
    enqueued meanwhile: the job must not show as started before it was created, nor get a
    lease that is already spent (test_jobs_api checks the API's ``started_at >= created_at``)."""
    queue = JobQueue(db, QueuePolicy(lease_seconds=3))
    (job_id,) = add(queue, db, 1)
    made = row(db, job_id).created_at
    stale = iter([made - timedelta(seconds=5)])  # the clock as the worker read it first
    monkeypatch.setattr(queue_module, "utcnow", lambda: next(stale, None) or utcnow())
    claimed = queue.claim("w")
    assert claimed is not None and claimed.id == job_id
    job = row(db, job_id)
    assert job.claimed_at is not None and job.claimed_at >= job.created_at
    assert job.heartbeat_at == job.claimed_at and job.updated_at >= job.created_at
    assert job.locked_until is not None and job.locked_until > utcnow() + timedelta(seconds=2)


def test_reap_frees_dead_workers_jobs_and_fails_those_out_of_attempts(db: Database) -> None:
    queue = JobQueue(db, QueuePolicy(max_attempts=2))
    alive, dead, doomed = add(queue, db, 3)
    for worker in ("w1", "w2", "w3"):
        assert queue.claim(worker) is not None
    with db.session() as session:
        session.execute(update(Job).where(Job.id == doomed).values(attempts=2))
        session.execute(
            update(Job)
            .where(Job.id.in_([dead, doomed]))
            .values(locked_until=utcnow() - timedelta(seconds=1))
        )
    assert queue.reap() == 2
    assert row(db, alive).locked_by is not None  # its lease is live: untouched
    assert (row(db, dead).status, row(db, dead).locked_by) == (JobStatus.RUNNING, None)
    failed = row(db, doomed)
    assert failed.status == JobStatus.FAILED and "interrupted 2 times" in failed.errors[0]["stack"]
    assert queue.reap() == 0
    again = queue.claim("w4")
    assert again is not None and again.id == dead


def test_a_job_that_keeps_dying_fails_for_good_at_its_next_claim(db: Database) -> None:
    queue = JobQueue(db, QueuePolicy(max_attempts=2))
    (job_id,) = add(queue, db, 1)
    with db.session() as session:
        session.execute(update(Job).values(attempts=2, status=JobStatus.RUNNING))
    assert queue.claim("w") is None
    assert row(db, job_id).status == JobStatus.FAILED


def test_progress_never_goes_down(db: Database) -> None:
    queue = JobQueue(db, POLICY)
    (job_id,) = add(queue, db, 1)
    assert queue.claim("w") is not None
    assert queue.save_step(job_id, "w", 60, {"done": 3}, result=(3, "three"))
    assert queue.save_step(job_id, "w", 40, {"done": 2}, result=(2, "two"))  # a redone step
    job = row(db, job_id)
    assert (job.progress, job.checkpoint) == (60, {"done": 2})
    assert queue.step_results(job_id) == ["two", "three"]


def test_a_worker_claims_only_the_kinds_it_knows(db: Database) -> None:
    queue = JobQueue(db, POLICY)
    with db.session() as session:
        extraction = queue.enqueue(session, "Extraction", "alice", {})
        labeling = queue.enqueue(session, "AutoLabel", "alice", {})
    first = queue.claim("labeler", kinds=["AutoLabel", "CreateProject"])
    assert first is not None and first.id == labeling.id
    assert queue.claim("labeler", kinds=["AutoLabel"]) is None
    claimed = queue.claim("extractor", kinds={"Extraction"})
    assert claimed is not None and claimed.id == extraction.id


def test_a_released_job_is_taken_again_without_counting_an_attempt(db: Database) -> None:
    queue = JobQueue(db, POLICY)
    (job_id,) = add(queue, db, 1)
    assert queue.claim("stopping") is not None
    queue.release(job_id, "stopping", run_seconds=1.5)
    again = queue.claim("next")
    assert again is not None and again.attempts == 1 and again.run_seconds == 1.5


# -- the end of a job -------------------------------------------------------------------------


def test_an_ended_job_keeps_no_secret_upload_or_step_result(db: Database) -> None:
    queue = JobQueue(db, POLICY)
    with db.session() as session:
        ok = queue.enqueue(
            session, "Test", "alice", {"secret": "s", "keep": 1}, uploads=[("a", b"x")]
        )
        bad = queue.enqueue(session, "Test", "alice", {"secret": "s"}, uploads=[("b", b"y")])
    assert [u.filename for u in queue.uploads(ok.id)] == ["a"]
    for job_id in (ok.id, bad.id):
        claimed = queue.claim(job_id)
        assert claimed is not None and claimed.payload["secret"] == "s"
        assert queue.save_step(claimed.id, job_id, 50, {"s": 1}, result=(0, "half"))
    assert queue.succeed(ok.id, ok.id, lambda _: None)
    assert queue.fail(bad.id, bad.id, JobFailure("the model said no", batch=2))
    assert row(db, ok.id).payload == {"keep": 1} and row(db, bad.id).payload == {}
    (error,) = row(db, bad.id).errors
    assert (error["stack"], error["args"]) == ("the model said no", {"batch": 2})
    with db.session() as session:
        assert session.scalars(select(JobUpload.id)).all() == []
        assert session.scalars(select(JobResult.step)).all() == []
    assert row(db, ok.id).checkpoint is None


def test_cancel_stops_queued_and_running_jobs_of_their_owner_only(db: Database) -> None:
    queue = JobQueue(db, POLICY)
    running, finished, waiting = add(queue, db, 3, uploads=[("f", b"data")])
    assert queue.claim("w1") is not None  # claims go oldest first: ``running``
    assert queue.cancel("mallory", running) is None  # someone else's: unknown to them
    cancelled = queue.cancel("alice", running)
    assert cancelled is not None and cancelled.status == JobStatus.CANCELLED
    # The worker finds out at its next heartbeat or step; nothing it writes lands.
    assert not queue.heartbeat(running, "w1")
    assert not queue.save_step(running, "w1", 90, None)
    assert not queue.succeed(running, "w1", lambda _: "late")
    assert queue.uploads(running) == []
    claimed = queue.claim("w2")
    assert claimed is not None and claimed.id == finished
    assert queue.succeed(finished, "w2", lambda _: "r")
    unchanged = queue.cancel("alice", finished)
    assert unchanged is not None and unchanged.status == JobStatus.SUCCEEDED
    gone = queue.cancel("alice", waiting)
    assert gone is not None and gone.status == JobStatus.CANCELLED
    assert queue.claim("w3") is None  # nothing runnable is left
    assert row(db, running).status == JobStatus.CANCELLED


def test_purge_deletes_ended_jobs_older_than_the_cutoff(db: Database) -> None:
    queue = JobQueue(db, POLICY)
    old_done, new_done = add(queue, db, 2)
    for worker in ("w1", "w2"):
        claimed = queue.claim(worker)
        assert claimed is not None and queue.succeed(claimed.id, worker, lambda _: None)
    (old_waiting,) = add(queue, db, 1)  # old but not ended: kept
    with db.session() as session:
        session.execute(
            update(Job)
            .where(Job.id.in_([old_done, old_waiting]))
            .values(updated_at=utcnow() - timedelta(days=2))
        )
    cutoff = utcnow() - timedelta(days=1)
    assert queue.purge(cutoff, kinds=["Other"]) == 0  # another service's purge spares them
    assert queue.purge(cutoff, kinds=["Test"]) == 1
    assert queue.get("alice", [old_done, old_waiting, new_done])[0] is None
    assert all(job is not None for job in queue.get("alice", [old_waiting, new_done]))


def test_forget_deletes_only_the_owners_ended_jobs(db: Database) -> None:
    queue = JobQueue(db, POLICY)
    done, waiting = add(queue, db, 2)
    claimed = queue.claim("w1")
    assert claimed is not None and claimed.id == done
    assert queue.succeed(done, "w1", lambda _: None)
    assert queue.forget("bob", [done]) == 0  # not bob's
    assert queue.forget("alice", [done, waiting]) == 1  # the queued one stays
    assert queue.get("alice", [done, waiting])[0] is None
    assert queue.get("alice", [waiting])[0] is not None


# -- listing ----------------------------------------------------------------------------------


def test_list_by_owner_is_newest_first_paginated_and_filtered(db: Database) -> None:
    queue = JobQueue(db, POLICY)
    ids = add(queue, db, 5)
    add(queue, db, 2, owner="bob")
    claimed = queue.claim("w")
    assert claimed is not None and claimed.id == ids[0]
    pages, after = [], None
    while True:
        page = queue.list_jobs("alice", limit=2, after=after)
        pages.append([job.id for job in page.jobs])
        if page.next is None:
            break
        after = page.next
    assert [job_id for page in pages for job_id in page] == ids[::-1]
    assert all(len(page) <= 2 for page in pages)
    running = queue.list_jobs("alice", statuses=[JobStatus.RUNNING])
    assert [job.id for job in running.jobs] == [ids[0]] and running.next is None
    assert queue.list_jobs("bob", after=ids[0]).jobs == []  # another owner's cursor
    assert queue.get("bob", [ids[1], "nope"]) == [None, None]
    (mine,) = queue.get("alice", [ids[1]])
    assert mine is not None and mine.status == JobStatus.QUEUED


# -- enqueue: caps, notifications -------------------------------------------------------------


def test_the_per_owner_cap_holds_under_concurrent_enqueues(db: Database) -> None:
    queue = JobQueue(db, POLICY)
    accepted: list[str] = []
    refused: list[OwnerCapReached] = []
    lock = threading.Lock()

    def submit() -> None:
        try:
            with db.session() as session:
                job = queue.enqueue(session, "Test", "alice", {}, max_unfinished=3)
            with lock:
                accepted.append(job.id)
        except OwnerCapReached as exc:
            with lock:
                refused.append(exc)

    threads = [threading.Thread(target=submit) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert len(accepted) == 3 and len(refused) == 5
    assert {exc.cap for exc in refused} == {3}
    with db.session() as session:
        bob = queue.enqueue(session, "Test", "bob", {}, max_unfinished=3)  # caps are per owner
    claimed = queue.claim("w")
    assert claimed is not None and claimed.id != bob.id
    assert queue.succeed(claimed.id, "w", lambda _: None)
    with db.session() as session:  # an ended job frees its slot
        queue.enqueue(session, "Test", "alice", {}, max_unfinished=3)


def test_local_workers_are_woken_after_the_commit_only(db: Database) -> None:
    queue = JobQueue(db, POLICY)
    woken: list[int] = []
    queue.on_enqueue(lambda: woken.append(len(queue.list_jobs("alice").jobs)))
    with pytest.raises(RuntimeError), db.session() as session:
        queue.enqueue(session, "Test", "alice", {})
        raise RuntimeError("the request failed after queueing")
    assert woken == [] and queue.list_jobs("alice").jobs == []
    add(queue, db, 1)
    assert woken == [1]  # the job was visible when the workers were woken


# -- fairness ---------------------------------------------------------------------------------


def test_claims_go_to_the_tenant_with_fewest_running_then_longest_unserved(db: Database) -> None:
    queue = JobQueue(db, POLICY)
    a_jobs = add(queue, db, 4, tenant="team:a")
    b_jobs = add(queue, db, 2, tenant="team:b")
    order = []
    for worker in range(4):
        job = queue.claim(f"w{worker}")
        assert job is not None
        order.append(job.tenant)
    # A first (oldest), then B (fewer running), then alternately.
    assert order == ["team:a", "team:b", "team:a", "team:b"]
    running = queue.list_jobs("alice", statuses=[JobStatus.RUNNING]).jobs
    assert {job.id for job in running} == {*a_jobs[:2], *b_jobs}


def test_a_tenant_over_its_share_yields_only_while_another_waits(db: Database) -> None:
    queue = JobQueue(db, QueuePolicy(tenant_share=0.5))
    add(queue, db, 2, tenant="team:a")
    assert queue.claim("w1") is not None and queue.claim("w2") is not None
    assert not queue.should_yield("team:a")  # nobody else waits
    add(queue, db, 1, tenant="team:b")
    assert queue.should_yield("team:a")  # holds 2 of 2 running while B waits
    assert not JobQueue(db, QueuePolicy(tenant_share=1.0)).should_yield("team:a")

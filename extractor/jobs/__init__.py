"""A job queue in the database (SQLite or PostgreSQL, through SQLAlchemy) shared by any number
of worker threads and processes: enqueue, claim with a lease, heartbeat and progress, finish
(succeeded, failed, cancelled), cancel, list by owner, reap expired leases, per-owner caps and
fair claims between tenants. Job kinds plug in as :class:`JobHandler` objects.

The only code that builds job rows or queries the jobs tables; services use what this module
exports and nothing else of the package. ARCHITECTURE.md ("The job queue") tells how to add a
job kind and why this is not DBOS.
"""

from extractor.jobs.errors import (
    JobFailure,
    JobInterrupted,
    JobYielded,
    OwnerCapReached,
    StorageError,
)
from extractor.jobs.policy import QueuePolicy
from extractor.jobs.queue import JobQueue, error_entry, new_job_id
from extractor.jobs.reads import (
    JobReads,
    Sessions,
    iter_step_results,
    queued_of_tenant,
    step_results,
)
from extractor.jobs.records import ClaimedJob, JobPage, JobRecord, Upload
from extractor.jobs.tables import ENDED, RUNNABLE, JobsBase, JobStatus, utcnow
from extractor.jobs.worker import JobHandler, JobRun, WorkerPool

__all__ = [
    "ENDED",
    "RUNNABLE",
    "ClaimedJob",
    "JobFailure",
    "JobHandler",
    "JobInterrupted",
    "JobPage",
    "JobQueue",
    "JobReads",
    "JobRecord",
    "JobRun",
    "JobStatus",
    "JobYielded",
    "JobsBase",
    "OwnerCapReached",
    "QueuePolicy",
    "Sessions",
    "StorageError",
    "Upload",
    "WorkerPool",
    "error_entry",
    "iter_step_results",
    "new_job_id",
    "queued_of_tenant",
    "step_results",
    "utcnow",
]

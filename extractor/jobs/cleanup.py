"""Deleting ended jobs: all of those past a time to live, or some by id (a client deleting a
finished job). Their step results and uploads went when they ended; only the rows remain."""

from __future__ import annotations

from collections.abc import Collection, Sequence
from datetime import datetime
from typing import Any, cast

from sqlalchemy import CursorResult, delete, true

from extractor.jobs.reads import Sessions
from extractor.jobs.tables import ENDED, Job


class JobCleanup:
    """Deletes ended jobs; never a queued or running one (cancel it first)."""

    db: Sessions

    def purge(self, ended_before: datetime, kinds: Collection[str] | None = None) -> int:
        """Delete the jobs that ended before ``ended_before`` (only of ``kinds`` when given: a
        service sharing the database with another purges its own): how a service keeps jobs
        for a time to live. How many went."""
        of_kinds = Job.kind.in_(list(kinds)) if kinds is not None else true()
        with self.db.session() as session:
            gone = cast(
                CursorResult[Any],
                session.execute(
                    delete(Job).where(
                        Job.status.in_(ENDED), Job.updated_at < ended_before, of_kinds
                    )
                ),
            )
            return int(gone.rowcount)

    def forget(self, owner_id: str | None, job_ids: Sequence[str]) -> int:
        """Delete the owner's (None: anyone's) ended jobs among ``job_ids``: how many went."""
        mine = Job.owner_id == owner_id if owner_id is not None else true()
        with self.db.session() as session:
            gone = cast(
                CursorResult[Any],
                session.execute(
                    delete(Job).where(Job.id.in_(list(job_ids)), mine, Job.status.in_(ENDED))
                ),
            )
            return int(gone.rowcount)

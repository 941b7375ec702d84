"""Job progress and results in their own rows, job deadlines and fairness (issue 11)

Revision ID: 0002
Revises: 0001

Adds ``jobs.tenant`` (``team:<id>`` or ``user:<id>``, whom fair claims count a job against),
``jobs.claimed_at`` (when a tenant was last served) and ``jobs.run_seconds`` (worker time held
against the job deadline), and the ``job_results`` table of per-step results. Jobs still running
keep their progress: their team is looked up and labels checkpointed the old way (all of them in
``jobs.checkpoint``) move into one ``job_results`` row, step 0.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def _json(value: Any) -> Any:
    """A JSON column's value as Python (SQLite hands back text through a bare ``text()``)."""
    return json.loads(value) if isinstance(value, str) else value


def upgrade() -> None:
    # Plain ADD COLUMN and CREATE INDEX only: on SQLite, batch mode would copy ``jobs`` and drop
    # the original, and with foreign keys on that drop cascades to every job's uploads.
    op.add_column(
        "jobs", sa.Column("tenant", sa.String(length=80), nullable=False, server_default="")
    )
    op.add_column("jobs", sa.Column("claimed_at", sa.DateTime(), nullable=True))
    op.add_column("jobs", sa.Column("run_seconds", sa.Float(), nullable=False, server_default="0"))
    op.create_index("ix_jobs_tenant_status", "jobs", ["tenant", "status"], unique=False)
    op.create_index("ix_jobs_tenant_claimed_at", "jobs", ["tenant", "claimed_at"], unique=False)
    op.create_table(
        "job_results",
        sa.Column("job_id", sa.String(length=80), nullable=False),
        sa.Column("step", sa.Integer(), nullable=False),
        sa.Column("data", sa.JSON(), nullable=False),
        sa.Column("created_at", sa.DateTime(), nullable=False),
        sa.ForeignKeyConstraint(
            ["job_id"], ["jobs.id"], name=op.f("fk_job_results_job_id_jobs"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("job_id", "step", name=op.f("pk_job_results")),
    )

    connection = op.get_bind()
    connection.execute(sa.text("UPDATE jobs SET tenant = 'user:' || owner_id"))
    results = sa.table(
        "job_results",
        sa.column("job_id", sa.String),
        sa.column("step", sa.Integer),
        sa.column("data", sa.JSON),
        sa.column("created_at", sa.DateTime),
    )
    running = connection.execute(
        sa.text(
            "SELECT id, payload, checkpoint FROM jobs WHERE status IN ('QUEUED', 'IN_PROGRESS')"
        )
    ).all()
    now = datetime.now(UTC).replace(tzinfo=None)  # naive UTC, as every stored timestamp
    for job_id, raw_payload, raw_checkpoint in running:
        payload = _json(raw_payload) or {}
        team = payload.get("teamId")
        if team is None and payload.get("projectId"):
            team = connection.execute(
                sa.text("SELECT team_id FROM projects WHERE id = :id"),
                {"id": payload["projectId"]},
            ).scalar()
        if team:
            connection.execute(
                sa.text("UPDATE jobs SET tenant = :tenant WHERE id = :id"),
                {"tenant": f"team:{team}", "id": job_id},
            )
        checkpoint = _json(raw_checkpoint)
        if isinstance(checkpoint, dict) and "labels" in checkpoint:
            connection.execute(
                results.insert().values(
                    job_id=job_id, step=0, data=checkpoint["labels"], created_at=now
                )
            )
            connection.execute(
                sa.text("UPDATE jobs SET checkpoint = :checkpoint WHERE id = :id").bindparams(
                    sa.bindparam("checkpoint", type_=sa.JSON)
                ),
                {"checkpoint": {"batchesDone": checkpoint["batchesDone"]}, "id": job_id},
            )


def downgrade() -> None:
    op.drop_table("job_results")
    op.drop_index("ix_jobs_tenant_claimed_at", table_name="jobs")
    op.drop_index("ix_jobs_tenant_status", table_name="jobs")
    # ALTER TABLE DROP COLUMN (SQLite 3.35+), never a table copy: see upgrade().
    for column in ("run_seconds", "claimed_at", "tenant"):
        op.drop_column("jobs", column)

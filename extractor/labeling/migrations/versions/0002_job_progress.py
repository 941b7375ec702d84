"""Job progress and results in their own rows, job deadlines and fairness (issue 11)

Revision ID: 0002
Revises: 0001
"""

from __future__ import annotations

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    pass


def downgrade() -> None:
    pass

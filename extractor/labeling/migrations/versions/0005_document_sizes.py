"""Each document's stored size, so a reply's bytes are known before it is read (issue 18)

Revision ID: 0005
Revises: 0004

Adds ``documents.size_bytes``: the length of the document's stored JSON text, which is exactly
what a reply of its ``importable`` carries (the text is sent as stored, and it is ASCII: the JSON
encoder escapes every other character). Existing rows are measured here, once.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # Plain ADD COLUMN (no batch table copy on SQLite: see 0002).
    op.add_column("documents", sa.Column("size_bytes", sa.BigInteger(), nullable=True))
    op.execute("UPDATE documents SET size_bytes = length(CAST(importable AS TEXT))")


def downgrade() -> None:
    op.drop_column("documents", "size_bytes")

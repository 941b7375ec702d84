"""A covering index for pages of documents (issue 18)

Revision ID: 0006
Revises: 0005

SQLite keeps a row's columns in order, and ``documents.size_bytes`` (added by 0005) comes after
``importable``: reading it walked every overflow page of the document, so sizing a page of five
10 MiB documents read 100 MB (1.1 to 2.8 s for the issue's refused query). The index holds
everything a page of documents needs (id, name, size, in upload order), so a page is read from
it alone on SQLite and PostgreSQL, without touching any document's text.
"""

from __future__ import annotations

from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None

COLUMNS = ["project_id", "position", "id", "name", "size_bytes"]


def upgrade() -> None:
    op.create_index("ix_documents_page", "documents", COLUMNS, unique=False)


def downgrade() -> None:
    op.drop_index("ix_documents_page", table_name="documents")

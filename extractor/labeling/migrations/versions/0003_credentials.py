"""Encrypted custom API secrets, token expiry and revocation (issue 11)

Revision ID: 0003
Revises: 0002

``custom_apis.secret_token`` holds the sealed secret. Secrets stored in clear before stay in
``custom_apis.secret`` until the service starts with a key and seals them (a migration has no key
to seal with); ``access_tokens.revoked_at`` records ``extractor labeling revoke-token``.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("custom_apis", schema=None) as batch_op:
        batch_op.add_column(sa.Column("secret_token", sa.Text(), nullable=True))
    with op.batch_alter_table("access_tokens", schema=None) as batch_op:
        batch_op.add_column(sa.Column("revoked_at", sa.DateTime(), nullable=True))


def downgrade() -> None:
    # Sealed secrets cannot be decrypted here: they are dropped, and must be entered again.
    with op.batch_alter_table("access_tokens", schema=None) as batch_op:
        batch_op.drop_column("revoked_at")
    with op.batch_alter_table("custom_apis", schema=None) as batch_op:
        batch_op.drop_column("secret_token")

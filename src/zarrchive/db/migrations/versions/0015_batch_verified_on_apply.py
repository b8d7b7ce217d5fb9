"""upload batches queued by a ``complete`` that left the check of their staged objects to
the apply step (``verify=apply``): the applier lists the staging area before any copy

Revision ID: 0015
Revises: 0014
Create Date: 2026-11-26 13:00:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0015"
down_revision = "0014"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # a plain ADD COLUMN (a constant default is allowed on SQLite): batch mode would rebuild
    # the table, and dropping the old one would cascade to the batches' files
    op.add_column(
        "upload_batches",
        sa.Column("verify_on_apply", sa.Boolean(), nullable=False, server_default=sa.false()),
    )


def downgrade() -> None:
    op.drop_column("upload_batches", "verify_on_apply")  # SQLite >= 3.35 drops in place

"""blob uploads: background validation state

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-22 15:45:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("blob_uploads", sa.Column("validation", sa.String(length=16), nullable=True))
    op.add_column("blob_uploads", sa.Column("validation_error", sa.Text(), nullable=True))
    op.add_column(
        "blob_uploads", sa.Column("validated_blob_id", sa.String(length=36), nullable=True)
    )


def downgrade() -> None:
    with op.batch_alter_table("blob_uploads") as batch:
        batch.drop_column("validated_blob_id")
        batch.drop_column("validation_error")
        batch.drop_column("validation")

"""multipart files in Zarr upload batches (part size, S3 upload id) and the files refused
when their batch was applied (their md5 differed from the declared one)

Revision ID: 0011
Revises: 0010
Create Date: 2026-11-26 06:00:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("upload_batch_files") as batch:
        batch.add_column(sa.Column("part_size", sa.BigInteger(), nullable=True))
        batch.add_column(sa.Column("multipart_upload_id", sa.String(length=1024), nullable=True))
    op.create_table(
        "refused_uploads",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("zarr_id", sa.String(length=36), nullable=False),
        sa.Column("batch_uid", sa.String(length=32), nullable=False),
        sa.Column("path", sa.Text(), nullable=False),
        sa.Column("expected_md5", sa.String(length=32), nullable=False),
        sa.Column("found_md5", sa.String(length=32), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(["zarr_id"], ["zarrs.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index("ix_refused_uploads_zarr_id", "refused_uploads", ["zarr_id"])


def downgrade() -> None:
    op.drop_index("ix_refused_uploads_zarr_id", table_name="refused_uploads")
    op.drop_table("refused_uploads")
    with op.batch_alter_table("upload_batch_files") as batch:
        batch.drop_column("multipart_upload_id")
        batch.drop_column("part_size")

"""trash: deleted dandisets stay (``deleted_at``, ``deleted_by``), deleted assets move to
``trashed_assets``, both restorable until ``admin gc`` purges them; ``blobs.touched_at`` (the
last time a blob was given to an uploader or let go of, for gc's grace period)

Revision ID: 0019
Revises: 0018
Create Date: 2026-11-29 08:00:00

Three nullable columns and a new table: nothing existing is rewritten.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0019"
down_revision = "0018"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("blobs", sa.Column("touched_at", sa.DateTime(timezone=True), nullable=True))
    op.add_column("dandisets", sa.Column("deleted_at", sa.DateTime(timezone=True), nullable=True))
    op.add_column("dandisets", sa.Column("deleted_by", sa.String(length=150), nullable=True))
    op.create_table(
        "trashed_assets",
        sa.Column("id", sa.String(length=36), primary_key=True),
        sa.Column(
            "dandiset_id",
            sa.Integer(),
            sa.ForeignKey("dandisets.id", ondelete="CASCADE"),
            nullable=False,
        ),
        sa.Column("path", sa.Text(), nullable=False),
        sa.Column("metadata", sa.JSON(), nullable=False),
        sa.Column("blob_id", sa.String(length=36), sa.ForeignKey("blobs.id"), nullable=True),
        sa.Column("zarr_id", sa.String(length=36), sa.ForeignKey("zarrs.id"), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("modified_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("deleted_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("deleted_by", sa.String(length=150), nullable=False),
        sa.Column("with_dandiset", sa.Boolean(), nullable=False),
    )
    for column in ("dandiset_id", "blob_id", "zarr_id"):
        op.create_index(f"ix_trashed_assets_{column}", "trashed_assets", [column])


def downgrade() -> None:
    for column in ("dandiset_id", "blob_id", "zarr_id"):
        op.drop_index(f"ix_trashed_assets_{column}", table_name="trashed_assets")
    op.drop_table("trashed_assets")
    with op.batch_alter_table("dandisets") as batch:
        batch.drop_column("deleted_by")
        batch.drop_column("deleted_at")
    with op.batch_alter_table("blobs") as batch:
        batch.drop_column("touched_at")

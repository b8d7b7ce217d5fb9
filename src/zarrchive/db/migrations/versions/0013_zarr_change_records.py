"""Zarr change records: what each applied batch wrote and deleted (manifests without listing)

Revision ID: 0013
Revises: 0012
Create Date: 2026-11-26 07:10:00

New tables only: an existing Zarr's first manifest after this is listed from S3, as before.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0013"
down_revision = "0012"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "zarr_change_sets",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("zarr_id", sa.String(length=36), nullable=False),
        sa.Column("seq", sa.Integer(), nullable=True),
        sa.Column("checksum_before", sa.String(length=80), nullable=False),
        sa.Column("checksum_after", sa.String(length=80), nullable=False),
        sa.Column("embargoed", sa.Boolean(), nullable=False),
        sa.Column("manifest_written", sa.Boolean(), nullable=False),
        sa.Column("applied_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(["zarr_id"], ["zarrs.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id"),
        sqlite_autoincrement=True,
    )
    op.create_index(
        op.f("ix_zarr_change_sets_zarr_id"), "zarr_change_sets", ["zarr_id"], unique=False
    )
    op.create_table(
        "zarr_changed_objects",
        sa.Column("change_set_id", sa.Integer(), nullable=False),
        sa.Column("path", sa.Text(), nullable=False),
        sa.Column("version_id", sa.String(length=200), nullable=True),
        sa.Column("last_modified", sa.DateTime(timezone=True), nullable=True),
        sa.Column("size", sa.BigInteger(), nullable=True),
        sa.Column("etag", sa.String(length=64), nullable=True),
        sa.ForeignKeyConstraint(["change_set_id"], ["zarr_change_sets.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("change_set_id", "path"),
    )


def downgrade() -> None:
    op.drop_table("zarr_changed_objects")
    op.drop_index(op.f("ix_zarr_change_sets_zarr_id"), table_name="zarr_change_sets")
    op.drop_table("zarr_change_sets")

"""LINDI files: one row per HDF5 blob content with its state (pending, ready, failed)

Revision ID: 0012
Revises: 0011
Create Date: 2026-11-26 06:00:00

A new table only: existing blobs get their LINDI file from ``zarrchive lindi backfill``.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0012"
down_revision = "0011"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "lindi_files",
        sa.Column("blob_id", sa.String(length=36), nullable=False),
        sa.Column("state", sa.String(length=16), nullable=False),
        sa.Column("reason", sa.Text(), nullable=True),
        sa.Column("embargoed", sa.Boolean(), nullable=False),
        sa.Column("size", sa.BigInteger(), nullable=True),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("modified_at", sa.DateTime(timezone=True), nullable=False),
        sa.CheckConstraint(
            "state IN ('pending', 'ready', 'failed', 'not-hdf5')", name="ck_lindi_state"
        ),
        sa.ForeignKeyConstraint(["blob_id"], ["blobs.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("blob_id"),
    )


def downgrade() -> None:
    op.drop_table("lindi_files")

"""shared Zarrs: an asset may reference another dandiset's Zarr in a pinned state

Revision ID: 0021
Revises: 0020
Create Date: 2026-11-29 10:00:01

A new table only: ``shared_zarr_assets``, one row per asset whose Zarr belongs to another
dandiset, keyed by the asset's id (no foreign key: the id moves between ``assets`` and
``trashed_assets``), with the state it reads (``mode``, ``checksum``).
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0021"
down_revision = "0020"
branch_labels = None
depends_on = None

#: SharedZarrMode's values when this revision was written (a migration never imports models).
MODES = ("freeze", "snapshot")


def upgrade() -> None:
    op.create_table(
        "shared_zarr_assets",
        sa.Column("asset_id", sa.String(length=36), primary_key=True),
        sa.Column(
            "dandiset_id",
            sa.Integer(),
            sa.ForeignKey("dandisets.id", ondelete="CASCADE"),
            nullable=False,
        ),
        sa.Column(
            "zarr_id",
            sa.String(length=36),
            sa.ForeignKey("zarrs.id", ondelete="CASCADE"),
            nullable=False,
        ),
        sa.Column("mode", sa.String(length=16), nullable=False),
        sa.Column("checksum", sa.String(length=80), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.CheckConstraint(
            "mode IN ({})".format(", ".join(f"'{m}'" for m in MODES)), name="ck_shared_zarr_mode"
        ),
    )
    op.create_index("ix_shared_zarr_assets_dandiset_id", "shared_zarr_assets", ["dandiset_id"])
    op.create_index("ix_shared_zarr_assets_zarr_id", "shared_zarr_assets", ["zarr_id"])


def downgrade() -> None:
    op.drop_index("ix_shared_zarr_assets_zarr_id", table_name="shared_zarr_assets")
    op.drop_index("ix_shared_zarr_assets_dandiset_id", table_name="shared_zarr_assets")
    op.drop_table("shared_zarr_assets")

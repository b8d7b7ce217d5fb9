"""zarr pins: the state of each Zarr a published version holds (freeze or snapshot)

Revision ID: 0006
Revises: 0005
Create Date: 2026-11-24 16:00:00

Every publication older than this revision froze its Zarrs: each published Zarr asset
becomes a frozen pin of the checksum its metadata names (its ``digest``).
"""

from __future__ import annotations

from datetime import UTC, datetime

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    pins = op.create_table(
        "zarr_pins",
        sa.Column("id", sa.Integer(), primary_key=True, autoincrement=True),
        sa.Column(
            "zarr_id",
            sa.String(length=36),
            sa.ForeignKey("zarrs.id", ondelete="CASCADE"),
            nullable=False,
        ),
        sa.Column(
            "version_id",
            sa.Integer(),
            sa.ForeignKey("versions.id", ondelete="CASCADE"),
            nullable=False,
        ),
        sa.Column("checksum", sa.String(length=80), nullable=False),
        sa.Column("frozen", sa.Boolean(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.UniqueConstraint("zarr_id", "version_id", name="uq_pin_per_version"),
    )
    op.create_index("ix_zarr_pins_zarr_id", "zarr_pins", ["zarr_id"])
    bind = op.get_bind()
    rows = bind.execute(
        sa.text(
            "SELECT a.zarr_id, a.version_id, a.metadata, z.checksum FROM assets a "
            "JOIN versions v ON v.id = a.version_id JOIN zarrs z ON z.id = a.zarr_id "
            "WHERE a.zarr_id IS NOT NULL AND v.version != 'draft'"
        )
    ).all()
    now = datetime.now(UTC)
    seen: set[tuple[str, int]] = set()
    values = []
    for zarr_id, version_id, metadata, current in rows:
        if (zarr_id, version_id) in seen:
            continue
        seen.add((zarr_id, version_id))
        if isinstance(metadata, str):
            import json

            metadata = json.loads(metadata)
        digest = ((metadata or {}).get("digest") or {}).get("dandi:dandi-zarr-checksum")
        values.append(
            {
                "zarr_id": zarr_id,
                "version_id": version_id,
                "checksum": digest or current,
                "frozen": True,
                "created_at": now,
            }
        )
    if values:
        op.bulk_insert(pins, values)


def downgrade() -> None:
    op.drop_index("ix_zarr_pins_zarr_id", table_name="zarr_pins")
    op.drop_table("zarr_pins")

"""pinned views: every pin of a Zarr's state names the read-only view of that state

Revision ID: 0023
Revises: 0022
Create Date: 2026-11-29 13:50:00

``zarr_pins.view_id`` (indexed): a UUID (version 5) of ``zarr_id`` and ``checksum``, the same
for every pin of one state, by which ``/api/zarr/{view_id}/`` finds that state (see
``zarrchive.services.zarr_engine.pinned_views``).  A nullable column added, and filled for
the pins that exist: no row of any other table changes.
"""

from __future__ import annotations

import uuid

import sqlalchemy as sa
from alembic import op

revision = "0023"
down_revision = "0022"
branch_labels = None
depends_on = None

#: zarrchive.db.models.PINNED_VIEW_NAMESPACE (a migration never imports models).
NAMESPACE = uuid.UUID("82076220-5e50-41f9-b0aa-0640996b42f2")


def upgrade() -> None:
    op.add_column("zarr_pins", sa.Column("view_id", sa.String(length=36), nullable=True))
    op.create_index("ix_zarr_pins_view_id", "zarr_pins", ["view_id"])
    bind = op.get_bind()
    rows = bind.execute(sa.text("SELECT id, zarr_id, checksum FROM zarr_pins")).all()
    update = sa.text("UPDATE zarr_pins SET view_id = :view_id WHERE id = :id")
    for pin_id, zarr_id, checksum in rows:
        view_id = str(uuid.uuid5(NAMESPACE, f"{zarr_id}:{checksum}"))
        bind.execute(update, {"view_id": view_id, "id": pin_id})


def downgrade() -> None:
    op.drop_index("ix_zarr_pins_view_id", table_name="zarr_pins")
    with op.batch_alter_table("zarr_pins") as batch:
        batch.drop_column("view_id")

"""embargo end dates: a dandiset's embargo end (DANDI's ``embargo_end_date``,
``access[].embargoedUntil``), after which the archive unembargoes it by itself

Revision ID: 0020
Revises: 0019
Create Date: 2026-11-29 10:00:00

One nullable column (``dandisets.embargo_end_date``, a date as DANDI's) and an index on
``blob_uploads.validated_blob_id`` (the blob gc's and the finalize's look-up of the uploads
that recorded a blob, issue #40): nothing existing is rewritten.  Dandisets embargoed before
this migration have no end date: they stay embargoed until an owner unembargoes them.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0020"
down_revision = "0019"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("dandisets", sa.Column("embargo_end_date", sa.Date(), nullable=True))
    op.create_index("ix_blob_uploads_validated_blob_id", "blob_uploads", ["validated_blob_id"])


def downgrade() -> None:
    op.drop_index("ix_blob_uploads_validated_blob_id", table_name="blob_uploads")
    with op.batch_alter_table("dandisets") as batch:
        batch.drop_column("embargo_end_date")

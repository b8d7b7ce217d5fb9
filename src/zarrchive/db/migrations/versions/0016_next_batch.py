"""the uploader's next batch, opened ahead (``open`` with ``after``): ``follows`` names the
open batch it follows; the open batch is then the one ``open`` row that follows none

Revision ID: 0016
Revises: 0015
Create Date: 2026-11-28 22:30:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0016"
down_revision = "0015"
branch_labels = None
depends_on = None

#: ``db.models.OPEN_BATCH_WHERE`` when this revision was written, and before it.
OPEN_BATCH = sa.text("state = 'open' AND follows IS NULL")
OLD_OPEN_BATCH = sa.text("state = 'open'")


def _one_open_batch(where: sa.TextClause) -> None:
    op.create_index(
        "uq_one_open_batch",
        "upload_batches",
        ["zarr_id"],
        unique=True,
        sqlite_where=where,
        postgresql_where=where,
    )


def upgrade() -> None:
    # a plain ADD COLUMN and index changes: no table rebuild (dropping the old table would
    # cascade to the batches' files on SQLite)
    op.add_column("upload_batches", sa.Column("follows", sa.Integer(), nullable=True))
    op.drop_index("uq_one_open_batch", "upload_batches")
    _one_open_batch(OPEN_BATCH)
    where = sa.text("follows IS NOT NULL")
    op.create_index(
        "uq_one_next_batch",
        "upload_batches",
        ["follows"],
        unique=True,
        sqlite_where=where,
        postgresql_where=where,
    )


def downgrade() -> None:
    # the old schema knows no next batch: the batches opened ahead are forgotten (their
    # staging objects are strays that fsck reports)
    op.execute(sa.text("DELETE FROM upload_batches WHERE follows IS NOT NULL"))
    op.drop_index("uq_one_next_batch", "upload_batches")
    op.drop_index("uq_one_open_batch", "upload_batches")
    _one_open_batch(OLD_OPEN_BATCH)
    op.drop_column("upload_batches", "follows")

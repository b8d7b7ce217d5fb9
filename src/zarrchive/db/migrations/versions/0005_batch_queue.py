"""batch queue: one open batch per Zarr (partial unique index) plus verified batches queued
in order (seq) and claimed by an applier (claimed_by, claimed_until)

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-24 15:40:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None

#: ``db.models.BatchKind``/``BatchState``'s values when this revision was written.
KIND_CHECK = "kind IN ('upload', 'delete')"
STATE_CHECK = "state IN ('open', 'queued', 'applying')"
OLD_STATE_CHECK = "state IN ('open', 'applying')"
OPEN_ONLY = sa.text("state = 'open'")


def _batch_columns() -> list[sa.schema.SchemaItem]:
    return [
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("uid", sa.String(length=32), nullable=False),
        sa.Column("zarr_id", sa.String(length=36), nullable=False),
        sa.Column("kind", sa.String(length=16), nullable=False),
        sa.Column("state", sa.String(length=16), nullable=False),
        sa.Column("seq", sa.Integer(), nullable=True),
        sa.Column("claimed_by", sa.String(length=32), nullable=True),
        sa.Column("claimed_until", sa.DateTime(timezone=True), nullable=True),
        sa.Column("created_by", sa.Integer(), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(["created_by"], ["users.id"]),
        sa.ForeignKeyConstraint(["zarr_id"], ["zarrs.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("uid"),
        sa.UniqueConstraint("zarr_id", "seq", name="uq_batch_seq"),
        sa.CheckConstraint(KIND_CHECK, name="ck_batch_kind"),
        sa.CheckConstraint(STATE_CHECK, name="ck_batch_state"),
    ]


def _indexes() -> None:
    op.create_index("ix_upload_batches_zarr_id", "upload_batches", ["zarr_id"])
    op.create_index(
        "uq_one_open_batch",
        "upload_batches",
        ["zarr_id"],
        unique=True,
        sqlite_where=OPEN_ONLY,
        postgresql_where=OPEN_ONLY,
    )


def upgrade() -> None:
    bind = op.get_bind()
    if bind.dialect.name == "sqlite":
        # SQLite can't drop the unnamed UNIQUE(zarr_id): rebuild both tables, keeping every
        # batch (an ``applying`` one becomes the first of its Zarr's queue, unclaimed).
        op.rename_table("upload_batch_files", "_old_upload_batch_files")
        op.rename_table("upload_batches", "_old_upload_batches")
        op.create_table("upload_batches", *_batch_columns(), sqlite_autoincrement=True)
        op.create_table(
            "upload_batch_files",
            sa.Column("batch_id", sa.Integer(), nullable=False),
            sa.Column("path", sa.Text(), nullable=False),
            sa.Column("etag", sa.String(length=32), nullable=True),
            sa.Column("size", sa.BigInteger(), nullable=True),
            sa.Column("staged_version", sa.String(length=200), nullable=True),
            sa.ForeignKeyConstraint(["batch_id"], ["upload_batches.id"], ondelete="CASCADE"),
            sa.PrimaryKeyConstraint("batch_id", "path"),
        )
        bind.execute(
            sa.text(
                "INSERT INTO upload_batches (id, uid, zarr_id, kind, state, seq, created_by, "
                "created_at) SELECT id, uid, zarr_id, kind, state, "
                "CASE WHEN state = 'applying' THEN 1 ELSE NULL END, created_by, created_at "
                "FROM _old_upload_batches"
            )
        )
        bind.execute(
            sa.text(
                "INSERT INTO upload_batch_files (batch_id, path, etag, size, staged_version) "
                "SELECT batch_id, path, etag, size, staged_version FROM _old_upload_batch_files"
            )
        )
        op.drop_table("_old_upload_batch_files")
        op.drop_table("_old_upload_batches")
        _indexes()
        return
    op.drop_constraint("upload_batches_zarr_id_key", "upload_batches", type_="unique")
    op.drop_constraint("ck_batch_state", "upload_batches", type_="check")
    op.create_check_constraint("ck_batch_state", "upload_batches", STATE_CHECK)
    op.add_column("upload_batches", sa.Column("seq", sa.Integer(), nullable=True))
    op.add_column("upload_batches", sa.Column("claimed_by", sa.String(length=32), nullable=True))
    op.add_column(
        "upload_batches", sa.Column("claimed_until", sa.DateTime(timezone=True), nullable=True)
    )
    bind.execute(sa.text("UPDATE upload_batches SET seq = 1 WHERE state = 'applying'"))
    op.create_unique_constraint("uq_batch_seq", "upload_batches", ["zarr_id", "seq"])
    _indexes()


def downgrade() -> None:
    bind = op.get_bind()
    # the old schema holds one batch per Zarr: keep the first of each Zarr's queue
    bind.execute(
        sa.text(
            "DELETE FROM upload_batches WHERE id NOT IN "
            "(SELECT MIN(id) FROM upload_batches GROUP BY zarr_id)"
        )
    )
    bind.execute(sa.text("UPDATE upload_batches SET state = 'applying' WHERE state = 'queued'"))
    op.drop_index("uq_one_open_batch", "upload_batches")
    op.drop_index("ix_upload_batches_zarr_id", "upload_batches")
    with op.batch_alter_table("upload_batches") as batch:
        batch.drop_constraint("uq_batch_seq", type_="unique")
        batch.drop_constraint("ck_batch_state", type_="check")
        batch.create_check_constraint("ck_batch_state", OLD_STATE_CHECK)
        batch.drop_column("claimed_until")
        batch.drop_column("claimed_by")
        batch.drop_column("seq")
        batch.create_unique_constraint("upload_batches_zarr_id_key", ["zarr_id"])

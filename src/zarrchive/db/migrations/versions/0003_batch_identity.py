"""batch identity: a uid unique forever, staged versions, no id reuse on SQLite

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-22 15:30:00
"""

from __future__ import annotations

import uuid

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None

#: The batch states as CHECK constraints (the values of ``db.models.BatchKind``/``BatchState``
#: when this revision was written: a migration never imports the models).
KIND_CHECK = "kind IN ('upload', 'delete')"
STATE_CHECK = "state IN ('open', 'applying')"


def _batch_columns() -> list[sa.schema.SchemaItem]:
    return [
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("uid", sa.String(length=32), nullable=False),
        sa.Column("zarr_id", sa.String(length=36), nullable=False),
        sa.Column("kind", sa.String(length=16), nullable=False),
        sa.Column("state", sa.String(length=16), nullable=False),
        sa.Column("created_by", sa.Integer(), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(["created_by"], ["users.id"]),
        sa.ForeignKeyConstraint(["zarr_id"], ["zarrs.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("zarr_id"),
        sa.UniqueConstraint("uid"),
        sa.CheckConstraint(KIND_CHECK, name="ck_batch_kind"),
        sa.CheckConstraint(STATE_CHECK, name="ck_batch_state"),
    ]


def _file_columns() -> list[sa.schema.SchemaItem]:
    return [
        sa.Column("batch_id", sa.Integer(), nullable=False),
        sa.Column("path", sa.Text(), nullable=False),
        sa.Column("etag", sa.String(length=32), nullable=True),
        sa.Column("size", sa.BigInteger(), nullable=True),
        sa.Column("staged_version", sa.String(length=200), nullable=True),
        sa.ForeignKeyConstraint(["batch_id"], ["upload_batches.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("batch_id", "path"),
    ]


def upgrade() -> None:
    bind = op.get_bind()
    if bind.dialect.name == "sqlite":
        # SQLite can't add AUTOINCREMENT to a table: rebuild both tables, keeping open batches.
        # Renaming first makes SQLite repoint the files' foreign key at the old table, so
        # dropping the old tables never cascades into the new ones.
        op.rename_table("upload_batch_files", "_old_upload_batch_files")
        op.rename_table("upload_batches", "_old_upload_batches")
        op.create_table("upload_batches", *_batch_columns(), sqlite_autoincrement=True)
        op.create_table("upload_batch_files", *_file_columns())
        rows = bind.execute(
            sa.text(
                "SELECT id, zarr_id, kind, state, created_by, created_at FROM _old_upload_batches"
            )
        ).all()
        for row in rows:
            bind.execute(
                sa.text(
                    "INSERT INTO upload_batches (id, uid, zarr_id, kind, state, created_by, "
                    "created_at) VALUES (:id, :uid, :zarr_id, :kind, :state, :created_by, "
                    ":created_at)"
                ),
                {**row._asdict(), "uid": uuid.uuid4().hex},
            )
        bind.execute(
            sa.text(
                "INSERT INTO upload_batch_files (batch_id, path, etag, size) "
                "SELECT batch_id, path, etag, size FROM _old_upload_batch_files"
            )
        )
        op.drop_table("_old_upload_batch_files")
        op.drop_table("_old_upload_batches")
        return
    op.add_column("upload_batches", sa.Column("uid", sa.String(length=32), nullable=True))
    for (batch_id,) in bind.execute(sa.text("SELECT id FROM upload_batches")).all():
        bind.execute(
            sa.text("UPDATE upload_batches SET uid = :uid WHERE id = :id"),
            {"uid": uuid.uuid4().hex, "id": batch_id},
        )
    op.alter_column("upload_batches", "uid", nullable=False)
    op.create_unique_constraint("upload_batches_uid_key", "upload_batches", ["uid"])
    op.create_check_constraint("ck_batch_kind", "upload_batches", KIND_CHECK)
    op.create_check_constraint("ck_batch_state", "upload_batches", STATE_CHECK)
    op.add_column(
        "upload_batch_files",
        sa.Column("staged_version", sa.String(length=200), nullable=True),
    )


def downgrade() -> None:
    with op.batch_alter_table("upload_batch_files") as batch:
        batch.drop_column("staged_version")
    with op.batch_alter_table("upload_batches") as batch:
        batch.drop_constraint("ck_batch_state", type_="check")
        batch.drop_constraint("ck_batch_kind", type_="check")
        batch.drop_constraint("upload_batches_uid_key", type_="unique")
        batch.drop_column("uid")

"""the directories of verified upload batches not applied yet, and an index on the batches'
file paths: ``open``'s file/directory clash check looks paths up by equality

Revision ID: 0014
Revises: 0013
Create Date: 2026-11-26 10:00:00

The directories of the batches already queued are filled in from their files.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0014"
down_revision = "0013"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_index("ix_upload_batch_files_path", "upload_batch_files", ["path"])
    directories = op.create_table(
        "upload_batch_directories",
        sa.Column("path", sa.Text(), nullable=False),
        sa.Column("batch_id", sa.Integer(), nullable=False),
        sa.ForeignKeyConstraint(["batch_id"], ["upload_batches.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("path", "batch_id"),
    )
    op.create_index(
        "ix_upload_batch_directories_batch_id", "upload_batch_directories", ["batch_id"]
    )
    rows = op.get_bind().execute(
        sa.text(
            "SELECT f.batch_id, f.path FROM upload_batch_files f "
            "JOIN upload_batches b ON b.id = f.batch_id "
            "WHERE b.kind = 'upload' AND b.state IN ('queued', 'applying')"
        )
    )
    found: set[tuple[int, str]] = set()
    for batch_id, path in rows:
        parts = str(path).split("/")[:-1]
        found.update((batch_id, "/".join(parts[:i])) for i in range(1, len(parts) + 1))
    if found:
        op.bulk_insert(directories, [{"batch_id": b, "path": p} for b, p in sorted(found)])


def downgrade() -> None:
    op.drop_index("ix_upload_batch_directories_batch_id", table_name="upload_batch_directories")
    op.drop_table("upload_batch_directories")
    op.drop_index("ix_upload_batch_files_path", table_name="upload_batch_files")

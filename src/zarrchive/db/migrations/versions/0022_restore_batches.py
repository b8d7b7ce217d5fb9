"""restore batches: ``upload_batches.kind`` may be ``restore`` (files copied back from the
versions of the Zarr's own objects an earlier manifest records: a rollback)

Revision ID: 0022
Revises: 0021
Create Date: 2026-11-29 10:40:00

Only the check constraint of ``kind`` changes: no row is rewritten.
"""

from __future__ import annotations

from alembic import op

revision = "0022"
down_revision = "0021"
branch_labels = None
depends_on = None

OLD = "kind IN ('upload', 'delete')"
NEW = "kind IN ('upload', 'delete', 'restore')"


def _check(condition: str) -> None:
    # SQLite rebuilds the table: it keeps AUTOINCREMENT (a batch's id is never reused) only
    # when told
    with op.batch_alter_table(
        "upload_batches", table_kwargs={"sqlite_autoincrement": True}
    ) as batch:
        batch.drop_constraint("ck_batch_kind", type_="check")
        batch.create_check_constraint("ck_batch_kind", condition)


def upgrade() -> None:
    _check(NEW)


def downgrade() -> None:
    op.execute("DELETE FROM upload_batches WHERE kind = 'restore'")
    _check(OLD)

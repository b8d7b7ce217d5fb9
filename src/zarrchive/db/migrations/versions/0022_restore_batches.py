"""restore batches: ``upload_batches.kind`` may be ``restore`` (files copied back from the
versions of the Zarr's own objects an earlier manifest records: a rollback)

Revision ID: 0022
Revises: 0021
Create Date: 2026-11-29 10:40:00

Only the check constraint of ``kind`` changes, and it only admits more: no row is
rewritten.  SQLite can't alter a constraint, and rebuilding ``upload_batches`` would cascade
to its files (``ON DELETE CASCADE``): the table's definition is edited in place instead, by
SQLite's documented procedure for a change that leaves the stored data valid (ALTER TABLE,
"Making Other Kinds Of Table Schema Changes": ``writable_schema``, then a new
``schema_version``).
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0022"
down_revision = "0021"
branch_labels = None
depends_on = None

NAME = "ck_batch_kind"
OLD = "kind IN ('upload', 'delete')"
NEW = "kind IN ('upload', 'delete', 'restore')"


def _sqlite_check(before: str, after: str) -> None:
    bind = op.get_bind()
    sql = bind.execute(
        sa.text("SELECT sql FROM sqlite_master WHERE type = 'table' AND name = 'upload_batches'")
    ).scalar_one()
    old = f"CONSTRAINT {NAME} CHECK ({before})"
    if old not in sql:
        raise RuntimeError(f"upload_batches has no {old!r}: {sql}")
    version = bind.execute(sa.text("PRAGMA schema_version")).scalar_one()
    bind.execute(sa.text("PRAGMA writable_schema = ON"))
    bind.execute(
        sa.text(
            "UPDATE sqlite_master SET sql = :sql WHERE type = 'table' AND name = 'upload_batches'"
        ),
        {"sql": sql.replace(old, f"CONSTRAINT {NAME} CHECK ({after})")},
    )
    bind.execute(sa.text(f"PRAGMA schema_version = {int(version) + 1}"))
    bind.execute(sa.text("PRAGMA writable_schema = OFF"))


def _check(before: str, after: str) -> None:
    if op.get_bind().dialect.name == "sqlite":
        _sqlite_check(before, after)
        return
    op.drop_constraint(NAME, "upload_batches", type_="check")
    op.create_check_constraint(NAME, "upload_batches", after)


def upgrade() -> None:
    _check(OLD, NEW)


def downgrade() -> None:
    op.execute("DELETE FROM upload_batches WHERE kind = 'restore'")
    _check(NEW, OLD)

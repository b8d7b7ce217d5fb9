"""metadata validation (versions' and assets' status and errors, blobs' sha256), audit trail

Revision ID: 0010
Revises: 0009
Create Date: 2026-11-26 02:40:00

Drafts and draft assets start ``Pending`` (the archive validates them in the background on
their next change, or when their status is asked for); published versions and their
assets are ``Valid``: they were published as they are.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None


def upgrade() -> None:
    for table in ("versions", "assets"):
        with op.batch_alter_table(table) as batch:
            batch.add_column(
                sa.Column("status", sa.String(length=16), nullable=False, server_default="Pending")
            )
            batch.add_column(sa.Column("validation_errors", sa.JSON(), nullable=True))
            batch.add_column(sa.Column("validated", sa.String(length=64), nullable=True))
    op.execute("UPDATE versions SET status = 'Valid' WHERE version <> 'draft'")
    op.execute(
        "UPDATE assets SET status = 'Valid' WHERE version_id IN "
        "(SELECT id FROM versions WHERE version <> 'draft')"
    )
    with op.batch_alter_table("blobs") as batch:
        batch.add_column(sa.Column("sha256", sa.String(length=64), nullable=True))
    op.create_table(
        "audit_records",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("timestamp", sa.DateTime(timezone=True), nullable=False),
        sa.Column("dandiset_id", sa.Integer(), nullable=False),
        sa.Column("username", sa.String(length=150), nullable=False),
        sa.Column("user_email", sa.String(length=254), nullable=False),
        sa.Column("user_fullname", sa.String(length=300), nullable=False),
        sa.Column("admin", sa.Boolean(), nullable=False),
        sa.Column("record_type", sa.String(length=32), nullable=False),
        sa.Column("details", sa.JSON(), nullable=False),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index("ix_audit_dandiset_time", "audit_records", ["dandiset_id", "timestamp", "id"])


def downgrade() -> None:
    op.drop_index("ix_audit_dandiset_time", table_name="audit_records")
    op.drop_table("audit_records")
    with op.batch_alter_table("blobs") as batch:
        batch.drop_column("sha256")
    for table in ("assets", "versions"):
        with op.batch_alter_table(table) as batch:
            batch.drop_column("validated")
            batch.drop_column("validation_errors")
            batch.drop_column("status")

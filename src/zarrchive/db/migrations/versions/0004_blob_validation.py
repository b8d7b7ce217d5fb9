"""blob uploads: background validation state

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-22 15:45:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


#: ``db.models.BlobValidation``'s values when this revision was written.
VALIDATION_CHECK = "validation IN ('validating', 'valid', 'failed') OR validation IS NULL"


def upgrade() -> None:
    # batch mode: SQLite can't add a CHECK constraint in place (it rebuilds the table)
    with op.batch_alter_table("blob_uploads") as batch:
        batch.add_column(sa.Column("validation", sa.String(length=16), nullable=True))
        batch.add_column(sa.Column("validation_error", sa.Text(), nullable=True))
        batch.add_column(sa.Column("validated_blob_id", sa.String(length=36), nullable=True))
        batch.create_check_constraint("ck_blob_validation", VALIDATION_CHECK)


def downgrade() -> None:
    with op.batch_alter_table("blob_uploads") as batch:
        batch.drop_constraint("ck_blob_validation", type_="check")
        batch.drop_column("validated_blob_id")
        batch.drop_column("validation_error")
        batch.drop_column("validation")

"""blobs carry DANDI's dandi-etag (dedup key of DANDI's uploads); md5 becomes optional

Revision ID: 0007
Revises: 0006
Create Date: 2026-11-24 19:00:00

Blobs uploaded by DANDI's flow are known by their ``dandi:dandi-etag`` (S3 computes it while
assembling the parts); their md5 is unknown.  Existing blobs of one part (up to 64 MiB) get
their etag from their md5 (``md5(md5)-1``); larger ones keep none (``NULL``) until uploaded
again.
"""

from __future__ import annotations

import hashlib

import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None

_ONE_PART = 64 * 1024**2


def _etag(md5: str, size: int) -> str | None:
    if size == 0:
        return hashlib.md5(b"").hexdigest() + "-0"
    if size <= _ONE_PART:
        return hashlib.md5(bytes.fromhex(md5)).hexdigest() + "-1"
    return None


def upgrade() -> None:
    with op.batch_alter_table("blobs") as batch:
        batch.add_column(sa.Column("etag", sa.String(length=40), nullable=True))
        batch.alter_column("md5", existing_type=sa.String(length=32), nullable=True)
        batch.create_unique_constraint("uq_blob_etag", ["etag", "embargoed"])
    with op.batch_alter_table("blob_uploads") as batch:
        batch.add_column(sa.Column("etag", sa.String(length=40), nullable=True))
        batch.alter_column("md5", existing_type=sa.String(length=32), nullable=True)
    blobs = sa.table(
        "blobs",
        sa.column("id", sa.String),
        sa.column("md5", sa.String),
        sa.column("size", sa.BigInteger),
        sa.column("etag", sa.String),
    )
    connection = op.get_bind()
    rows = connection.execute(sa.select(blobs.c.id, blobs.c.md5, blobs.c.size)).all()
    for blob_id, md5, size in rows:
        etag = _etag(md5, size) if md5 else None
        if etag is not None:
            connection.execute(blobs.update().where(blobs.c.id == blob_id).values(etag=etag))


def downgrade() -> None:
    connection = op.get_bind()
    connection.execute(sa.text("DELETE FROM blob_uploads WHERE md5 IS NULL"))
    with op.batch_alter_table("blob_uploads") as batch:
        batch.alter_column("md5", existing_type=sa.String(length=32), nullable=False)
        batch.drop_column("etag")
    with op.batch_alter_table("blobs") as batch:
        batch.drop_constraint("uq_blob_etag", type_="unique")
        batch.alter_column("md5", existing_type=sa.String(length=32), nullable=False)
        batch.drop_column("etag")

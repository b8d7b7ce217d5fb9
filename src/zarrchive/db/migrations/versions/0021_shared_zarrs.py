"""shared Zarrs: an asset may reference another dandiset's Zarr in a pinned state

Revision ID: 0021
Revises: 0020
Create Date: 2026-11-29 10:00:01
"""

from __future__ import annotations

revision = "0021"
down_revision = "0020"
branch_labels = None
depends_on = None


def upgrade() -> None:
    pass


def downgrade() -> None:
    pass

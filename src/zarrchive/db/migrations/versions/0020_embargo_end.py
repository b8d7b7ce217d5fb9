"""embargo end dates: a dandiset's embargo end (DANDI's ``embargo_end_date``,
``access[].embargoedUntil``), after which the archive unembargoes it by itself

Revision ID: 0020
Revises: 0019
Create Date: 2026-11-29 10:00:00
"""

from __future__ import annotations

revision = "0020"
down_revision = "0019"
branch_labels = None
depends_on = None


def upgrade() -> None:
    pass


def downgrade() -> None:
    pass

"""dois: the DOIs of dandisets and of their published versions, and where each is at DataCite

Revision ID: 0018
Revises: 0017
Create Date: 2026-11-29 08:00:00

A new table only.  The dandiset is named by its identifier, without a foreign key: the
record of a deleted dandiset's DOI (deleted or hidden at DataCite) stays.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0018"
down_revision = "0017"
branch_labels = None
depends_on = None

#: DoiState's and DoiGoal's values when this revision was written (a migration never
#: imports models).
STATES = ("pending", "draft", "registered", "findable", "deleted")
GOALS = ("draft", "findable", "gone")


def _check(column: str, values: tuple[str, ...]) -> str:
    return "{} IN ({})".format(column, ", ".join(f"'{v}'" for v in values))


def upgrade() -> None:
    op.create_table(
        "dois",
        sa.Column("doi", sa.String(length=300), primary_key=True),
        sa.Column("dandiset", sa.String(length=32), nullable=False),
        sa.Column("version", sa.String(length=32), nullable=True),
        sa.Column("state", sa.String(length=16), nullable=False),
        sa.Column("goal", sa.String(length=16), nullable=False),
        sa.Column("last_error", sa.Text(), nullable=True),
        sa.Column("refused_status", sa.Integer(), nullable=True),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.CheckConstraint(_check("state", STATES), name="ck_doi_state"),
        sa.CheckConstraint(_check("goal", GOALS), name="ck_doi_goal"),
    )
    op.create_index("ix_dois_dandiset", "dois", ["dandiset"])


def downgrade() -> None:
    op.drop_index("ix_dois_dandiset", table_name="dois")
    op.drop_table("dois")

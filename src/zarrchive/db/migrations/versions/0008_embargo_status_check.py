"""dandisets.embargo_status holds one of EmbargoStatus's values, checked by the database

Revision ID: 0008
Revises: 0007
Create Date: 2026-11-24 22:00:00

PostgreSQL gets a CHECK constraint.  SQLite can add a CHECK only by rebuilding the table, and
rebuilding ``dandisets`` (which six tables reference with ``ON DELETE CASCADE``) drops the old
table, which deletes what references it while foreign keys are enforced.  On SQLite the same
rule is therefore two triggers that abort an insert or update with any other value, under the
constraint's name.
"""

from __future__ import annotations

from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None

NAME = "ck_dandiset_embargo_status"
#: EmbargoStatus's values when this revision was written (a migration never imports models).
VALUES = ("embargoed", "unembargoing", "open")
CHECK = "embargo_status IN ({})".format(", ".join(f"'{v}'" for v in VALUES))


def _sqlite_trigger(event: str) -> str:
    new_check = CHECK.replace("embargo_status", "NEW.embargo_status")
    return (
        f"CREATE TRIGGER {NAME}_{event.split()[0].lower()} BEFORE {event} ON dandisets "
        f"WHEN NOT ({new_check}) BEGIN SELECT RAISE(ABORT, '{NAME}'); END"
    )


def upgrade() -> None:
    bind = op.get_bind()
    if bind.dialect.name == "sqlite":
        op.execute(_sqlite_trigger("INSERT"))
        op.execute(_sqlite_trigger("UPDATE OF embargo_status"))
    else:
        op.create_check_constraint(NAME, "dandisets", CHECK)


def downgrade() -> None:
    bind = op.get_bind()
    if bind.dialect.name == "sqlite":
        op.execute(f"DROP TRIGGER IF EXISTS {NAME}_insert")
        op.execute(f"DROP TRIGGER IF EXISTS {NAME}_update")
    else:
        op.drop_constraint(NAME, "dandisets", type_="check")

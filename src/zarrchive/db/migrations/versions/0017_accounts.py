"""accounts: approval statuses, names and e-mails of users, identities at OpenID Connect
providers, named API keys with a scope, an expiry and a revocation, reviewers of dandisets

Revision ID: 0017
Revises: 0016
Create Date: 2026-11-29 06:30:00

Existing users are approved and their keys are write keys named "default" (the new
columns' server defaults fill them in).  Only plain ``ADD COLUMN``s and new tables: on
SQLite a batch rebuild of ``users`` would drop the table that half the schema references
with ``ON DELETE CASCADE``; so the two new CHECK rules are triggers there, as in 0008.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0017"
down_revision = "0016"
branch_labels = None
depends_on = None

#: AccountStatus's and TokenScope's values when this revision was written (a migration
#: never imports models): (table, column, constraint name, values).
CHECKS = (
    ("users", "status", "ck_user_status", ("INCOMPLETE", "PENDING", "APPROVED", "REJECTED")),
    ("api_tokens", "scope", "ck_api_token_scope", ("read", "write")),
)


def _check(column: str, values: tuple[str, ...], prefix: str = "") -> str:
    return "{}{} IN ({})".format(prefix, column, ", ".join(f"'{v}'" for v in values))


def _sqlite_triggers(table: str, column: str, name: str, values: tuple[str, ...]) -> None:
    check = _check(column, values, prefix="NEW.")
    for event, suffix in (("INSERT", "insert"), (f"UPDATE OF {column}", "update")):
        op.execute(
            f"CREATE TRIGGER {name}_{suffix} BEFORE {event} ON {table} "
            f"WHEN NOT ({check}) BEGIN SELECT RAISE(ABORT, '{name}'); END"
        )


def upgrade() -> None:
    op.add_column(
        "users",
        sa.Column("status", sa.String(length=16), nullable=False, server_default="APPROVED"),
    )
    op.add_column("users", sa.Column("name", sa.String(length=300), nullable=True))
    op.add_column("users", sa.Column("email", sa.String(length=320), nullable=True))
    op.add_column(
        "api_tokens",
        sa.Column("name", sa.String(length=100), nullable=False, server_default="default"),
    )
    op.add_column(
        "api_tokens",
        sa.Column("scope", sa.String(length=8), nullable=False, server_default="write"),
    )
    for column in ("expires_at", "last_used_at", "revoked_at"):
        op.add_column("api_tokens", sa.Column(column, sa.DateTime(timezone=True), nullable=True))
    if op.get_bind().dialect.name == "sqlite":
        for table, column, name, values in CHECKS:
            _sqlite_triggers(table, column, name, values)
    else:
        for table, column, name, values in CHECKS:
            op.create_check_constraint(name, table, _check(column, values))
    op.create_table(
        "user_identities",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("user_id", sa.Integer(), nullable=False),
        sa.Column("issuer", sa.String(length=500), nullable=False),
        sa.Column("subject", sa.String(length=255), nullable=False),
        sa.Column("email_verified", sa.Boolean(), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(["user_id"], ["users.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("issuer", "subject", name="uq_identity_issuer_subject"),
    )
    op.create_index("ix_user_identities_user_id", "user_identities", ["user_id"], unique=False)
    op.create_table(
        "dandiset_reviewers",
        sa.Column("dandiset_id", sa.Integer(), nullable=False),
        sa.Column("user_id", sa.Integer(), nullable=False),
        sa.ForeignKeyConstraint(["dandiset_id"], ["dandisets.id"], ondelete="CASCADE"),
        sa.ForeignKeyConstraint(["user_id"], ["users.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("dandiset_id", "user_id"),
    )


def downgrade() -> None:
    # what the old schema can't say is lost: reviewers, identities, keys' names.  Every key
    # or session it would make more powerful is deleted: revoked keys, keys with a scope or
    # an expiry it can't enforce, and the keys and sessions of accounts not approved.
    op.execute(
        sa.text(
            "DELETE FROM api_tokens WHERE revoked_at IS NOT NULL OR expires_at IS NOT NULL "
            "OR scope <> 'write' OR user_id IN (SELECT id FROM users WHERE status <> 'APPROVED')"
        )
    )
    op.execute(
        sa.text(
            "DELETE FROM web_sessions "
            "WHERE user_id IN (SELECT id FROM users WHERE status <> 'APPROVED')"
        )
    )
    op.drop_table("dandiset_reviewers")
    op.drop_index("ix_user_identities_user_id", table_name="user_identities")
    op.drop_table("user_identities")
    if op.get_bind().dialect.name == "sqlite":
        for _table, _column, name, _values in CHECKS:
            op.execute(f"DROP TRIGGER IF EXISTS {name}_insert")
            op.execute(f"DROP TRIGGER IF EXISTS {name}_update")
    else:
        for table, _column, name, _values in CHECKS:
            op.drop_constraint(name, table, type_="check")
    for column in ("revoked_at", "last_used_at", "expires_at", "scope", "name"):
        op.drop_column("api_tokens", column)  # SQLite >= 3.35 drops in place
    for column in ("email", "name", "status"):
        op.drop_column("users", column)

"""metadata validation (versions' and assets' status and errors, blobs' sha256), audit trail,
full-text search index

Revision ID: 0010
Revises: 0009
Create Date: 2026-11-26 02:40:00

Drafts and draft assets start ``Pending`` (the archive validates them in the background on
their next change, or when their status is asked for); published versions and their
assets are ``Valid``: they were published as they are.

The search index (:mod:`zarrchive.services.dandi.search`) is the database's own kind: on
PostgreSQL ``tsvector`` tables with GIN indexes, on SQLite FTS5 virtual tables; it is
filled from the existing drafts here, by the word rules of this revision, frozen below (a
migration never imports live service code: what it writes must not change when the
services do).
"""

from __future__ import annotations

import json
import re
from typing import Any

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

    _create_search_index()


# The search index's word rules as of this revision (services.dandi.search at 0010).
_MAX_FIELD = 100_000
_MAX_WORD = 200
_MAX_PATH_WORDS = 64
_WORD = re.compile(r"\w+", re.UNICODE)


def _words(value: str) -> list[str]:
    return [w for w in _WORD.findall(value.lower().replace("_", " ")) if w]


def _text(value: Any) -> str:
    return " ".join(_words(value if isinstance(value, str) else ""))[:_MAX_FIELD]


def _document(metadata: dict[str, Any], name: str) -> tuple[str, str, str]:
    """``(name, description and keywords, contributors' names)`` of a draft's metadata."""
    keywords = metadata.get("keywords")
    listed = (
        " ".join(k for k in keywords if isinstance(k, str)) if isinstance(keywords, list) else ""
    )
    contributors = metadata.get("contributor")
    names = (
        " ".join(
            str(c.get("name"))
            for c in contributors
            if isinstance(c, dict) and isinstance(c.get("name"), str)
        )
        if isinstance(contributors, list)
        else ""
    )
    description = f"{_text(metadata.get('description'))} {_text(listed)}".strip()
    return _text(name), description, _text(names)


def _path_words(path: str) -> list[str]:
    return sorted({w[:_MAX_WORD] for w in _words(path)})[:_MAX_PATH_WORDS]


def _index_assets(bind: sa.Connection, rows: list[tuple[int, str, str]]) -> None:
    """The draft assets ``(dandiset id, asset id, path)`` into the path index, counted."""
    if not rows:
        return
    bind.execute(
        sa.text("INSERT INTO search_assets (asset_id, dandiset_id, words) VALUES (:a, :d, :w)"),
        [{"a": a, "d": d, "w": " ".join(_path_words(p))} for d, a, p in rows],
    )
    counts: dict[tuple[str, int], int] = {}
    for d, _a, p in rows:
        for w in _path_words(p):
            counts[(w, d)] = counts.get((w, d), 0) + 1
    bind.execute(
        sa.text(
            "INSERT INTO search_path_words (word, dandiset_id, uses) VALUES (:w, :d, :n) "
            "ON CONFLICT (word, dandiset_id) DO UPDATE SET uses = search_path_words.uses + :n"
        ),
        [{"w": w, "d": d, "n": n} for (w, d), n in counts.items()],
    )


def _create_search_index() -> None:
    bind = op.get_bind()
    postgres = bind.dialect.name == "postgresql"
    if postgres:
        op.execute(
            "CREATE TABLE search_dandisets (dandiset_id INTEGER PRIMARY KEY, "
            "document TSVECTOR NOT NULL)"
        )
        op.execute("CREATE INDEX ix_search_dandisets ON search_dandisets USING GIN (document)")
    else:
        op.execute(
            "CREATE VIRTUAL TABLE search_dandisets USING fts5(name, description, contributors)"
        )
    # the words of the draft assets' paths: each asset's, and their counts per dandiset
    op.execute(
        "CREATE TABLE search_assets (asset_id VARCHAR(36) PRIMARY KEY, "
        "dandiset_id INTEGER NOT NULL, words TEXT NOT NULL)"
    )
    op.execute("CREATE INDEX ix_search_assets_dandiset ON search_assets (dandiset_id)")
    op.execute(
        "CREATE TABLE search_path_words (word VARCHAR(200) NOT NULL, dandiset_id INTEGER "
        "NOT NULL, uses INTEGER NOT NULL, PRIMARY KEY (word, dandiset_id))"
    )
    op.execute("CREATE INDEX ix_search_path_words_dandiset ON search_path_words (dandiset_id)")
    drafts = bind.execute(
        sa.text(
            "SELECT d.id, d.name, v.id, v.metadata FROM dandisets d "
            "JOIN versions v ON v.dandiset_id = d.id AND v.version = 'draft'"
        )
    ).all()
    for dandiset_id, name, version_id, metadata in drafts:
        if isinstance(metadata, str):
            metadata = json.loads(metadata)
        title, description, contributors = _document(metadata or {}, name)
        values = {"id": dandiset_id, "n": title, "d": description, "c": contributors}
        if postgres:
            bind.execute(
                sa.text(
                    "INSERT INTO search_dandisets VALUES (:id, "
                    "setweight(to_tsvector('simple', :n), 'A') || "
                    "setweight(to_tsvector('simple', :d), 'B') || "
                    "setweight(to_tsvector('simple', :c), 'C'))"
                ),
                values,
            )
        else:
            bind.execute(
                sa.text(
                    "INSERT INTO search_dandisets (rowid, name, description, contributors) "
                    "VALUES (:id, :n, :d, :c)"
                ),
                values,
            )
        assets = bind.execute(
            sa.text("SELECT id, path FROM assets WHERE version_id = :v"), {"v": version_id}
        ).all()
        _index_assets(bind, [(dandiset_id, a, p) for a, p in assets])


def downgrade() -> None:
    op.execute("DROP TABLE search_path_words")
    op.execute("DROP TABLE search_assets")
    op.execute("DROP TABLE search_dandisets")
    op.drop_index("ix_audit_dandiset_time", table_name="audit_records")
    op.drop_table("audit_records")
    with op.batch_alter_table("blobs") as batch:
        batch.drop_column("sha256")
    for table in ("assets", "versions"):
        with op.batch_alter_table(table) as batch:
            batch.drop_column("validated")
            batch.drop_column("validation_errors")
            batch.drop_column("status")

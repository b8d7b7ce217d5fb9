"""A migration freezes what it needs (#40): it imports no live code of the archive, so what it
writes to an old database never changes when the services change."""

from __future__ import annotations

import ast
import json
from pathlib import Path

from sqlalchemy import text
from sqlalchemy.orm import Session

import zarrchive
from tests.helpers.databases import from_scratch
from zarrchive.db.migrate import upgrade
from zarrchive.db.session import Database
from zarrchive.services.dandi.search import matches

VERSIONS = Path(zarrchive.__file__).parent / "db" / "migrations" / "versions"


def test_no_migration_imports_the_archive_s_code() -> None:
    found = []
    for path in sorted(VERSIONS.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            names: list[str] = []
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module]
            found += [f"{path.name}: {n}" for n in names if n.split(".")[0] == "zarrchive"]
    assert len(list(VERSIONS.glob("*.py"))) >= 21
    assert found == []


def test_0010_indexes_the_drafts_it_finds(database_url: str) -> None:
    """Upgrading through 0010 fills the search index from the drafts already there, by its
    frozen word rules: the name, the description's words, a contributor, an asset's path."""
    db = Database(database_url)
    try:
        from_scratch(db)
        upgrade(db.engine, "0009")
        metadata = {
            "description": "Spikes of the visual_cortex",
            "contributor": [{"name": "Doe, Jane"}],
        }
        with db.engine.begin() as connection:
            connection.execute(
                text(
                    "INSERT INTO dandisets (id, name, embargoed, created_at) "
                    "VALUES (7, 'Mouse recordings', false, CURRENT_TIMESTAMP)"
                )
            )
            connection.execute(
                text(
                    "INSERT INTO versions (id, dandiset_id, version, metadata, created_at, "
                    "modified_at) VALUES (70, 7, 'draft', :m, CURRENT_TIMESTAMP, "
                    "CURRENT_TIMESTAMP)"
                ),
                {"m": json.dumps(metadata)},
            )
            connection.execute(
                text(
                    "INSERT INTO assets (id, version_id, path, metadata, created_at, "
                    "modified_at) VALUES ('a1', 70, 'sub-m1/ses-2_ecephys.nwb', '{}', "
                    "CURRENT_TIMESTAMP, CURRENT_TIMESTAMP)"
                )
            )
        db.migrate()
        with Session(db.engine) as session:
            for query in ("mouse", "visual cortex", "jane", "ecephys", "ses 2"):
                assert set(matches(session, query)) == {7}, query
            assert matches(session, "rat") == {}
    finally:
        db.dispose()

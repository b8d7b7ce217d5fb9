"""Which databases a test module runs on.

Every test taking the ``database_url`` fixture runs on SQLite and on PostgreSQL by default.
Modules whose subject is not the database mark themselves :data:`SQLITE_ONLY`: pages,
readers, viewers, CORS, decoders, and the API's shapes (DANDI's routes, assets, owners,
listings, metadata validation, the audit trail's records, S3 integrity and multipart); their
PostgreSQL run would repeat the same SQLAlchemy queries at a high price in ``make test``'s
20 minutes.  Whatever depends on the database itself keeps both: locking, races, concurrent
applies and the upload pipeline, jobs, search, migrations, bad input, the change records'
ordering (``COLLATE "C"``), publish, embargo and snapshots' transactions.
"""

from __future__ import annotations

import atexit
import shutil
import tempfile
from pathlib import Path

import pytest
from sqlalchemy import text

from zarrchive.db.session import Database

#: ``pytestmark = SQLITE_ONLY``: the module's tests run on SQLite only (their PostgreSQL
#: variants are deselected by :func:`deselect_other_databases`).
SQLITE_ONLY = pytest.mark.sqlite_only


def deselect_other_databases(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Drop the PostgreSQL variants of :data:`SQLITE_ONLY` tests (a conftest hook's body)."""
    kept, dropped = [], []
    for item in items:
        callspec = getattr(item, "callspec", None)
        database = callspec.params.get("database_url") if callspec is not None else None
        if database not in (None, "sqlite") and item.get_closest_marker("sqlite_only"):
            dropped.append(item)
        else:
            kept.append(item)
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = kept


def from_scratch(db: Database) -> None:
    """An empty database to upgrade step by step: the session's PostgreSQL database and a
    SQLite test's file (:func:`new_sqlite_database`) are at head already."""
    if not db.is_sqlite:
        with db.engine.begin() as connection:
            connection.execute(text("DROP SCHEMA public CASCADE"))
            connection.execute(text("CREATE SCHEMA public"))
        return
    path = db.engine.url.database
    if not path or path == ":memory:":
        return
    db.engine.dispose()  # no connection holds the file: an empty file is an empty database
    Path(path).write_bytes(b"")
    for suffix in ("-wal", "-shm"):
        Path(path + suffix).unlink(missing_ok=True)


_template: dict[str, Path] = {}


def new_sqlite_database(path: Path) -> str:
    """The URL of a new SQLite database at *path* with its schema at the newest revision: a
    copy of one migrated once per test process.  Running the migrations for each test cost
    0.15 s of CPU and, with a commit (an fsync) per step, seconds of wall on a loaded
    machine; the copy costs milliseconds.  The migrations themselves are checked from an
    empty database by tests/db (:func:`from_scratch`) and ran here to make the copy."""
    template = _template.get("path")
    if template is None:
        directory = Path(tempfile.mkdtemp(prefix="zarrchive-sqlite-template-"))
        atexit.register(shutil.rmtree, directory, ignore_errors=True)
        template = directory / "template.sqlite3"
        db = Database(f"sqlite:///{template}")
        try:
            db.migrate()
            with db.engine.connect() as connection:  # everything into the main file
                connection.exec_driver_sql("PRAGMA wal_checkpoint(TRUNCATE)")
        finally:
            db.dispose()
        _template["path"] = template
    shutil.copyfile(template, path)
    path.chmod(0o600)  # as the archive makes its own (db/session.py)
    return f"sqlite:///{path}"

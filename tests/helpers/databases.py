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
    """An empty database to upgrade step by step: the session's PostgreSQL database is at
    head already (a SQLite test's file is new)."""
    if not db.is_sqlite:
        with db.engine.begin() as connection:
            connection.execute(text("DROP SCHEMA public CASCADE"))
            connection.execute(text("CREATE SCHEMA public"))

"""Database engine, sessions and migrations.

PostgreSQL serialises writers per Zarr with ``SELECT ... FOR UPDATE``.  SQLite
has no row locks: its write transactions start with ``BEGIN IMMEDIATE``, which
takes the database's write lock up front, so writers are serialised at least
as strictly (readers still run concurrently thanks to WAL).

No ORM object is used after its session (see :mod:`zarrchive.services`).  A *strict*
database (``ZARRCHIVE_STRICT_SESSIONS``, which the tests set) makes that checked: its
objects expire when their session commits, so reading one afterwards raises
:class:`~sqlalchemy.orm.exc.DetachedInstanceError` instead of answering stale values.
"""

from __future__ import annotations

import contextvars
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from sqlalchemy import Engine, create_engine, event, text
from sqlalchemy.engine import make_url
from sqlalchemy.orm import Session, sessionmaker

#: The PostgreSQL advisory lock that serialises migrations between processes.
_MIGRATION_LOCK = 0x7A617272  # "zarr"

_immediate: contextvars.ContextVar[bool] = contextvars.ContextVar("immediate", default=False)


class Database:
    """An engine and its session factory."""

    def __init__(self, url: str, *, echo: bool = False, strict: bool = False) -> None:
        self.url = url
        #: Objects expire when their session commits (see the module's docstring).
        self.strict = strict
        parsed = make_url(url)
        self.is_sqlite = parsed.get_backend_name() == "sqlite"
        kwargs: dict[str, Any] = {"echo": echo, "future": True}
        if self.is_sqlite:
            if parsed.database and parsed.database != ":memory:":
                _create_private_file(Path(parsed.database))
            kwargs["connect_args"] = {"check_same_thread": False, "timeout": 120}
        else:
            kwargs["pool_pre_ping"] = True
            kwargs["pool_size"] = 10
            kwargs["max_overflow"] = 20
        self.engine: Engine = create_engine(url, **kwargs)
        if self.is_sqlite:
            _configure_sqlite(self.engine)
        self._sessions = sessionmaker(self.engine, expire_on_commit=strict)

    @contextmanager
    def session(self) -> Iterator[Session]:
        """A session for reads, committed at the end.

        On SQLite it must not write: a deferred transaction that read before another writer
        committed can't take the write lock ("database is locked", at once, whatever the busy
        timeout).  Anything that writes uses :meth:`write_session`.
        """
        with self._sessions() as session, session.begin():
            yield session

    @contextmanager
    def write_session(self) -> Iterator[Session]:
        """A session for a serialised write: ``BEGIN IMMEDIATE`` on SQLite."""
        token = _immediate.set(True)
        try:
            with self._sessions() as session, session.begin():
                yield session
        finally:
            _immediate.reset(token)

    def migrate(self) -> None:
        """Bring the schema to the newest Alembic revision."""
        from zarrchive.db.migrate import upgrade

        if self.engine.dialect.name != "postgresql":
            upgrade(self.engine)
            return
        # several processes (API servers, workers) may start at once: one migrates, the
        # others wait on a session-level advisory lock and then find nothing to do
        with self.engine.connect() as conn:
            conn.execute(text("SELECT pg_advisory_lock(:key)"), {"key": _MIGRATION_LOCK})
            try:
                upgrade(self.engine)
            finally:
                conn.execute(text("SELECT pg_advisory_unlock(:key)"), {"key": _MIGRATION_LOCK})
                conn.commit()

    def dispose(self) -> None:
        self.engine.dispose()


def _create_private_file(path: Path) -> None:
    """Create the SQLite file readable by its owner only (0600; its ``-wal`` and ``-shm``
    files take the same mode), and its directory if missing (0700); an existing file of ours
    with wider permissions (made before they were kept private) is tightened."""
    if not path.parent.exists():
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    os.close(fd)
    for file in (path, path.with_name(path.name + "-wal"), path.with_name(path.name + "-shm")):
        try:
            info = file.stat()
        except FileNotFoundError:
            continue
        if info.st_mode & 0o077 and info.st_uid == os.getuid():
            file.chmod(0o600)


def _configure_sqlite(engine: Engine) -> None:
    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_connection: Any, _record: Any) -> None:
        dbapi_connection.isolation_level = None  # we emit BEGIN ourselves
        cursor = dbapi_connection.cursor()
        cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute("PRAGMA foreign_keys=ON")
        cursor.execute("PRAGMA busy_timeout=120000")
        cursor.close()

    @event.listens_for(engine, "begin")
    def _on_begin(connection: Any) -> None:
        connection.exec_driver_sql("BEGIN IMMEDIATE" if _immediate.get() else "BEGIN")

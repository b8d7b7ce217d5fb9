"""The archive on the in-memory object store: services tested without SeaweedFS.

:func:`memory_archive` builds an :class:`~zarrchive.services.runtime.Archive` whose two
buckets are :class:`~zarrchive.storage.memory.MemoryObjectStore` (the public one
world-readable, the embargo one private; their URLs answered by their own loopback HTTP
servers) and whose database is a fresh SQLite file (or the one given).  The
``memory_archive`` fixture (tests/conftest.py) yields one on each database of
``database_url``; a module whose services are not about S3 runs on it by overriding
``archive``::

    @pytest.fixture
    def archive(memory_archive: Archive) -> Archive:
        return memory_archive

(``api``, ``users``, ``dandiset``, ``zarr_id``... take ``archive``, so they follow): its
SQLite variants are then unit tests (``make unit``), its PostgreSQL ones still run in
``make test``.  S3's own behaviour stays tested on SeaweedFS
(``tests/storage/test_s3_conformance.py``, the integration tests).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from zarrchive.config import Settings
from zarrchive.db.session import Database
from zarrchive.services.runtime import Archive
from zarrchive.storage.memory import MemoryObjectStore


@contextmanager
def memory_archive(tmp_path: Path, **overrides: Any) -> Iterator[Archive]:
    """An archive on two in-memory buckets and a fresh SQLite database under *tmp_path*
    (settings as the tests' usual ones, changed by *overrides*)."""
    public = MemoryObjectStore("zarrchive")
    embargo = MemoryObjectStore("zarrchive-embargo", public_read=False)
    values: dict[str, Any] = {
        "data_dir": tmp_path,
        "database_url": f"sqlite:///{tmp_path / 'zarrchive.sqlite3'}",
        # (the stores' own HTTP server: what clients are told of S3 answers them)
        "s3_endpoint_url": public.origin,
        "s3_bucket": public.bucket,
        "s3_embargo_bucket": embargo.bucket,
        "s3_access_key_id": public.credentials.access_key_id,
        "s3_secret_access_key": public.credentials.secret_access_key,
        "strict_sessions": True,
        "publish_requires_valid": False,
    }
    values.update(overrides)
    settings = Settings.from_env({}).with_overrides(**values)
    db = Database(settings.database_url, strict=settings.strict_sessions)
    db.migrate()
    archive = Archive(settings=settings, db=db, store=public, embargo_store=embargo)
    try:
        yield archive
    finally:
        archive.close()

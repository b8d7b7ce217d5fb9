"""The Alembic migrations build exactly the schema the models describe, on both databases."""

from __future__ import annotations

import threading

from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy.exc import IntegrityError

from zarrchive.db.models import Base, Dandiset, UploadBatch, User, Zarr
from zarrchive.db.session import Database


def test_migrations_match_the_models(database_url: str) -> None:
    db = Database(database_url)
    try:
        db.migrate()
        db.migrate()  # idempotent
        with db.engine.connect() as connection:
            diff = compare_metadata(MigrationContext.configure(connection), Base.metadata)
        assert diff == [], f"models and migrations differ: {diff}"
    finally:
        db.dispose()


def test_one_open_batch_per_zarr_is_enforced_by_the_database(database_url: str) -> None:
    db = Database(database_url)
    try:
        db.migrate()
        with db.session() as session:
            user = User(username="u")
            dandiset = Dandiset(name="d")
            session.add_all([user, dandiset])
            session.flush()
            session.add(
                Zarr(id="00000000-0000-0000-0000-000000000001", name="z", dandiset_id=dandiset.id)
            )
        results: list[str] = []
        barrier = threading.Barrier(4)

        def open_batch() -> None:
            barrier.wait()
            try:
                with db.session() as session:
                    session.add(UploadBatch(zarr_id="00000000-0000-0000-0000-000000000001"))
                results.append("opened")
            except IntegrityError:
                results.append("refused")

        threads = [threading.Thread(target=open_batch) for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert sorted(results) == ["opened", "refused", "refused", "refused"]
    finally:
        db.dispose()

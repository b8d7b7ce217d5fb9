"""The Alembic migrations build exactly the schema the models describe, on both databases."""

from __future__ import annotations

import hashlib
import threading
from typing import Any

import pytest
from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy import text
from sqlalchemy.exc import IntegrityError

from tests.helpers.databases import from_scratch
from zarrchive.checksum.dandi_etag import dandi_etag
from zarrchive.db.migrate import alembic_config, upgrade
from zarrchive.db.models import (
    Base,
    BatchKind,
    BatchState,
    Dandiset,
    EmbargoStatus,
    UploadBatch,
    User,
    Zarr,
)
from zarrchive.db.session import Database
from zarrchive.services.dandi.search import SEARCH_TABLES

ZARR = "00000000-0000-0000-0000-000000000001"


def _not_the_search_index(name: str | None, kind: str, _parents: object) -> bool:
    """The search index is the database's own kind of tables (FTS5, tsvector), not models."""
    return not (kind == "table" and name is not None and name.startswith(SEARCH_TABLES))


def test_migrations_match_the_models(database_url: str) -> None:
    db = Database(database_url)
    try:
        db.migrate()
        db.migrate()  # idempotent
        with db.engine.connect() as connection:
            context = MigrationContext.configure(
                connection, opts={"include_name": _not_the_search_index}
            )
            diff = compare_metadata(context, Base.metadata)
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


def test_upgrading_keeps_open_batches_and_gives_them_identities(database_url: str) -> None:
    """0003 rebuilds ``upload_batches`` on SQLite: an open batch and its files survive."""
    db = Database(database_url)
    try:
        from_scratch(db)
        upgrade(db.engine, "0002")
        with db.engine.begin() as connection:
            connection.execute(
                text(
                    "INSERT INTO users (id, username, is_admin, created_at) "
                    "VALUES (1, 'u', false, CURRENT_TIMESTAMP)"
                )
            )
            connection.execute(
                text(
                    "INSERT INTO dandisets (id, name, embargoed, embargo_status, created_at) "
                    "VALUES (1, 'd', false, 'open', CURRENT_TIMESTAMP)"
                )
            )
            connection.execute(
                text(
                    "INSERT INTO zarrs (id, dandiset_id, name, checksum, file_count, size, "
                    "created_at, modified_at) VALUES (:z, 1, 'z', 'x', 0, 0, CURRENT_TIMESTAMP, "
                    "CURRENT_TIMESTAMP)"
                ),
                {"z": ZARR},
            )
            connection.execute(
                text(
                    "INSERT INTO upload_batches (id, zarr_id, kind, state, created_at) "
                    "VALUES (7, :z, 'upload', 'open', CURRENT_TIMESTAMP)"
                ),
                {"z": ZARR},
            )
            connection.execute(
                text("INSERT INTO upload_batch_files (batch_id, path, etag) VALUES (7, 'a/b', :e)"),
                {"e": "0" * 32},
            )
        db.migrate()
        with db.session() as session:
            batch = session.query(UploadBatch).one()
            assert (batch.id, batch.state, len(batch.uid)) == (7, BatchState.OPEN, 32)
            assert [(f.path, f.etag) for f in batch.files] == [("a/b", "0" * 32)]
    finally:
        db.dispose()


def test_batch_states_are_checked_by_the_database(database_url: str) -> None:
    db = Database(database_url)
    try:
        db.migrate()
        with db.write_session() as session:
            dandiset = Dandiset(name="d")
            session.add(dandiset)
            session.flush()
            session.add(Zarr(id=ZARR, name="z", dandiset_id=dandiset.id))
        for column, value in (("kind", "upload-ish"), ("state", "done")):
            try:
                with db.write_session() as session:
                    session.add(UploadBatch(zarr_id=ZARR, **{column: value}))
            except IntegrityError:
                continue
            raise AssertionError(f"the database accepted {column}={value!r}")
        with db.write_session() as session:
            session.add(UploadBatch(zarr_id=ZARR, kind=BatchKind.DELETE, state=BatchState.APPLYING))
            # 0022: a rollback's batches
            session.add(UploadBatch(zarr_id=ZARR, kind=BatchKind.RESTORE, state=BatchState.QUEUED))
    finally:
        db.dispose()


def test_embargo_status_is_checked_by_the_database(database_url: str) -> None:
    """0008: a CHECK on PostgreSQL, triggers on SQLite; inserts and updates both refused."""
    db = Database(database_url)
    try:
        db.migrate()
        with db.write_session() as session:
            session.add(Dandiset(name="ok", embargo_status=EmbargoStatus.UNEMBARGOING))
        refused = pytest.raises(IntegrityError, match="ck_dandiset_embargo_status")
        with refused, db.write_session() as session:
            session.add(Dandiset(name="bad", embargo_status="EMBARGOED"))
        refused = pytest.raises(IntegrityError, match="ck_dandiset_embargo_status")
        with refused, db.write_session() as session:
            session.execute(text("UPDATE dandisets SET embargo_status = 'public'"))
        with db.session() as session:
            assert session.execute(text("SELECT name, embargo_status FROM dandisets")).all() == [
                ("ok", "unembargoing")
            ]
    finally:
        db.dispose()


def test_one_open_batch_plus_queued_ones_in_a_unique_order(database_url: str) -> None:
    """0005: the partial unique index allows one ``open`` batch per Zarr beside any number of
    queued ones, and each queued batch has its own apply number."""
    db = Database(database_url)
    try:
        db.migrate()
        with db.write_session() as session:
            dandiset = Dandiset(name="d")
            session.add(dandiset)
            session.flush()
            session.add(Zarr(id=ZARR, name="z", dandiset_id=dandiset.id))
        with db.write_session() as session:
            session.add_all(
                [
                    UploadBatch(zarr_id=ZARR, state=BatchState.QUEUED, seq=1),
                    UploadBatch(zarr_id=ZARR, state=BatchState.APPLYING, seq=2),
                    UploadBatch(zarr_id=ZARR, state=BatchState.OPEN),
                ]
            )
        for extra in (
            UploadBatch(zarr_id=ZARR, state=BatchState.OPEN),
            UploadBatch(zarr_id=ZARR, state=BatchState.QUEUED, seq=2),
        ):
            try:
                with db.write_session() as session:
                    session.add(extra)
            except IntegrityError:
                continue
            raise AssertionError(f"the database accepted {extra.state} seq={extra.seq}")
        with db.session() as session:
            assert session.query(UploadBatch).count() == 3
    finally:
        db.dispose()


def test_0007_gives_blobs_of_one_part_their_dandi_etag(database_url: str) -> None:
    """Blobs up to 64 MiB get ``md5(md5)-1`` (empty ones ``md5("")-0``); larger ones none;
    md5 becomes optional (DANDI's uploads announce only a dandi-etag)."""
    db = Database(database_url)
    try:
        from_scratch(db)
        upgrade(db.engine, "0006")
        small, empty = b"small blob", b""
        rows = [
            ("00000000-0000-4000-8000-000000000001", hashlib.md5(small).hexdigest(), len(small)),
            ("00000000-0000-4000-8000-000000000002", hashlib.md5(empty).hexdigest(), 0),
            ("00000000-0000-4000-8000-000000000003", "a" * 32, 64 * 1024**2 + 1),
        ]
        with db.engine.begin() as connection:
            for blob_id, md5, size in rows:
                connection.execute(
                    text(
                        "INSERT INTO blobs (id, md5, size, key, embargoed, created_at) "
                        "VALUES (:i, :m, :s, :k, false, CURRENT_TIMESTAMP)"
                    ),
                    {"i": blob_id, "m": md5, "s": size, "k": f"blobs/{blob_id}"},
                )
        db.migrate()
        with db.engine.begin() as connection:
            found: dict[str, str | None] = dict(
                connection.execute(text("SELECT id, etag FROM blobs")).all()
            )
            connection.execute(
                text(
                    "INSERT INTO blobs (id, md5, etag, size, key, embargoed, created_at) "
                    "VALUES ('x', NULL, 'e-1', 1, 'blobs/x', false, CURRENT_TIMESTAMP)"
                )
            )
        assert found == {
            rows[0][0]: dandi_etag(small),
            rows[1][0]: dandi_etag(empty),
            rows[2][0]: None,
        }
    finally:
        db.dispose()


def test_migration_0014_fills_in_the_directories_of_queued_batches(database_url: str) -> None:
    db = Database(database_url)
    try:
        from_scratch(db)
        upgrade(db.engine, "0013")
        _add_zarr(db)
        with db.engine.begin() as connection:  # the tables as of 0013 (not the models')
            for batch_id, state, seq in ((1, "queued", 1), (2, "open", None)):
                connection.execute(
                    text(
                        "INSERT INTO upload_batches (id, uid, zarr_id, kind, state, seq, "
                        "created_at) VALUES (:id, :uid, :z, 'upload', :state, :seq, "
                        "CURRENT_TIMESTAMP)"
                    ),
                    {
                        "id": batch_id,
                        "uid": f"{batch_id:032x}",
                        "z": ZARR,
                        "state": state,
                        "seq": seq,
                    },
                )
                connection.execute(
                    text(
                        "INSERT INTO upload_batch_files (batch_id, path, etag) "
                        "VALUES (:id, :path, :e)"
                    ),
                    {"id": batch_id, "path": f"{state}/b/c", "e": "0" * 32},
                )
        upgrade(db.engine)
        with db.engine.connect() as connection:
            rows = connection.execute(
                text("SELECT path FROM upload_batch_directories ORDER BY path")
            ).scalars()
            assert list(rows) == ["queued", "queued/b"]  # the queued batch's, not the open one's
    finally:
        db.dispose()


def _add_zarr(db: Database) -> None:
    """A dandiset and its Zarr :data:`ZARR` (in SQL: the tables of an older revision are not
    the models')."""
    with db.engine.begin() as connection:
        connection.execute(
            text(
                "INSERT INTO dandisets (id, name, embargoed, embargo_status, created_at) "
                "VALUES (1, 'd', false, 'open', CURRENT_TIMESTAMP)"
            )
        )
        connection.execute(
            text(
                "INSERT INTO zarrs (id, dandiset_id, name, checksum, file_count, size, "
                "created_at, modified_at) VALUES (:z, 1, 'z', 'x', 0, 0, CURRENT_TIMESTAMP, "
                "CURRENT_TIMESTAMP)"
            ),
            {"z": ZARR},
        )


def _add_file_of_batch_3(connection: Any) -> None:
    connection.execute(
        text("INSERT INTO upload_batch_files (batch_id, path, etag) VALUES (3, 'a/b', :e)"),
        {"e": "0" * 32},
    )


def test_migration_0015_keeps_batches_and_their_files(database_url: str) -> None:
    """0015 adds ``upload_batches.verify_on_apply`` (false) in place: no batch loses its
    files (rebuilding the table would cascade to them)."""
    db = Database(database_url)
    try:
        from_scratch(db)
        upgrade(db.engine, "0014")
        _add_zarr(db)
        with db.engine.begin() as connection:
            connection.execute(
                text(
                    "INSERT INTO upload_batches (id, uid, zarr_id, kind, state, seq, created_at) "
                    "VALUES (3, :uid, :z, 'upload', 'queued', 1, CURRENT_TIMESTAMP)"
                ),
                {"uid": "3" * 32, "z": ZARR},
            )
            _add_file_of_batch_3(connection)
        upgrade(db.engine)
        with db.session() as session:
            batch = session.query(UploadBatch).one()
            assert (batch.id, batch.state, batch.verify_on_apply) == (3, BatchState.QUEUED, False)
            assert [(f.path, f.etag) for f in batch.files] == [("a/b", "0" * 32)]
    finally:
        db.dispose()


def test_migration_0016_keeps_the_open_batch_and_allows_one_batch_ahead(database_url: str) -> None:
    """0016 adds ``upload_batches.follows`` in place (the open batch keeps its files and stays
    the open one); then a Zarr holds one open batch plus at most one batch that follows it."""
    db = Database(database_url)
    insert = text(
        "INSERT INTO upload_batches (id, uid, zarr_id, kind, state, created_at{follows}) "
        "VALUES (:id, :uid, :z, 'upload', 'open', CURRENT_TIMESTAMP{value})"
    )

    def add(connection: Any, batch_id: int, follows: int | None = None) -> None:
        sql = str(insert).format(
            follows="" if follows is None else ", follows",
            value="" if follows is None else f", {follows}",
        )
        connection.execute(text(sql), {"id": batch_id, "uid": str(batch_id) * 32, "z": ZARR})

    try:
        from_scratch(db)
        upgrade(db.engine, "0015")
        _add_zarr(db)
        with db.engine.begin() as connection:
            add(connection, 3)
            _add_file_of_batch_3(connection)
        upgrade(db.engine)
        with db.session() as session:
            batch = session.query(UploadBatch).one()
            assert (batch.id, batch.state, batch.follows) == (3, BatchState.OPEN, None)
            assert [(f.path, f.etag) for f in batch.files] == [("a/b", "0" * 32)]
        with db.engine.begin() as connection:
            add(connection, 4, follows=3)  # the batch opened ahead of it
        for second in ((5, None), (6, 3)):  # a second open batch; a second one ahead
            with pytest.raises(IntegrityError), db.engine.begin() as connection:
                add(connection, *second)
    finally:
        db.dispose()


def test_migration_0017_approves_existing_users_and_keeps_their_keys(database_url: str) -> None:
    """0017 adds the accounts' columns in place: existing users are approved, keep their
    dandisets and sessions, and their keys become write keys named "default"; statuses and
    scopes are checked by the database; downgrading deletes what the old schema would make
    more powerful (read keys, keys of accounts not approved)."""
    db = Database(database_url)
    try:
        from_scratch(db)
        upgrade(db.engine, "0016")
        with db.engine.begin() as connection:
            for uid, name in ((1, "old"), (2, "other")):
                connection.execute(
                    text(
                        "INSERT INTO users (id, username, is_admin, created_at) "
                        "VALUES (:id, :name, false, CURRENT_TIMESTAMP)"
                    ),
                    {"id": uid, "name": name},
                )
                connection.execute(
                    text(
                        "INSERT INTO api_tokens (user_id, token_hash, created_at) "
                        "VALUES (:id, :hash, CURRENT_TIMESTAMP)"
                    ),
                    {"id": uid, "hash": str(uid) * 64},
                )
            connection.execute(
                text(
                    "INSERT INTO dandisets (id, name, embargoed, embargo_status, created_at) "
                    "VALUES (7, 'd', false, 'open', CURRENT_TIMESTAMP)"
                )
            )
            connection.execute(text("INSERT INTO dandiset_owners VALUES (7, 1)"))
        upgrade(db.engine)
        with db.session() as session:
            rows = session.execute(
                text(
                    "SELECT u.username, u.status, t.name, t.scope, t.revoked_at "
                    "FROM users u JOIN api_tokens t ON t.user_id = u.id ORDER BY u.id"
                )
            ).all()
            assert [tuple(r) for r in rows] == [
                ("old", "APPROVED", "default", "write", None),
                ("other", "APPROVED", "default", "write", None),
            ]
            assert session.execute(text("SELECT * FROM dandiset_owners")).all() == [(7, 1)]
        for statement in (
            "UPDATE users SET status = 'approved' WHERE id = 1",
            "UPDATE api_tokens SET scope = 'admin' WHERE user_id = 1",
        ):
            with pytest.raises(IntegrityError, match="ck_"), db.engine.begin() as connection:
                connection.execute(text(statement))
        with db.engine.begin() as connection:
            connection.execute(text("UPDATE api_tokens SET scope = 'read' WHERE user_id = 1"))
            connection.execute(text("UPDATE users SET status = 'PENDING' WHERE id = 2"))
            connection.execute(text("INSERT INTO dandiset_reviewers VALUES (7, 2)"))
        command.downgrade(alembic_config(db.engine), "0016")
        with db.session() as session:
            assert session.execute(text("SELECT user_id FROM api_tokens")).all() == []
            assert session.execute(text("SELECT count(*) FROM users")).scalar() == 2
        upgrade(db.engine)
    finally:
        db.dispose()

"""Issue 23 (item 3): ``open``'s file/directory clash check against the verified batches not
applied yet costs about the same with a backlog of 1 batch or of 60 (SQLite's virtual
machine steps, counted)."""

from __future__ import annotations

import sqlite3
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import httpx
from sqlalchemy import event, func, select

from tests.helpers.api_uploads import complete, open_and_put
from tests.helpers.databases import SQLITE_ONLY
from tests.helpers.jobs import HeldJobQueue
from tests.helpers.zarr_client import md5
from zarrchive.db.models import (
    BatchKind,
    BatchState,
    UploadBatch,
    UploadBatchDirectory,
    UploadBatchFile,
)
from zarrchive.services.runtime import Archive
from zarrchive.services.zarr_engine.uploads.batches import _queued_clashes, record_directories


def _queue_backlog(archive: Archive, zarr_id: str, first: int, count: int, files: int) -> None:
    """Verified batches ``first .. first + count - 1`` of *files* files each (``arr/c/{i}/{j}``),
    written to the database directly: the clash check reads only the database."""
    with archive.db.write_session() as session:
        for i in range(first, first + count):
            batch = UploadBatch(
                zarr_id=zarr_id,
                uid=uuid.uuid4().hex,
                kind=BatchKind.UPLOAD,
                state=BatchState.QUEUED,
                seq=i + 1,
            )
            batch.files = [
                UploadBatchFile(path=f"arr/c/{i}/{j}", etag=md5(b"x"), size=1) for j in range(files)
            ]
            session.add(batch)
            session.flush()
            record_directories(session, batch)  # as complete does


@contextmanager
def _sqlite_steps(archive: Archive) -> Iterator[list[int]]:
    """Count the SQLite virtual machine's steps (in hundreds) of the statements run inside."""
    steps = [0]

    def tick() -> int:
        steps[0] += 1
        return 0

    def before(conn: Any, *_args: Any) -> None:
        raw = conn.connection.driver_connection
        assert isinstance(raw, sqlite3.Connection)
        raw.set_progress_handler(tick, 100)

    event.listen(archive.db.engine, "before_cursor_execute", before)
    try:
        yield steps
    finally:
        event.remove(archive.db.engine, "before_cursor_execute", before)


@SQLITE_ONLY
def test_the_clash_check_does_not_grow_with_the_backlog(
    api: httpx.Client, zarr_id: str, archive: Archive, held: HeldJobQueue
) -> None:
    new = [f"arr/c/new/{j}" for j in range(200)] + ["arr/c/0/0/deeper", "arr/c/1"]
    costs: list[int] = []
    for first, added in ((0, 1), (1, 59)):  # a backlog of 1 batch, then of 60 (200 files each)
        _queue_backlog(archive, zarr_id, first, added, 200)
        with _sqlite_steps(archive) as steps:
            problems = _queued_clashes(archive, zarr_id, new)
        assert any("would make 'arr/c/0/0' a directory" in p for p in problems), problems
        assert any("'arr/c/1' is a directory" in p for p in problems) == bool(costs)
        costs.append(steps[0])
    with archive.db.session() as session:
        assert session.scalar(select(func.count()).select_from(UploadBatchFile)) == 60 * 200
    print(f"SQLite steps (hundreds), backlog of 1 and of 60 batches: {costs}")
    assert costs[1] <= 2 * costs[0] + 5, costs


def test_another_zarrs_queued_batch_is_no_clash_and_directories_go_with_the_batch(
    api: httpx.Client, zarr_id: str, archive: Archive, held: HeldJobQueue, dandiset: str
) -> None:
    other = api.post("/api/zarr/", json={"name": "other.zarr", "dandiset": dandiset}).json()
    open_and_put(api, other["zarr_id"], {"a/b": b"1", "x/y/z": b"2"})
    complete(api, other["zarr_id"])  # queued (held): the other Zarr's
    open_and_put(api, zarr_id, {"x/y/w": b"3"})
    complete(api, zarr_id)
    assert _queued_clashes(archive, zarr_id, ["a/b/c", "x/y/z/q"]) == []
    assert _queued_clashes(archive, zarr_id, ["x/y"]) == [
        "'x/y' is a directory of a batch being applied: it can't be a file"
    ]
    held.run("apply:")
    with archive.db.session() as session:
        assert session.scalar(select(func.count()).select_from(UploadBatchDirectory)) == 0

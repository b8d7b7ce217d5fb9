"""Issue 14 (items 4-5): deferred, pipelined apply.  ``complete`` verifies, queues the batch
and answers; queued batches are applied by a job, strictly in order; the next batch opens at
once; deletion works while a batch is open; cancel cancels only the open batch; a crash
leaves every verified batch to be finished (by the job, the next write, or the start sweep)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import httpx
import pytest
from sqlalchemy import update

from tests.helpers.api_uploads import (
    assert_clean,
    batches,
    complete,
    info,
    open_and_put,
    s3_body,
)
from tests.helpers.jobs import HeldJobQueue
from tests.helpers.zarr_client import md5, oracle_checksum
from zarrchive.db.models import BatchState, UploadBatch, utcnow
from zarrchive.errors import StorageError
from zarrchive.services.runtime import Archive
from zarrchive.services.zarr_engine import uploads
from zarrchive.storage.keys import staging_zarr_prefix
from zarrchive.storage.objects import ObjectStore, WrittenVersion

APPLY = "apply:"


def test_complete_answers_before_applying_and_batches_apply_in_order(
    api: httpx.Client, zarr_id: str, archive: Archive, held: HeldJobQueue
) -> None:
    first = {"arr/0": b"first", "arr/1": b"one", ".zgroup": b"{}"}
    open_and_put(api, zarr_id, first)
    answer = complete(api, zarr_id)
    # verified and queued, not applied: the Zarr shows nothing of it yet
    assert answer["upload_state"] == "applying" and not answer["upload_in_progress"]
    assert answer["checksum"] == oracle_checksum({}) and answer["file_count"] == 0
    assert s3_body(archive, zarr_id, "arr/0") is None
    assert api.get(f"/api/zarr/{zarr_id}/arr/0").status_code == 404
    # the next batch opens at once (its own staging area) and overwrites a file
    second = {"arr/0": b"second", "arr/2": b"two"}
    open_and_put(api, zarr_id, second)
    assert info(api, zarr_id)["upload_in_progress"]
    complete(api, zarr_id)
    third = {"arr/0": b"third"}
    open_and_put(api, zarr_id, third)
    complete(api, zarr_id)
    assert batches(archive, zarr_id) == [("queued", 1), ("queued", 2), ("queued", 3)]
    assert held.queued(APPLY) == [f"apply:{zarr_id}"]  # one job per Zarr: they coalesce
    assert held.run(APPLY) == 1
    final = {**first, **second, **third}
    zarr = info(api, zarr_id)
    assert zarr["upload_state"] == "at_rest"
    assert zarr["checksum"] == oracle_checksum(final) and zarr["file_count"] == 4
    assert s3_body(archive, zarr_id, "arr/0") == b"third"  # the latest batch's version wins
    assert batches(archive, zarr_id) == []
    assert not list(archive.store.iter_objects(staging_zarr_prefix(zarr_id)))
    assert held.queued("manifest:") == [f"manifest:{zarr_id}"]
    assert_clean(archive, zarr_id)


def test_complete_wait_applies_before_answering(
    api: httpx.Client, zarr_id: str, archive: Archive, held: HeldJobQueue
) -> None:
    first = {"a": b"1"}
    open_and_put(api, zarr_id, first)
    complete(api, zarr_id)  # queued
    second = {"a": b"2", "b": b"3"}
    open_and_put(api, zarr_id, second)
    answer = complete(api, zarr_id, wait="true")  # applies the queue up to this batch
    assert answer["upload_state"] == "at_rest"
    assert answer["checksum"] == oracle_checksum(second)
    assert s3_body(archive, zarr_id, "a") == b"2"


def test_cancel_cancels_only_the_open_batch(
    api: httpx.Client, zarr_id: str, archive: Archive, held: HeldJobQueue
) -> None:
    first = {"a": b"kept"}
    open_and_put(api, zarr_id, first)
    complete(api, zarr_id)
    open_and_put(api, zarr_id, {"a": b"cancelled", "c": b"cancelled"})
    assert api.delete(f"/api/zarr/{zarr_id}/upload/").status_code == 204
    assert batches(archive, zarr_id) == [("queued", 1)]
    assert api.delete(f"/api/zarr/{zarr_id}/upload/").status_code == 404  # nothing open
    held.run(APPLY)
    assert info(api, zarr_id)["checksum"] == oracle_checksum(first)
    assert s3_body(archive, zarr_id, "a") == b"kept" and s3_body(archive, zarr_id, "c") is None
    assert not list(archive.store.iter_objects(staging_zarr_prefix(zarr_id)))


def test_delete_while_a_batch_is_open_is_applied_after_the_queued_ones(
    api: httpx.Client, zarr_id: str, archive: Archive, held: HeldJobQueue
) -> None:
    first = {"arr/0": b"zero", "arr/1": b"one", "keep": b"k"}
    open_and_put(api, zarr_id, first)
    complete(api, zarr_id)  # queued, not applied
    later = {"arr/2": b"two", "arr/1": b"one again"}
    open_and_put(api, zarr_id, later)  # open
    # arr/0 exists only through the queued batch: deletion applies that batch first
    response = api.request(
        "DELETE", f"/api/zarr/{zarr_id}/files/", json=[{"path": "arr/0"}, {"path": "arr/1"}]
    )
    assert response.status_code == 204, response.text
    assert info(api, zarr_id)["checksum"] == oracle_checksum({"keep": b"k"})
    assert info(api, zarr_id)["upload_in_progress"]  # the open batch stays open
    assert s3_body(archive, zarr_id, "arr/0") is None
    complete(api, zarr_id, wait="true")
    final = {"keep": b"k", **later}
    assert info(api, zarr_id)["checksum"] == oracle_checksum(final)
    assert s3_body(archive, zarr_id, "arr/1") == b"one again"
    assert_clean(archive, zarr_id)


def test_delete_of_a_missing_file_while_a_batch_is_open_changes_nothing(
    api: httpx.Client, zarr_id: str, archive: Archive
) -> None:
    open_and_put(api, zarr_id, {"a": b"1"})
    complete(api, zarr_id)
    open_and_put(api, zarr_id, {"b": b"2"})
    response = api.request("DELETE", f"/api/zarr/{zarr_id}/files/", json=[{"path": "b"}])
    assert response.status_code == 404, response.text  # b is not a file yet
    assert info(api, zarr_id)["upload_in_progress"]
    assert complete(api, zarr_id)["checksum"] == oracle_checksum({"a": b"1", "b": b"2"})


def test_a_file_of_a_queued_batch_cannot_become_a_directory(
    api: httpx.Client, zarr_id: str, held: HeldJobQueue
) -> None:
    open_and_put(api, zarr_id, {"a": b"1", "d/x": b"2"})
    complete(api, zarr_id)
    for paths, message in (
        (["a/b"], "would make 'a' a directory, but a batch being applied writes it as a file"),
        (["d"], "'d' is a directory of a batch being applied"),
    ):
        response = api.post(
            f"/api/zarr/{zarr_id}/upload/", json=[{"path": p, "etag": md5(b"z")} for p in paths]
        )
        assert response.status_code == 400 and message in response.text, response.text


def _fail_copies_after(monkeypatch: pytest.MonkeyPatch, good: int) -> None:
    copy = ObjectStore.copy_within
    calls = [0]

    def flaky(self: ObjectStore, *args: Any, **kwargs: Any) -> WrittenVersion:
        calls[0] += 1
        if calls[0] > good:
            raise StorageError("injected: the applier died while copying")
        return copy(self, *args, **kwargs)

    monkeypatch.setattr(ObjectStore, "copy_within", flaky)


def test_batch_interrupted_mid_apply_is_finished_by_the_start_sweep(
    api: httpx.Client,
    zarr_id: str,
    archive: Archive,
    held: HeldJobQueue,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    first = {"x/1": b"1", "x/2": b"2", "y": b"3"}
    open_and_put(api, zarr_id, first)
    complete(api, zarr_id)
    second = {"x/1": b"one", "z": b"4"}
    open_and_put(api, zarr_id, second)
    complete(api, zarr_id)
    _fail_copies_after(monkeypatch, 1)
    with pytest.raises(StorageError):
        held.run(APPLY)  # the apply dies after one copy
    monkeypatch.undo()
    assert info(api, zarr_id)["checksum"] == oracle_checksum({})  # nothing visible
    # a SIGKILLed applier leaves its claim behind (it expired by the time we restart)
    with archive.db.write_session() as session:
        session.execute(
            update(UploadBatch)
            .where(UploadBatch.zarr_id == zarr_id, UploadBatch.seq == 1)
            .values(
                state=BatchState.APPLYING,
                claimed_by="dead" * 8,
                claimed_until=utcnow() - timedelta(seconds=1),
            )
        )
    held.drop()  # the process died with its queue
    assert uploads.sweep_pending(archive) >= 1  # the server (or a worker) starts
    assert held.queued(APPLY) == [f"apply:{zarr_id}"]
    held.run(APPLY)
    assert info(api, zarr_id)["checksum"] == oracle_checksum({**first, **second})
    assert s3_body(archive, zarr_id, "x/1") == b"one"
    assert batches(archive, zarr_id) == []
    assert_clean(archive, zarr_id)


def test_batch_interrupted_mid_apply_is_finished_by_the_next_write(
    api: httpx.Client, zarr_id: str, archive: Archive, monkeypatch: pytest.MonkeyPatch
) -> None:
    # no job queue: complete applies itself, and dies half-way
    first = {"x/1": b"1", "x/2": b"2", "y": b"3"}
    open_and_put(api, zarr_id, first)
    _fail_copies_after(monkeypatch, 1)
    assert api.post(f"/api/zarr/{zarr_id}/upload/complete/").status_code == 502
    monkeypatch.undo()
    assert batches(archive, zarr_id) == [("queued", 1)]  # released for the next applier
    assert info(api, zarr_id)["upload_state"] == "applying"
    # the next write (opening a batch) finishes it first
    second = {"y": b"three"}
    open_and_put(api, zarr_id, second)
    assert info(api, zarr_id)["checksum"] == oracle_checksum(first)
    complete(api, zarr_id)
    assert info(api, zarr_id)["checksum"] == oracle_checksum({**first, **second})
    assert_clean(archive, zarr_id)

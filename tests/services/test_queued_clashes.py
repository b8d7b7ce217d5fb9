"""Issue #23 item 3: opening a batch checks its paths against the queued (verified, not yet
applied) batches without reading the backlog: the database answers which paths clash.
Byte order, not the database's collation, decides what is under a directory.  On the
in-memory object store (the subject is the database's answer, not S3)."""

from __future__ import annotations

import httpx
import pytest

from tests.helpers.api_uploads import complete, open_and_put
from tests.helpers.databases import SQLITE_ONLY
from tests.helpers.jobs import HeldJobQueue
from tests.helpers.zarr_client import md5
from zarrchive.errors import InvalidInput
from zarrchive.services.runtime import Archive
from zarrchive.services.zarr_engine.uploads import batches
from zarrchive.services.zarr_engine.zarrs import zarr_ref


@pytest.fixture
def archive(memory_archive: Archive) -> Archive:
    return memory_archive


def _open(api: httpx.Client, zarr_id: str, paths: list[str]) -> httpx.Response:
    return api.post(
        f"/api/zarr/{zarr_id}/upload/", json=[{"path": p, "etag": md5(b"z")} for p in paths]
    )


def test_clashes_with_queued_batches_are_found_by_the_database(
    api: httpx.Client, zarr_id: str, archive: Archive, held: HeldJobQueue
) -> None:
    queued = {"a": b"1", "d/x": b"2", "D/y": b"3", "e/f/g": b"4", "a.b/c": b"5"}
    open_and_put(api, zarr_id, dict(list(queued.items())[:2]))
    complete(api, zarr_id)  # held: stays queued
    open_and_put(api, zarr_id, dict(list(queued.items())[2:]))
    complete(api, zarr_id)
    # no clash: neighbours in every order ('-' < '.' < '/' < '0'), case differs
    fine = ["d-x", "d.x", "d0", "a-b", "a0/x", "e/f0", "e/fg", "A/b", "a.b/d", "E"]
    assert batches._queued_clashes(archive, zarr_id, fine) == []
    problems = batches._queued_clashes(
        archive, zarr_id, ["d", "D", "e", "e/f", "a/b", "a/b/c", "e/f/g/h", "a.b"]
    )
    assert sorted(problems) == sorted(
        [
            "'d' is a directory of a batch being applied: it can't be a file",
            "'D' is a directory of a batch being applied: it can't be a file",
            "'e' is a directory of a batch being applied: it can't be a file",
            "'e/f' is a directory of a batch being applied: it can't be a file",
            "'a.b' is a directory of a batch being applied: it can't be a file",
            "'a/b' would make 'a' a directory, but a batch being applied writes it as a file",
            "'a/b/c' would make 'a' a directory, but a batch being applied writes it as a file",
            "'e/f/g/h' would make 'e/f/g' a directory, but a batch being applied writes it "
            "as a file",
        ]
    )
    # through the API: refused, nothing opened
    response = _open(api, zarr_id, ["ok", "e/f"])
    assert response.status_code == 400 and "'e/f' is a directory" in response.text
    assert _open(api, zarr_id, fine).status_code == 200


@SQLITE_ONLY
def test_many_paths_are_checked_in_chunks(
    api: httpx.Client, zarr_id: str, archive: Archive, held: HeldJobQueue
) -> None:
    open_and_put(api, zarr_id, {f"q/{i}": b"q" for i in range(5)})
    complete(api, zarr_id)
    paths = [f"p/{i}" for i in range(2 * batches._CLASH_CHUNK + 7)] + ["q/3/x", "q"]
    problems = batches._queued_clashes(archive, zarr_id, paths)
    assert sorted(problems) == [
        "'q' is a directory of a batch being applied: it can't be a file",
        "'q/3/x' would make 'q/3' a directory, but a batch being applied writes it as a file",
    ]
    with pytest.raises(InvalidInput):
        batches.refuse_file_directory_clashes(archive, zarr_ref(archive, None, zarr_id), ["q"])

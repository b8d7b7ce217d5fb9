"""Issue 11: no presigned URL, late or replayed, can change a Zarr after its batch ended;
batch identity is unique forever; interrupted batches finish; bad trees are refused."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from tests.helpers.api_uploads import (
    assert_nodes_match,
    info,
    open_batch,
    oracle,
    put_files,
    s3_body,
    upload,
)
from tests.helpers.assets import add_zarr_asset, ok
from tests.helpers.databases import SQLITE_ONLY
from tests.helpers.zarr_client import md5
from zarrchive.db.models import UploadBatch
from zarrchive.errors import StorageError
from zarrchive.services.runtime import Archive
from zarrchive.services.zarr_engine import fsck as fsck_service
from zarrchive.services.zarr_engine import uploads
from zarrchive.storage.keys import checksum_node_key, staging_zarr_prefix
from zarrchive.storage.objects import ObjectStore, WrittenVersion

pytestmark = SQLITE_ONLY

FILES = {".zgroup": b"{}", "arr/.zarray": b"{...}", "arr/0": b"zero", "arr/1": b"one"}


def replay(urls: list[dict[str, str]], files: dict[str, bytes]) -> None:
    """PUT again through URLs of a batch that has ended: S3 accepts (the URL is valid)."""
    put_files(urls, files)


def assert_clean(archive: Archive, zarr_id: str) -> None:
    report = fsck_service.fsck(archive, zarr_id)
    assert report.ok, report.problems


def test_urls_point_to_the_batch_staging_area(api: httpx.Client, zarr_id: str) -> None:
    urls = open_batch(api, zarr_id, {"a": b"1"})
    assert f"/zarr-staging/{zarr_id}/" in urls[0]["upload_url"]
    assert f"/zarr/{zarr_id}/" not in urls[0]["upload_url"]


def test_replay_after_a_later_batch_changes_nothing(
    api: httpx.Client, zarr_id: str, archive: Archive, s3: Any
) -> None:
    first = {"arr/0": b"first version"}
    urls = open_batch(api, zarr_id, first)
    put_files(urls, first)
    ok(api.post(f"/api/zarr/{zarr_id}/upload/complete/"))
    later = {**FILES, "arr/0": b"second version"}
    upload(api, zarr_id, later)
    before = info(api, zarr_id)
    replay(urls, first)  # an hour-long URL of the first batch, used again
    assert s3_body(archive, zarr_id, "arr/0") == b"second version"
    assert info(api, zarr_id)["checksum"] == before["checksum"] == oracle(later)
    assert_nodes_match(archive, zarr_id, later, s3)
    assert_clean(archive, zarr_id)


def test_replay_after_delete_does_not_bring_the_file_back(
    api: httpx.Client, zarr_id: str, archive: Archive
) -> None:
    urls = open_batch(api, zarr_id, FILES)
    put_files(urls, FILES)
    ok(api.post(f"/api/zarr/{zarr_id}/upload/complete/"))
    response = api.request("DELETE", f"/api/zarr/{zarr_id}/files/", json=[{"path": "arr/1"}])
    assert response.status_code == 204, response.text
    replay(urls, FILES)
    assert s3_body(archive, zarr_id, "arr/1") is None
    rest = {p: b for p, b in FILES.items() if p != "arr/1"}
    assert info(api, zarr_id)["checksum"] == oracle(rest)
    assert_clean(archive, zarr_id)


def test_replay_after_cancel_changes_nothing(
    api: httpx.Client, zarr_id: str, archive: Archive
) -> None:
    upload(api, zarr_id, FILES)
    before = info(api, zarr_id)
    batch = {"arr/0": b"never", "new": b"never either"}
    urls = open_batch(api, zarr_id, batch)
    put_files(urls, batch)
    assert api.delete(f"/api/zarr/{zarr_id}/upload/").status_code == 204
    replay(urls, batch)
    assert s3_body(archive, zarr_id, "arr/0") == b"zero"
    assert s3_body(archive, zarr_id, "new") is None
    assert info(api, zarr_id)["checksum"] == before["checksum"]
    assert_clean(archive, zarr_id)
    # the replayed objects are garbage in the dead batch's staging area: purged on demand
    assert uploads.purge_stale_staging(archive, zarr_id) == 1
    assert not list(archive.store.iter_objects(staging_zarr_prefix(zarr_id)))


def test_replay_after_publish_leaves_the_published_zarr_unchanged(
    api: httpx.Client, zarr_id: str, dandiset: str, archive: Archive, anon: httpx.Client
) -> None:
    urls = open_batch(api, zarr_id, FILES)
    put_files(urls, FILES)
    zarr = ok(api.post(f"/api/zarr/{zarr_id}/upload/complete/"))
    add_zarr_asset(api, dandiset, zarr_id, "data.zarr")
    ok(api.post(f"/api/dandisets/{dandiset}/versions/draft/publish/"))
    tampered = {p: b"tampered" for p in FILES}
    with httpx.Client(timeout=30) as client:  # same URLs, other bodies: S3 refuses (Content-MD5)
        for item in urls:
            assert client.put(item["upload_url"], content=tampered[item["path"]]).status_code in (
                400,
                403,
            )
    replay(urls, FILES)
    public = archive.store.public_url(f"zarr/{zarr_id}/arr/0")
    assert anon.get(public).content == b"zero"
    assert info(api, zarr_id)["checksum"] == zarr["checksum"] == oracle(FILES)
    assert_clean(archive, zarr_id)


def test_batch_identity_is_never_reused(api: httpx.Client, zarr_id: str, archive: Archive) -> None:
    seen_ids: set[int] = set()
    seen_uids: set[str] = set()
    for _ in range(3):
        open_batch(api, zarr_id, {"a": b"1"})
        with archive.db.session() as session:
            batch = session.query(UploadBatch).one()
            assert batch.id not in seen_ids and batch.uid not in seen_uids
            seen_ids.add(batch.id)
            seen_uids.add(batch.uid)
        assert api.delete(f"/api/zarr/{zarr_id}/upload/").status_code == 204


def test_interrupted_copy_is_finished_by_the_retried_complete(
    api: httpx.Client, zarr_id: str, archive: Archive, s3: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    upload(api, zarr_id, FILES)
    before = info(api, zarr_id)
    batch = {"arr/0": b"new zero", "arr/2": b"two", "b/c": b"c"}
    put_files(open_batch(api, zarr_id, batch), batch)
    copy = ObjectStore.copy_within
    calls = [0]

    def flaky(self: ObjectStore, *args: Any, **kwargs: Any) -> WrittenVersion:
        calls[0] += 1
        if calls[0] > 1:
            raise StorageError("injected: the server died while copying")
        return copy(self, *args, **kwargs)

    monkeypatch.setattr(ObjectStore, "copy_within", flaky)
    response = api.post(f"/api/zarr/{zarr_id}/upload/complete/")
    assert response.status_code == 502
    # the batch is recorded as verified (queued); the tree and the checksum have not moved
    assert info(api, zarr_id)["checksum"] == before["checksum"]
    assert info(api, zarr_id)["upload_state"] == "applying"
    assert api.get(f"/api/zarr/{zarr_id}/upload/").status_code == 404  # none open
    monkeypatch.setattr(ObjectStore, "copy_within", copy)
    # the client retries complete: the batch is finished, exactly once
    response = api.post(f"/api/zarr/{zarr_id}/upload/complete/")
    assert response.status_code == 200, response.text
    final = {**FILES, **batch}
    assert response.json()["checksum"] == oracle(final)
    assert api.get(f"/api/zarr/{zarr_id}/upload/").status_code == 404
    assert_nodes_match(archive, zarr_id, final, s3)
    assert_clean(archive, zarr_id)
    assert not list(archive.store.iter_objects(staging_zarr_prefix(zarr_id)))


def test_interrupted_copy_is_finished_by_the_next_write(
    api: httpx.Client, zarr_id: str, archive: Archive, monkeypatch: pytest.MonkeyPatch
) -> None:
    batch = {"x/1": b"1", "x/2": b"2", "y": b"3"}
    put_files(open_batch(api, zarr_id, batch), batch)
    copy = ObjectStore.copy_within
    monkeypatch.setattr(
        ObjectStore,
        "copy_within",
        lambda *a, **k: (_ for _ in ()).throw(StorageError("injected")),
    )
    assert api.post(f"/api/zarr/{zarr_id}/upload/complete/").status_code == 502
    monkeypatch.setattr(ObjectStore, "copy_within", copy)
    more = {"z": b"4"}
    put_files(open_batch(api, zarr_id, more), more)  # finishes the interrupted batch first
    ok(api.post(f"/api/zarr/{zarr_id}/upload/complete/"))
    assert info(api, zarr_id)["checksum"] == oracle({**batch, **more})
    assert_clean(archive, zarr_id)


@pytest.mark.parametrize(
    ("existing", "batch", "message"),
    [
        ({}, ["a", "a/b"], "'a' is both a file and a directory in the batch"),
        ({"a/b": b"1"}, ["a"], "'a' is a directory of the Zarr: it can't also be a file"),
        (
            {"a": b"1"},
            ["a/b/c"],
            "'a/b/c' would make 'a' a directory, but it is a file of the Zarr",
        ),
    ],
)
def test_file_and_directory_of_one_name_refused(
    api: httpx.Client,
    zarr_id: str,
    existing: dict[str, bytes],
    batch: list[str],
    message: str,
) -> None:
    if existing:
        upload(api, zarr_id, existing)
    before = info(api, zarr_id)
    response = api.post(
        f"/api/zarr/{zarr_id}/upload/", json=[{"path": p, "etag": md5(b"x")} for p in batch]
    )
    assert response.status_code == 400
    assert message in response.json()["detail"]["message"] + str(response.json()["detail"])
    assert api.get(f"/api/zarr/{zarr_id}/upload/").status_code == 404
    assert info(api, zarr_id)["checksum"] == before["checksum"]


def test_checksum_named_entries_and_overlong_keys_refused(api: httpx.Client, zarr_id: str) -> None:
    for path in (".checksum", "a/.checksum", "a/.checksum/b", "/".join(["d" * 200] * 5)):
        response = api.post(
            f"/api/zarr/{zarr_id}/upload/", json=[{"path": path, "etag": md5(b"x")}]
        )
        assert response.status_code == 400, (path, response.text)
    assert api.get(f"/api/zarr/{zarr_id}/upload/").status_code == 404


def test_corrupt_node_is_the_archives_fault_and_fsck_repairs_it(
    api: httpx.Client, zarr_id: str, archive: Archive, anon: httpx.Client
) -> None:
    upload(api, zarr_id, FILES)
    archive.store.put(checksum_node_key(zarr_id, "arr"), b"{not json", "application/json")
    response = api.get(f"/api/zarr/{zarr_id}/arr/")
    assert response.status_code == 500
    assert f"zarrchive admin fsck {zarr_id} --repair" in response.json()["detail"]
    response = api.post(f"/api/zarr/{zarr_id}/upload/", json=[{"path": "arr/2", "etag": md5(b"2")}])
    assert response.status_code == 500
    report = fsck_service.fsck(archive, zarr_id, repair=True)
    assert report.repaired and f"wrong node {checksum_node_key(zarr_id, 'arr')}" in report.problems
    assert api.get(f"/api/zarr/{zarr_id}/arr/").status_code == 200
    assert_clean(archive, zarr_id)

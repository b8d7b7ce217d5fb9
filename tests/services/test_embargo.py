"""Unembargo run through the service (``move_to_public``): its own thread pool, checked
purges, multipart copies."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.conftest import LiveServer, make_settings
from tests.helpers.s3 import object_history, on_s3
from tests.helpers.zarr_client import (
    authed,
    create_dandiset,
    create_zarr,
    expect,
    md5,
    oracle_checksum,
    upload,
)
from zarrchive.db.models import Dandiset, EmbargoStatus
from zarrchive.errors import StorageError
from zarrchive.services.dandi.embargo import move_to_public
from zarrchive.services.runtime import Archive
from zarrchive.services.zarr_engine.fsck import fsck
from zarrchive.storage.seaweedfs import SeaweedFS


def _mark_unembargoing(archive: Archive, identifier: str) -> None:
    with archive.db.session() as session:
        dandiset = session.get(Dandiset, int(identifier))
        assert dandiset is not None
        dandiset.embargo_status = EmbargoStatus.UNEMBARGOING.value


def test_unembargo_copies_run_on_their_own_pool(api: httpx.Client, archive: Archive) -> None:
    """With the store's shared pool (the request handlers') fully busy, unembargo finishes."""
    identifier = create_dandiset(api, "pool", embargo=True)
    zarr_id = create_zarr(api, identifier)
    files = {f"c/{i}": f"chunk {i}".encode() for i in range(20)}
    upload(api, zarr_id, files)
    _mark_unembargoing(archive, identifier)
    release = threading.Event()
    blockers = [
        on_s3(archive.store)._pool.submit(release.wait, 120)
        for _ in range(on_s3(archive.store).max_workers)
    ]
    done = threading.Event()
    errors: list[BaseException] = []

    def run() -> None:
        try:
            move_to_public(archive, int(identifier))
        except BaseException as exc:  # reported below
            errors.append(exc)
        finally:
            done.set()

    worker = threading.Thread(target=run)
    worker.start()
    try:
        finished = done.wait(60)
    finally:
        release.set()
        for blocker in blockers:
            blocker.result(10)
        worker.join(60)
    assert finished, "unembargo waited for the request handlers' pool"
    assert errors == []
    assert {
        o.key.rsplit("/", 2)[-2] + "/" + o.key.rsplit("/", 1)[-1]
        for o in archive.store.iter_objects(f"zarr/{zarr_id}/")
    } == set(files)


@pytest.fixture
def locked_archive(
    seaweedfs: SeaweedFS, bucket: str, database_url: str, tmp_path: Path
) -> Iterator[Archive]:
    """An archive whose embargo bucket has S3 object lock (legal holds refuse deletions)."""
    name = f"zemb-lock-{uuid.uuid4().hex[:10]}"
    client: Any = seaweedfs.client()
    client.create_bucket(Bucket=name, ObjectLockEnabledForBucket=True)
    settings = make_settings(seaweedfs, bucket, database_url, tmp_path, s3_embargo_bucket=name)
    archive = Archive.from_settings(settings)
    try:
        yield archive
    finally:
        archive.close()


@pytest.fixture
def locked_api(live_server: LiveServer, locked_archive: Archive) -> Iterator[httpx.Client]:
    from zarrchive.services.identity.auth import create_user

    with locked_archive.db.session() as session:
        token = create_user(session, "owner", admin=False)[1]
    live_server.app.state.archive = locked_archive
    with authed(live_server.url, token) as client:
        yield client


def test_refused_purge_fails_the_move_and_a_rerun_finishes_it(
    locked_api: httpx.Client, locked_archive: Archive
) -> None:
    archive, api = locked_archive, locked_api
    identifier = create_dandiset(api, "locked", embargo=True)
    zarr_id = create_zarr(api, identifier)
    files = {"x/0": b"zero", "x/1": b"one"}
    upload(api, zarr_id, files)
    key = f"zarr/{zarr_id}/x/0"
    held = archive.embargo_store.head(key)
    assert held is not None and held.version_id
    s3: Any = on_s3(archive.embargo_store).client
    hold = {"Bucket": archive.embargo_store.bucket, "Key": key, "VersionId": held.version_id}
    s3.put_object_legal_hold(**hold, LegalHold={"Status": "ON"})
    _mark_unembargoing(archive, identifier)

    with pytest.raises(StorageError, match="refused to delete 1 of"):
        move_to_public(archive, int(identifier))
    body = expect(api.get(f"/api/dandisets/{identifier}/"))
    assert body["embargo_status"] == "UNEMBARGOING"  # never reported as done
    refused = api.post(f"/api/zarr/{zarr_id}/upload/", json=[{"path": "y", "etag": md5(b"y")}])
    assert refused.status_code == 409  # writes still wait
    assert expect(api.get(f"/api/zarr/{zarr_id}/"))["checksum"] == oracle_checksum(files)

    s3.put_object_legal_hold(**hold, LegalHold={"Status": "OFF"})
    expect(api.post(f"/api/dandisets/{identifier}/unembargo/"))  # the owner runs it again
    body = expect(api.get(f"/api/dandisets/{identifier}/"))
    assert body["embargo_status"] == "OPEN" and body["embargoed"] is False
    assert object_history(archive.store, key) == [b"zero"]  # the rerun copied nothing twice
    assert list(archive.embargo_store.iter_versions(f"zarr/{zarr_id}/")) == []
    assert fsck(archive, zarr_id).ok


def test_large_blobs_are_copied_in_parts(api: httpx.Client, archive: Archive) -> None:
    from tests.helpers.assets import assets_url, upload_blob

    identifier = create_dandiset(api, "big", embargo=True)
    data = bytes(range(256)) * (12 * 1024 * 1024 // 256 + 17)  # 12 MiB and a bit
    blob_id = upload_blob(api, identifier, data)
    expect(
        api.post(assets_url(identifier), json={"metadata": {"path": "big.nwb"}, "blob_id": blob_id})
    )
    _mark_unembargoing(archive, identifier)
    move_to_public(archive, int(identifier), copy_threshold=8 * 1024**2, copy_part_size=5 * 1024**2)
    (asset,) = expect(api.get(assets_url(identifier)))["results"]
    assert asset["blob_id"] == blob_id  # moved, not copied
    with authed(str(api.base_url), None) as anon:
        redirect = anon.get(f"/api/assets/{asset['asset_id']}/download/")
        assert redirect.status_code == 302
        url = redirect.headers["location"]
    got = httpx.get(url, timeout=60)
    assert md5(got.content) == md5(data)
    assert got.headers["ETag"].strip('"').endswith("-3")  # 5 + 5 + 2 MiB: a multipart copy

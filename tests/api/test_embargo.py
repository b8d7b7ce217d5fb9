"""Embargo: unreadable without authorization through the API and straight from S3; unembargo
(object histories kept)."""

from __future__ import annotations

import hashlib
from typing import Any

import httpx
from sqlalchemy import select, update

from tests.conftest import Users
from tests.helpers.api_uploads import FILES, assert_nodes_match, oracle, upload
from tests.helpers.s3 import object_history
from tests.helpers.zarr_client import (
    authed,
    create_dandiset,
    create_zarr,
    delete_files,
    expect,
    oracle_checksum,
)
from zarrchive.db.models import Blob, Dandiset
from zarrchive.jobs import InProcessJobQueue
from zarrchive.manifest import manifest_key
from zarrchive.services.runtime import Archive, set_current_archive
from zarrchive.services.zarr_engine.fsck import fsck
from zarrchive.services.zarr_engine.manifests import write_manifest
from zarrchive.storage.keys import checksum_node_key
from zarrchive.storage.seaweedfs import SeaweedFS


def client(api: httpx.Client, token: str | None) -> httpx.Client:
    headers = {"Authorization": f"token {token}"} if token else {}
    return httpx.Client(base_url=str(api.base_url), headers=headers, timeout=60)


def anonymous_get(seaweedfs: SeaweedFS, bucket: str, key: str) -> int:
    return httpx.get(f"{seaweedfs.endpoint_url}/{bucket}/{key}").status_code


def test_embargoed_zarr_is_private(
    api: httpx.Client,
    users: Users,
    archive: Archive,
    seaweedfs: SeaweedFS,
    embargoed: tuple[str, str],
) -> None:
    identifier, zarr_id = embargoed
    checksum = upload(api, zarr_id, FILES)["checksum"]
    write_manifest(archive, zarr_id)
    private, public = archive.settings.s3_embargo_bucket, archive.settings.s3_bucket
    keys = [
        f"zarr/{zarr_id}/arr/0",
        checksum_node_key(zarr_id, ""),
        checksum_node_key(zarr_id, "arr"),
        manifest_key(zarr_id, checksum),
    ]
    for key in keys:
        assert archive.embargo_store.head(key) is not None, key
        assert archive.store.head(key) is None, key  # nothing in the public bucket
        assert anonymous_get(seaweedfs, private, key) == 403, key
        assert anonymous_get(seaweedfs, public, key) in (403, 404), key
    # anonymous callers are asked to authenticate (401: DANDI's clients send their key only
    # then); strangers learn nothing (404)
    expected = {None: 401, users.other: 404, users.owner: 200, users.admin: 200}
    for token, status in expected.items():
        with client(api, token) as c:
            assert c.get(f"/api/dandisets/{identifier}/").status_code == status
            assert c.get(f"/api/zarr/{zarr_id}/").status_code == status
            assert c.get(f"/api/zarr/{zarr_id}/arr/").status_code == status
            assert c.get(f"/api/zarr/{zarr_id}/manifests/").status_code == status
            assert c.get("/api/zarr/", params={"dandiset": identifier}).status_code == status
    listed = api.get("/api/zarr/", params={"page_size": 1000}).json()["results"]
    assert zarr_id in [z["zarr_id"] for z in listed]
    with client(api, users.other) as other:
        page = other.get("/api/zarr/", params={"page_size": 1000}).json()
        assert zarr_id not in [z["zarr_id"] for z in page["results"]]
    # owners get a presigned URL for the manifest
    url = api.get(f"/api/zarr/{zarr_id}/").json()["manifest_url"]
    assert httpx.get(url).status_code == 200


def test_unembargo_makes_everything_public(
    api: httpx.Client,
    users: Users,
    archive: Archive,
    seaweedfs: SeaweedFS,
    s3: Any,
    embargoed: tuple[str, str],
) -> None:
    identifier, zarr_id = embargoed
    checksum = upload(api, zarr_id, FILES)["checksum"]
    for token, status in ((None, 401), (users.other, 404)):
        with client(api, token) as c:
            assert c.post(f"/api/dandisets/{identifier}/unembargo/").status_code == status
    queue = InProcessJobQueue(backoff=0.1)
    archive.jobs = queue
    set_current_archive(archive)
    try:
        response = api.post(f"/api/dandisets/{identifier}/unembargo/")
        assert response.status_code == 200, response.text
        assert queue.join(timeout=60)
        queue.close()
    finally:
        archive.jobs = None
        set_current_archive(None)
    body = api.get(f"/api/dandisets/{identifier}/").json()
    assert body["embargoed"] is False and body["embargo_status"] == "OPEN"
    public = archive.settings.s3_bucket
    for key in [
        f"zarr/{zarr_id}/arr/0",
        checksum_node_key(zarr_id, "arr"),
        manifest_key(zarr_id, checksum),
    ]:
        assert anonymous_get(seaweedfs, public, key) == 200, key
        assert archive.embargo_store.head(key) is None, key
    assert list(archive.embargo_store.iter_versions(f"zarr/{zarr_id}/")) == []
    with client(api, None) as anon:
        info = anon.get(f"/api/zarr/{zarr_id}/").json()
    assert info["checksum"] == checksum == oracle(FILES)
    assert info["s3_url"].startswith(f"{seaweedfs.endpoint_url}/{public}/")
    assert httpx.get(info["manifest_url"]).status_code == 200
    assert fsck(archive, zarr_id).ok
    assert_nodes_match(archive, zarr_id, FILES, s3)
    # a second unembargo: nothing to do
    assert api.post(f"/api/dandisets/{identifier}/unembargo/").status_code == 409


def test_unembargo_keeps_every_object_version(
    api: httpx.Client, archive: Archive, users: Users
) -> None:
    identifier = create_dandiset(api, "history", embargo=True)
    zarr_id = create_zarr(api, identifier)
    upload(api, zarr_id, {"a/0": b"first", "a/1": b"doomed", "b": b"bee"})
    upload(api, zarr_id, {"a/0": b"second"})
    info = delete_files(api, zarr_id, ["a/1"])
    final = {"a/0": b"second", "b": b"bee"}
    assert info["checksum"] == oracle_checksum(final)
    node = f"zarr_checksums/{zarr_id}/a/.checksum"
    node_history = object_history(archive.embargo_store, node)
    assert len(node_history) == 3  # one node per batch

    expect(api.post(f"/api/dandisets/{identifier}/unembargo/"))  # no job queue: runs inline

    public = archive.store
    assert object_history(public, f"zarr/{zarr_id}/a/0") == [b"first", b"second"]
    assert object_history(public, f"zarr/{zarr_id}/a/1") == [b"doomed", None]
    assert object_history(public, node) == node_history
    assert list(archive.embargo_store.iter_versions(f"zarr/{zarr_id}/")) == []
    assert list(archive.embargo_store.iter_versions(f"zarr_checksums/{zarr_id}/")) == []
    with authed(str(api.base_url), None) as anon:
        body = expect(anon.get(f"/api/dandisets/{identifier}/"))
        assert body["embargo_status"] == "OPEN" and body["embargoed"] is False
        assert expect(anon.get(f"/api/zarr/{zarr_id}/"))["checksum"] == oracle_checksum(final)
    assert fsck(archive, zarr_id).ok


def test_writes_wait_while_unembargoing(
    api: httpx.Client, archive: Archive, embargoed: tuple[str, str]
) -> None:
    identifier, zarr_id = embargoed
    with archive.db.session() as session:
        dandiset = session.scalar(select(Dandiset).where(Dandiset.id == int(identifier)))
        assert dandiset is not None
        dandiset.embargo_status = "unembargoing"
    response = api.post(f"/api/zarr/{zarr_id}/upload/", json=[{"path": "a", "etag": "a" * 32}])
    assert response.status_code == 409 and "unembargoed" in response.json()["detail"]
    assert api.get(f"/api/dandisets/{identifier}/").json()["embargo_status"] == "UNEMBARGOING"


def test_unembargo_refused_while_a_batch_is_open(
    api: httpx.Client, embargoed: tuple[str, str]
) -> None:
    identifier, zarr_id = embargoed
    api.post(f"/api/zarr/{zarr_id}/upload/", json=[{"path": "a", "etag": "a" * 32}])
    response = api.post(f"/api/dandisets/{identifier}/unembargo/")
    assert response.status_code == 409 and zarr_id in response.json()["detail"]


def test_public_zarr_is_world_readable(
    api: httpx.Client, zarr_id: str, archive: Archive, seaweedfs: SeaweedFS
) -> None:
    upload(api, zarr_id, FILES)
    bucket = archive.settings.s3_bucket
    assert httpx.get(f"{seaweedfs.endpoint_url}/{bucket}/zarr/{zarr_id}/arr/0").content == b"zero"
    node = checksum_node_key(zarr_id, "")
    assert anonymous_get(seaweedfs, bucket, node) == 200


def test_unembargo_moves_blobs_and_copies_shared_ones(
    api: httpx.Client, archive: Archive, seaweedfs: SeaweedFS
) -> None:
    from tests.helpers.assets import assets_url, ok, upload_blob

    first, second = (
        ok(api.post("/api/dandisets/", json={"name": n, "embargo": True}))["identifier"]
        for n in ("first", "second")
    )
    shared, own = b"the same bytes in both dandisets", b"only in the first"
    shared_id = upload_blob(api, first, shared)
    assert upload_blob(api, second, shared) == shared_id  # stored once
    own_id = upload_blob(api, first, own)
    for dandiset, blob_id, path in (
        (first, shared_id, "a.nwb"),
        (first, own_id, "b.nwb"),
        (second, shared_id, "a.nwb"),
    ):
        ok(api.post(assets_url(dandiset), json={"metadata": {"path": path}, "blob_id": blob_id}))
    sha256 = hashlib.sha256(shared).hexdigest()
    with archive.db.write_session() as session:  # (as the digest job records it)
        session.execute(update(Blob).where(Blob.id == shared_id).values(sha256=sha256))
    ok(api.post(f"/api/dandisets/{first}/unembargo/"))

    assets = {a["path"]: a for a in ok(api.get(assets_url(first)))["results"]}
    assert assets["b.nwb"]["blob_id"] == own_id  # moved
    assert assets["a.nwb"]["blob_id"] != shared_id  # copied: a public blob of its own
    with archive.db.session() as session:  # the copy keeps every digest of the content
        copy = session.get(Blob, assets["a.nwb"]["blob_id"])
        assert copy is not None and (copy.sha256, copy.embargoed) == (sha256, False)
    with httpx.Client(base_url=str(api.base_url)) as anon:
        for path, body in (("a.nwb", shared), ("b.nwb", own)):
            redirect = anon.get(f"/api/assets/{assets[path]['asset_id']}/download/")
            assert redirect.status_code == 302
            assert httpx.get(redirect.headers["location"]).content == body
        # the second dandiset keeps its private blob
        (kept,) = ok(api.get(assets_url(second)))["results"]
        assert kept["blob_id"] == shared_id
        assert anon.get(f"/api/assets/{kept['asset_id']}/download/").status_code == 401
    owner_view = api.get(f"/api/assets/{kept['asset_id']}/download/")
    assert (
        owner_view.status_code == 302
        and httpx.get(owner_view.headers["location"]).content == shared
    )


def test_download_urls(
    api: httpx.Client, users: Users, archive: Archive, zarr_id: str, embargoed: tuple[str, str]
) -> None:
    _, private_id = embargoed
    upload(api, private_id, FILES)
    upload(api, zarr_id, FILES)
    body = [{"path": "arr/0"}, {"path": "arr/sub/deep/x"}]
    for zid in (private_id, zarr_id):
        urls = api.post(f"/api/zarr/{zid}/download/", json=body).json()
        assert [u["path"] for u in urls] == ["arr/0", "arr/sub/deep/x"]
        assert httpx.get(urls[0]["url"]).content == b"zero"
        assert httpx.get(urls[1]["url"]).content == b"deep x"
    public = api.post(f"/api/zarr/{zarr_id}/download/", json=body).json()
    assert public[0]["url"] == archive.store.public_url(f"zarr/{zarr_id}/arr/0")
    for token, status in ((None, 401), (users.other, 404)):
        with client(api, token) as c:
            assert c.post(f"/api/zarr/{private_id}/download/", json=body).status_code == status
            assert c.post(f"/api/zarr/{zarr_id}/download/", json=body).status_code == 200
    assert api.post(f"/api/zarr/{zarr_id}/download/", json=[]).status_code == 400
    assert api.post(f"/api/zarr/{zarr_id}/download/", json=[{"path": "/x"}]).status_code == 400
    too_many = [{"path": f"f{i}"} for i in range(501)]
    assert api.post(f"/api/zarr/{zarr_id}/download/", json=too_many).status_code == 400

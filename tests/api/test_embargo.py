"""Embargo: unreadable without authorization through the API and straight from S3; unembargo."""

from __future__ import annotations

import dataclasses
from typing import Any

import httpx
import pytest
from sqlalchemy import select

from tests.conftest import Users
from tests.helpers.api_uploads import FILES, assert_nodes_match, oracle, upload
from zarrchive.config import redact_url
from zarrchive.db.models import Dandiset, Zarr
from zarrchive.jobs import InProcessJobQueue
from zarrchive.manifest import manifest_key
from zarrchive.services.fsck import fsck
from zarrchive.services.manifests import manifest_url, write_manifest
from zarrchive.services.runtime import Archive, set_current_archive
from zarrchive.services.zarrs import ZarrRef
from zarrchive.storage.keys import checksum_node_key
from zarrchive.storage.seaweedfs import SeaweedFS


def client(api: httpx.Client, token: str | None) -> httpx.Client:
    headers = {"Authorization": f"token {token}"} if token else {}
    return httpx.Client(base_url=str(api.base_url), headers=headers, timeout=60)


@pytest.fixture
def embargoed(api: httpx.Client) -> tuple[str, str]:
    response = api.post("/api/dandisets/", json={"name": "secret", "embargo": True})
    assert response.status_code == 200
    dandiset = response.json()
    assert dandiset["embargoed"] is True and dandiset["embargo_status"] == "EMBARGOED"
    zarr = api.post("/api/zarr/", json={"name": "s.zarr", "dandiset": dandiset["identifier"]})
    return dandiset["identifier"], zarr.json()["zarr_id"]


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
    ok(api.post(f"/api/dandisets/{first}/unembargo/"))

    assets = {a["path"]: a for a in ok(api.get(assets_url(first)))["results"]}
    assert assets["b.nwb"]["blob_id"] == own_id  # moved
    assert assets["a.nwb"]["blob_id"] != shared_id  # copied: a public blob of its own
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


def test_embargoed_manifest_urls_follow_the_presign_expiry(
    api: httpx.Client, archive: Archive, embargoed: tuple[str, str]
) -> None:
    _identifier, zarr_id = embargoed
    upload(api, zarr_id, FILES)
    write_manifest(archive, zarr_id)
    short = dataclasses.replace(
        archive, settings=archive.settings.with_overrides(presign_expiry=77)
    )
    with archive.db.session() as session:
        zarr = session.get(Zarr, zarr_id)
        assert zarr is not None
        url = manifest_url(short, ZarrRef.of(zarr), zarr.checksum)
    assert "X-Amz-Expires=77" in url
    assert httpx.get(url).status_code == 200


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("redis://:s3cret@127.0.0.1:6379/0", "redis://:***@127.0.0.1:6379/0"),
        ("redis://user:p%40ss@host/1", "redis://user:***@host/1"),
        ("postgresql+psycopg://u:pw@[::1]:5432/db", "postgresql+psycopg://u:***@[::1]:5432/db"),
        ("redis://127.0.0.1:6379", "redis://127.0.0.1:6379"),
        ("sqlite:////tmp/x.sqlite3", "sqlite:////tmp/x.sqlite3"),
    ],
)
def test_urls_are_logged_without_passwords(url: str, shown: str) -> None:
    assert redact_url(url) == shown

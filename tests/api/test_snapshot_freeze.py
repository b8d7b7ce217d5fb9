"""Freeze mode (the default): publishing freezes the Zarr as the spec says, and the snapshot
routes serve its one pinned state."""

from __future__ import annotations

import httpx

from tests.helpers.api_uploads import upload
from tests.helpers.assets import add_zarr_asset, assets_url, ok
from tests.helpers.snapshots import oracle, read_snapshot, snapshot_base
from tests.helpers.zarr_client import md5
from zarrchive.services.runtime import Archive

FILES = {".zgroup": b"{}", "arr/0": b"zero", "arr/1": b"one"}


def test_frozen_zarr_has_one_snapshot(
    api: httpx.Client, anon: httpx.Client, archive: Archive, dandiset: str, zarr_id: str
) -> None:
    upload(api, zarr_id, FILES)
    add_zarr_asset(api, dandiset, zarr_id, "data.zarr")
    assert ok(api.get("/api/info/"))["published_zarrs"] == "freeze"
    version = ok(api.post(f"/api/dandisets/{dandiset}/versions/draft/publish/"))["version"]
    checksum = oracle(FILES)
    listed = ok(anon.get(f"/api/zarr/{zarr_id}/snapshots/"))
    assert [(s["checksum"], s["versions"], s["frozen"]) for s in listed] == [
        (checksum, [version], True)
    ]
    # its manifest is written on first read when the job has not run yet (no queue here)
    assert read_snapshot(anon, zarr_id, checksum) == FILES
    assert ok(anon.get(snapshot_base(zarr_id, checksum)))["manifest_url"]
    entry = ok(anon.get(snapshot_base(zarr_id, checksum) + "arr/1"))
    assert entry["md5"] == md5(b"one") and "versionId=" in entry["s3_url"]
    # the spec's behaviour is unchanged: the Zarr refuses writes, and the published asset
    # names the (frozen) Zarr (400: DANDI gives no download link for a Zarr)
    response = api.post(f"/api/zarr/{zarr_id}/upload/", json=[{"path": "x", "etag": md5(b"x")}])
    assert response.status_code == 403
    asset = ok(api.get(assets_url(dandiset, version)))["results"][0]
    response = api.get(f"/api/assets/{asset['asset_id']}/download/")
    assert response.status_code == 400
    assert f"/api/zarr/{zarr_id}/ " in response.json()["detail"]

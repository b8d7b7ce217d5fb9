"""Helpers of the shared-Zarr tests (#39 item 2): a published Zarr in dandiset A, an asset of
dandiset B naming it, and everything B's users see of that asset."""

from __future__ import annotations

from typing import Any

import httpx

from tests.helpers.api_uploads import upload
from tests.helpers.assets import assets_url, ok
from tests.helpers.snapshots import read_live, read_snapshot
from tests.helpers.zarr_client import create_dandiset, create_zarr

#: The files of A's Zarr when A publishes it.
FIRST = {".zattrs": b'{"a": 1}', "x/0": b"first chunk", "x/1": b"kept chunk"}
#: Where B's asset is.
SHARED_PATH = "from-a/shared.zarr"


def publish(api: httpx.Client, dandiset: str) -> str:
    return str(ok(api.post(f"/api/dandisets/{dandiset}/versions/draft/publish/"))["version"])


def published_zarr(api: httpx.Client, files: dict[str, bytes]) -> tuple[str, str, str]:
    """Dandiset A with a Zarr asset holding *files*, published: (A, Zarr id, asset id)."""
    dandiset = create_dandiset(api, "A")
    zarr_id = create_zarr(api, dandiset, "shared.zarr")
    upload(api, zarr_id, files)
    body = {"metadata": {"path": "shared.zarr"}, "zarr_id": zarr_id}
    asset_id = str(ok(api.post(assets_url(dandiset), json=body))["asset_id"])
    publish(api, dandiset)
    return dandiset, zarr_id, asset_id


def share(api: httpx.Client, dandiset: str, zarr_id: str, status: int = 200, **extra: Any) -> Any:
    """``POST`` an asset of *dandiset* at :data:`SHARED_PATH` naming *zarr_id* (the answer,
    checked to be *status*)."""
    body = {"metadata": {"path": SHARED_PATH}, "zarr_id": zarr_id, **extra}
    return ok(api.post(assets_url(dandiset), json=body), status)


def what_b_reads(api: httpx.Client, dandiset: str, asset_id: str) -> dict[str, Any]:
    """Everything B's users see of the asset: its routes (metadata, info, listing, paths),
    and the bytes its download route and its page's link lead to (the snapshot's files, or
    the frozen Zarr's)."""
    metadata = ok(api.get(f"{assets_url(dandiset)}{asset_id}/"))
    info = ok(api.get(f"/api/assets/{asset_id}/info/"))
    listed = ok(api.get(assets_url(dandiset), params={"metadata": "true"}))["results"]
    folder = SHARED_PATH.rpartition("/")[0]
    paths = ok(api.get(f"{assets_url(dandiset)}paths/", params={"path_prefix": folder}))
    download = api.get(f"/api/assets/{asset_id}/download/")
    assert download.status_code == 400, download.text
    page = api.get(f"/download/asset/{asset_id}")  # the files page's "open" link
    assert page.status_code == 302, page.text
    shared = info["shared_zarr"]
    if shared["mode"] == "snapshot":
        assert shared["snapshot_url"] in download.text
        assert page.headers["location"] == shared["snapshot_url"]
        files = read_snapshot(api, info["zarr_id"], shared["checksum"])
    else:
        assert page.headers["location"] == f"/zarr/{info['zarr_id']}/"
        files = read_live(api, info["zarr_id"])
    info.pop("modified")  # (a restored asset's changes)
    return {
        "metadata": metadata,
        "info": info,
        "listed": [a["metadata"] for a in listed],
        "paths": paths["results"],
        "files": files,
    }

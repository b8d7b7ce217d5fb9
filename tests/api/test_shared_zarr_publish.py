"""One Zarr in several dandisets (#39 item 2), snapshot mode, part 2: what dandiset A does to
its draft Zarr never reaches dandiset B, whose asset pinned a published state of it.

- B's trash holding its shared asset never blocks A's uploads (only A's own trash does);
- B publishes whatever A's draft is doing (its Zarr emptied, a batch open): B's version pins
  the state B's asset reads, and reads it byte for byte;
- B's draft shows the pinned state (checksum, file count, size) in the API's version info
  and on its pages, and its files page links to that snapshot.

On SeaweedFS (the snapshot's files are read through their versioned URLs)."""

from __future__ import annotations

import urllib.parse

import httpx
import pytest

from tests.helpers.api_uploads import upload
from tests.helpers.assets import assets_url, ok
from tests.helpers.databases import SQLITE_ONLY
from tests.helpers.shared_zarrs import FIRST, SHARED_PATH, publish, published_zarr, share
from tests.helpers.snapshots import oracle, read_snapshot
from tests.helpers.zarr_client import create_dandiset, delete_files, md5, wait_at_rest
from zarrchive.config import PublishedZarrs

pytestmark = [SQLITE_ONLY, pytest.mark.settings(published_zarrs=PublishedZarrs.SNAPSHOT)]

#: What A's draft Zarr holds after its publication (not published).
LATER = {".zattrs": b'{"a": 2}', "x/0": b"changed in A's draft", "y/0": b"new", "y/1": b"more"}


def open_batch(api: httpx.Client, zarr_id: str) -> None:
    """Open an upload batch on the Zarr and leave it open."""
    ok(api.post(f"/api/zarr/{zarr_id}/upload/", json=[{"path": "z/0", "etag": md5(b"z")}]))


def test_b_s_trash_never_blocks_a_s_uploads(api: httpx.Client) -> None:
    a, zarr_id, a_asset = published_zarr(api, FIRST)
    b = create_dandiset(api, "B")
    shared = share(api, b, zarr_id)
    assert shared["shared_zarr"]["mode"] == "snapshot"
    ok(api.delete(f"{assets_url(b)}{shared['asset_id']}/"), 204)  # into B's trash

    # A changes its draft Zarr: B's trashed asset reads a pinned state, which this leaves be
    upload(api, zarr_id, {"x/0": b"A goes on"})
    assert ok(api.get(f"/api/zarr/{zarr_id}/"))["checksum"] != oracle(FIRST)
    # B's trash lists the size of the state the asset pinned
    (item,) = ok(api.get(f"/api/dandisets/{b}/trash/"))
    assert item["size"] == sum(len(v) for v in FIRST.values())

    # A's own trash still holds the Zarr as it was deleted (restore the asset first)
    ok(api.delete(f"{assets_url(a)}{a_asset}/"), 204)
    change = [{"path": "x/1", "etag": md5(b"refused")}]
    refused = api.post(f"/api/zarr/{zarr_id}/upload/", json=change)
    assert refused.status_code == 409, refused.text
    assert "restore the asset" in refused.json()["detail"]


def test_b_publishes_the_state_it_pinned_whatever_a_s_draft_does(api: httpx.Client) -> None:
    _, zarr_id, _ = published_zarr(api, FIRST)
    pinned = oracle(FIRST)
    b = create_dandiset(api, "B")
    asset_id = share(api, b, zarr_id)["asset_id"]

    # A empties its draft Zarr: B publishes (the emptied Zarr is A's business)
    delete_files(api, zarr_id, sorted(FIRST))
    assert wait_at_rest(api, zarr_id)["file_count"] == 0
    first = publish(api, b)
    # A fills it with another state and leaves a batch open: B publishes again
    upload(api, zarr_id, LATER)
    open_batch(api, zarr_id)
    second = publish(api, b)

    for version in (first, second):
        (copy,) = ok(api.get(assets_url(b, version), params={"metadata": "true"}))["results"]
        assert copy["metadata"]["digest"] == {"dandi:dandi-zarr-checksum": pinned}
        info = ok(api.get(f"/api/assets/{copy['asset_id']}/info/"))
        assert info["shared_zarr"]["checksum"] == pinned
        assert info["shared_zarr"]["mode"] == "snapshot"
        download = api.get(f"/api/assets/{copy['asset_id']}/download/")
        assert info["shared_zarr"]["snapshot_url"] in download.text
        zarrs = ok(api.get(f"/api/dandisets/{b}/versions/{version}/info/"))["zarrs"]
        assert [(z["zarr_id"], z["checksum"]) for z in zarrs] == [(zarr_id, pinned)]
        assert read_snapshot(api, zarr_id, pinned) == FIRST
    # the Zarr's snapshots: B's versions pin the shared state, never A's live one
    snapshots = ok(api.get(f"/api/zarr/{zarr_id}/snapshots/"))
    assert {s["checksum"] for s in snapshots} == {pinned}
    (snapshot,) = snapshots
    assert {first, second} <= set(snapshot["versions"])
    assert asset_id  # B's draft asset still reads the same state
    assert ok(api.get(f"/api/assets/{asset_id}/info/"))["shared_zarr"]["checksum"] == pinned


def test_b_s_draft_shows_the_pinned_state(api: httpx.Client, anon: httpx.Client) -> None:
    _, zarr_id, _ = published_zarr(api, FIRST)
    pinned = oracle(FIRST)
    size = sum(len(v) for v in FIRST.values())
    upload(api, zarr_id, LATER)  # A's draft Zarr: more files, other sizes
    live = ok(api.get(f"/api/zarr/{zarr_id}/"))
    assert live["checksum"] != pinned and live["size"] != size
    b = create_dandiset(api, "B")
    share(api, b, zarr_id)

    # the API: the draft's Zarrs and size
    info = ok(api.get(f"/api/dandisets/{b}/versions/draft/info/"))
    (zarr,) = info["zarrs"]
    assert (zarr["checksum"], zarr["file_count"], zarr["size"]) == (pinned, len(FIRST), size)
    assert info["size"] == size

    # the pages: the folder's and the asset's sizes, the link to the pinned snapshot
    folder, name = SHARED_PATH.rsplit("/", 1)
    top = anon.get(f"/dandiset/{b}/draft/files")
    assert top.status_code == 200, top.text
    assert f'title="{size} bytes"' in top.text and f'title="{live["size"]} bytes"' not in top.text
    files = anon.get(f"/dandiset/{b}/draft/files", params={"location": folder})
    assert files.status_code == 200, files.text
    snapshot = f"/api/zarr/{zarr_id}/snapshots/{urllib.parse.quote(pinned, safe='')}/"
    assert f'<a href="{snapshot}">{name}</a>' in files.text
    assert f'href="/zarr/{zarr_id}/' not in files.text and pinned in files.text
    assert f'title="{size} bytes"' in files.text
    assert ok(anon.get(snapshot))["checksum"] == pinned  # the link leads to that state
    page = anon.get(f"/dandiset/{b}/draft")  # its Zarrs table and size
    assert page.status_code == 200, page.text
    assert pinned in page.text and live["checksum"] not in page.text
    assert f'title="{live["size"]} bytes"' not in page.text
    # the list of dandisets: A shows its published version, B its draft (the pinned size)
    listing = anon.get("/")
    assert listing.status_code == 200, listing.text
    assert f'title="{size} bytes"' in listing.text
    assert f'title="{live["size"]} bytes"' not in listing.text

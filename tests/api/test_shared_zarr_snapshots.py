"""One Zarr in several dandisets (#39 item 2), snapshot mode: an asset of dandiset B reads a
published snapshot of dandiset A's Zarr for ever, whatever A's draft does (changes,
deletions, its asset deleted and purged) and whatever gc removes; B's trash and B's
publication keep the state.  On SeaweedFS (gc deletes object versions)."""

from __future__ import annotations

from datetime import timedelta

import httpx
import pytest

from tests.helpers.api_uploads import upload
from tests.helpers.assets import assets_url, ok
from tests.helpers.databases import SQLITE_ONLY
from tests.helpers.shared_zarrs import FIRST, publish, published_zarr, share, what_b_reads
from tests.helpers.snapshots import gc_now, oracle, read_snapshot
from tests.helpers.zarr_client import create_dandiset, delete_files, wait_at_rest
from zarrchive.config import PublishedZarrs
from zarrchive.services.dandi.trash import purge_expired
from zarrchive.services.runtime import Archive
from zarrchive.services.zarr_engine import shared_zarrs
from zarrchive.services.zarr_engine.snapshots import unreferenced_zarrs

pytestmark = [SQLITE_ONLY, pytest.mark.settings(published_zarrs=PublishedZarrs.SNAPSHOT)]
NONE = timedelta(0)


def test_b_reads_a_published_snapshot_for_ever_whatever_a_does(
    api: httpx.Client, archive: Archive
) -> None:
    a, zarr_id, a_asset = published_zarr(api, FIRST)
    pinned = oracle(FIRST)
    # A's draft moves on (the Zarr stays writable in snapshot mode): not published
    upload(api, zarr_id, {"x/0": b"changed in the draft", "y/0": b"new"})
    live = ok(api.get(f"/api/zarr/{zarr_id}/"))["checksum"]
    assert live != pinned
    b = create_dandiset(api, "B")

    # a checksum no published version pins: 409, nothing recorded
    refused = share(api, b, zarr_id, 409, zarr_checksum=live)
    assert "no published snapshot" in refused["detail"]
    assert ok(api.get(assets_url(b)))["count"] == 0

    shared = share(api, b, zarr_id)  # the newest published state
    # the asset names the state's read-only view (test_shared_zarr_views.py), A's Zarr beside
    assert shared["zarr_id"] == shared["zarr"] != zarr_id and shared["dandiset"] == b
    assert shared["shared_zarr"]["zarr_id"] == zarr_id
    assert shared["shared_zarr"]["mode"] == "snapshot"
    assert shared["shared_zarr"]["checksum"] == pinned and shared["shared_zarr"]["dandiset"] == a
    asset_id = shared["asset_id"]
    seen = what_b_reads(api, b, asset_id)
    assert seen["metadata"]["digest"] == {"dandi:dandi-zarr-checksum": pinned}
    assert seen["metadata"]["contentSize"] == sum(len(v) for v in FIRST.values())
    assert seen["paths"][0]["aggregate_size"] == seen["metadata"]["contentSize"]
    assert seen["files"] == FIRST

    # A's draft changes the Zarr again, deletes files, then deletes its asset; A's trash is
    # purged and gc runs with no grace: B reads the same, byte for byte
    upload(api, zarr_id, {"x/1": b"overwritten"})
    delete_files(api, zarr_id, [".zattrs", "x/0"])
    wait_at_rest(api, zarr_id)
    ok(api.delete(f"{assets_url(a)}{a_asset}/"), 204)
    with archive.db.write_session() as session:
        purge_expired(session, days=0)
    assert zarr_id not in {z.zarr_id for z in unreferenced_zarrs(archive, grace=NONE)}
    report = gc_now(archive, zarr_id, apply=True)
    assert report.versions.skipped is None and report.versions.versions  # A's own leftovers
    assert what_b_reads(api, b, asset_id) == seen

    # B's trash keeps the pin: deleted and restored, the asset reads the same state
    ok(api.delete(f"{assets_url(b)}{asset_id}/"), 204)
    with archive.db.session() as session:
        assert shared_zarrs.held_checksums(session, zarr_id) == {pinned}
    ok(api.post(f"/api/dandisets/{b}/trash/{asset_id}/restore/"))
    assert what_b_reads(api, b, asset_id) == seen

    # B publishes: its version reads the same state (its metadata pinned it)
    version = publish(api, b)
    (published,) = ok(api.get(assets_url(b, version), params={"metadata": "true"}))["results"]
    assert published["metadata"]["digest"] == {"dandi:dandi-zarr-checksum": pinned}
    copy = ok(api.get(f"/api/assets/{published['asset_id']}/info/"))
    assert copy["shared_zarr"]["checksum"] == pinned
    assert read_snapshot(api, zarr_id, copy["shared_zarr"]["checksum"]) == FIRST

"""``admin gc`` removes whole Zarrs that nothing references (no asset of any version, no
published version), once unchanged for the grace period, and nothing else."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import httpx
from typer.testing import CliRunner

from tests.helpers.api_uploads import upload
from tests.helpers.assets import add_zarr_asset, assets_url, ok
from tests.helpers.databases import SQLITE_ONLY
from tests.helpers.snapshots import admin_env
from zarrchive.cli import app
from zarrchive.config import Settings
from zarrchive.db.models import Zarr, utcnow
from zarrchive.services.dandi.trash import purge_expired
from zarrchive.services.runtime import Archive
from zarrchive.services.zarr_engine.snapshots import remove_unreferenced_zarr, unreferenced_zarrs

pytestmark = SQLITE_ONLY

NONE = timedelta(0)


def keys(s3: Any, bucket: str, zarr_id: str) -> list[str]:
    found = []
    for prefix in ("zarr/", "zarr_checksums/", "zarr-manifest/", "zarr-staging/"):
        listing = s3.list_object_versions(Bucket=bucket, Prefix=f"{prefix}{zarr_id}/")
        found += [v["Key"] for v in listing.get("Versions", []) + listing.get("DeleteMarkers", [])]
    return found


def new_zarr(api: httpx.Client, dandiset: str, name: str) -> str:
    zarr_id: str = ok(api.post("/api/zarr/", json={"name": name, "dandiset": dandiset}))["zarr_id"]
    upload(api, zarr_id, {"a/0": b"zero", "b": b"bee"})
    return zarr_id


def test_unreferenced_zarrs_are_found_and_removed(
    api: httpx.Client, archive: Archive, dandiset: str, s3: Any, bucket: str
) -> None:
    orphan = new_zarr(api, dandiset, "orphan.zarr")
    kept = new_zarr(api, dandiset, "kept.zarr")
    add_zarr_asset(api, dandiset, kept, "kept.zarr")
    dropped = new_zarr(api, dandiset, "dropped.zarr")
    asset = add_zarr_asset(api, dandiset, dropped, "dropped.zarr")
    ok(api.delete(f"{assets_url(dandiset)}{asset['asset_id']}/"), 204)
    # an upload in progress (its asset comes last) is never a candidate
    busy: str = ok(api.post("/api/zarr/", json={"name": "busy.zarr", "dandiset": dandiset}))[
        "zarr_id"
    ]
    ok(api.post(f"/api/zarr/{busy}/upload/", json=[{"path": "x", "etag": "0" * 32}]))

    # within the grace period: nothing
    assert unreferenced_zarrs(archive, grace=timedelta(days=7)) == []
    assert not remove_unreferenced_zarr(archive, orphan, grace=timedelta(days=7))
    # a deleted asset's Zarr is kept while the asset is in the trash (restorable) ...
    found = unreferenced_zarrs(archive, grace=NONE, now=utcnow() + timedelta(seconds=1))
    assert dropped not in {z.zarr_id for z in found}
    # ... and is garbage once the trash is purged (ZARRCHIVE_TRASH_DAYS later)
    with archive.db.write_session() as session:
        assert purge_expired(session, days=0, now=utcnow() + timedelta(seconds=1)).assets == 1
    # past it: the Zarr never attached and the one whose asset was deleted
    found = unreferenced_zarrs(archive, grace=NONE, now=utcnow() + timedelta(seconds=1))
    assert {(z.zarr_id, z.name, z.file_count, z.size) for z in found} == {
        (orphan, "orphan.zarr", 2, 7),
        (dropped, "dropped.zarr", 2, 7),
    }
    assert keys(s3, bucket, orphan)
    later = utcnow() + timedelta(seconds=1)
    assert remove_unreferenced_zarr(archive, orphan, grace=NONE, now=later)
    assert keys(s3, bucket, orphan) == []
    with archive.db.session() as session:
        assert session.get(Zarr, orphan) is None
        assert session.get(Zarr, kept) is not None
    assert api.get(f"/api/zarr/{orphan}/").status_code == 404
    # referenced meanwhile: kept (checked again under the Zarr's lock)
    add_zarr_asset(api, dandiset, dropped, "dropped-again.zarr")
    assert not remove_unreferenced_zarr(archive, dropped, grace=NONE, now=later)
    assert keys(s3, bucket, dropped)
    assert ok(api.get(f"/api/zarr/{kept}/"))["file_count"] == 2


def test_admin_gc_lists_then_removes_an_unreferenced_zarr(
    api: httpx.Client, dandiset: str, settings: Settings, s3: Any, bucket: str
) -> None:
    orphan = new_zarr(api, dandiset, "orphan.zarr")
    env = {**admin_env(settings), "ZARRCHIVE_GC_GRACE_DAYS": "0"}
    result = CliRunner().invoke(app, ["admin", "gc"], env=env)
    assert result.exit_code == 0, result.stderr
    (line,) = [
        r for r in result.stdout.splitlines() if r.startswith(f"would remove\tzarr/{orphan}/")
    ]
    assert f"(Zarr {dandiset}/orphan.zarr: no asset or version references it" in line
    assert line.endswith("\t7")
    assert "and 1 unreferenced Zarrs" in result.stderr
    assert keys(s3, bucket, orphan)  # a dry run
    week = CliRunner().invoke(app, ["admin", "gc", "--apply"], env=admin_env(settings))
    assert week.exit_code == 0 and orphan not in week.stdout  # the default grace: 7 days
    result = CliRunner().invoke(app, ["admin", "gc", "--apply", "--grace-days", "0"], env=env)
    assert result.exit_code == 0, result.stderr
    assert f"removed\tzarr/{orphan}/" in result.stdout
    assert keys(s3, bucket, orphan) == []
    assert api.get(f"/api/zarr/{orphan}/").status_code == 404

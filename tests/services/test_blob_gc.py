"""``admin gc`` removes blobs that nothing references (no asset of any version, no trash item)
and nobody was given or let go of for the grace period, and nothing else (issue #38)."""

from __future__ import annotations

import json
from datetime import timedelta

import httpx
from typer.testing import CliRunner

from tests.helpers.assets import add_blob_asset, assets_url, md5, ok, upload_blob
from tests.helpers.databases import SQLITE_ONLY
from tests.helpers.snapshots import admin_env
from zarrchive.cli import app
from zarrchive.config import Settings
from zarrchive.db.models import Blob, utcnow
from zarrchive.services.dandi.blob_gc import remove_unreferenced_blob, unreferenced_blobs
from zarrchive.services.dandi.trash import purge_expired
from zarrchive.services.runtime import Archive

NONE = timedelta(0)
DAY = timedelta(days=1)


def _key(archive: Archive, blob_id: str) -> str:
    with archive.db.session() as session:
        blob = session.get(Blob, blob_id)
        assert blob is not None
        return blob.key


def test_only_blobs_nothing_references_for_the_grace_period_are_removed(
    api: httpx.Client, archive: Archive, dandiset: str
) -> None:
    kept = add_blob_asset(api, dandiset, b"kept", "kept.bin")
    trashed = add_blob_asset(api, dandiset, b"trashed", "trashed.bin")
    ok(api.delete(f"{assets_url(dandiset)}{trashed['asset_id']}/"), 204)
    loose = upload_blob(api, dandiset, b"never attached")
    later = utcnow() + timedelta(days=400)

    # the trashed asset's blob is restorable: kept, however old
    assert [b.blob_id for b in unreferenced_blobs(archive, grace=NONE, now=later)] == [loose]
    # given again to an uploader (the same content): its grace period starts again
    plan = ok(
        api.post(
            "/api/uploads/initialize/",
            json={"size": 14, "md5": md5(b"never attached"), "dandiset": dandiset},
        )
    )
    assert plan["blob_id"] == loose
    assert unreferenced_blobs(archive, grace=DAY) == []
    assert not remove_unreferenced_blob(archive, loose, grace=DAY)

    # purged from the trash: let go of now, removed only after the grace period
    with archive.db.write_session() as session:
        assert purge_expired(session, days=30, now=later).assets == 1
    soon = {b.blob_id for b in unreferenced_blobs(archive, grace=DAY, now=later + DAY / 2)}
    assert soon == {loose}
    assert not remove_unreferenced_blob(archive, trashed["blob_id"], grace=DAY, now=later)
    after = later + 2 * DAY
    found = {b.blob_id: b.size for b in unreferenced_blobs(archive, grace=DAY, now=after)}
    assert found == {trashed["blob_id"]: 7, loose: 14}
    key = _key(archive, trashed["blob_id"])
    assert archive.store.head(key) is not None
    assert remove_unreferenced_blob(archive, trashed["blob_id"], grace=DAY, now=after)
    assert archive.store.head(key) is None
    assert not any(True for _ in archive.store.iter_versions(key))
    with archive.db.session() as session:
        assert session.get(Blob, trashed["blob_id"]) is None
        assert session.get(Blob, kept["blob_id"]) is not None
    url = api.get(f"/api/assets/{kept['asset_id']}/download/", follow_redirects=False)
    with httpx.Client(timeout=30) as raw:
        assert raw.get(url.headers["location"]).content == b"kept"


@SQLITE_ONLY
def test_admin_gc_frees_blobs_and_admin_usage_counts_them(
    api: httpx.Client, archive: Archive, dandiset: str, settings: Settings
) -> None:
    add_blob_asset(api, dandiset, b"a" * 11, "a.bin")
    loose = upload_blob(api, dandiset, b"b" * 13)
    env = {**admin_env(settings), "ZARRCHIVE_GC_GRACE_DAYS": "0"}
    usage = CliRunner().invoke(app, ["admin", "usage", "--json"], env=env)
    assert usage.exit_code == 0, usage.stderr
    report = json.loads(usage.stdout)
    assert report["dandisets"][dandiset] == {
        "draft": 11,
        "published_only": 0,
        "trash": 0,
        "total": 11,
    }
    assert (report["orphaned"]["blobs"], report["orphaned"]["blob_bytes"]) == (1, 13)

    dry = CliRunner().invoke(app, ["admin", "gc"], env=env)
    assert dry.exit_code == 0, dry.stderr
    (line,) = [r for r in dry.stdout.splitlines() if f"(blob {loose}:" in r]
    assert line.startswith("would remove\t") and line.endswith("\t13")
    assert "and 1 unreferenced blobs" in dry.stderr
    assert archive.store.head(_key(archive, loose)) is not None
    key = _key(archive, loose)
    done = CliRunner().invoke(app, ["admin", "gc", "--apply"], env=env)
    assert done.exit_code == 0, done.stderr
    assert f"removed\t{key}\t" in done.stdout
    assert archive.store.head(key) is None
    usage = CliRunner().invoke(app, ["admin", "usage", "--json"], env=env)
    assert json.loads(usage.stdout)["orphaned"]["blobs"] == 0

"""The trash (issue #38): deleted assets and unpublished dandisets are restorable, exactly,
show nowhere meanwhile, and are purged after ``ZARRCHIVE_TRASH_DAYS``; storage accounting
(``/api/stats/``, ``admin usage``) equals what listings sum."""

from __future__ import annotations

import time
from datetime import timedelta
from typing import Any

import httpx

from tests.conftest import LiveServer, Users
from tests.helpers.assets import add_blob_asset, add_zarr_asset, assets_url, client_for, ok
from tests.helpers.web_forms import form_token
from tests.helpers.web_site import browser
from tests.helpers.zarr_client import create_zarr, list_files, upload
from zarrchive.db.models import AuditRecord, Dandiset, TrashedAsset, utcnow
from zarrchive.services.dandi.trash import purge_expired
from zarrchive.services.dandi.usage import usage_report
from zarrchive.services.runtime import Archive
from zarrchive.services.zarr_engine.snapshots import unreferenced_zarrs

NONE = timedelta(0)


def _paths(api: httpx.Client, dandiset: str) -> list[str]:
    return [a["path"] for a in ok(api.get(assets_url(dandiset)))["results"]]


def _audit_types(archive: Archive, dandiset: str) -> list[str]:
    with archive.db.session() as session:
        return [
            r.record_type
            for r in session.query(AuditRecord)
            .filter(AuditRecord.dandiset_id == int(dandiset))
            .order_by(AuditRecord.id)
        ]


def test_a_deleted_asset_shows_nowhere_and_comes_back_exactly(
    api: httpx.Client, anon: httpx.Client, users: Users, archive: Archive, dandiset: str
) -> None:
    asset = add_blob_asset(api, dandiset, b"precious bytes", "data/precious.bin")
    asset_id = asset["asset_id"]
    before = ok(api.get(f"/api/assets/{asset_id}/info/"))
    ok(api.delete(f"{assets_url(dandiset)}{asset_id}/"), 204)

    # nowhere: listing, paths, by id, download, search
    assert _paths(api, dandiset) == []
    assert ok(api.get(f"{assets_url(dandiset)}paths/"))["results"] == []
    assert api.get(f"/api/assets/{asset_id}/").status_code == 404
    assert api.get(f"/api/assets/{asset_id}/download/").status_code == 404
    assert api.get(f"{assets_url(dandiset)}{asset_id}/").status_code == 404
    found = ok(api.get("/api/dandisets/", params={"search": "precious"}))
    assert found["count"] == 0
    for page in (f"/dandiset/{dandiset}/draft/files?location=data", f"/dandiset/{dandiset}"):
        shown = anon.get(page)
        assert shown.status_code == 200 and "precious.bin" not in shown.text

    # in the trash, to owners only
    (item,) = ok(api.get(f"/api/dandisets/{dandiset}/trash/"))
    assert (item["asset_id"], item["path"], item["size"]) == (
        asset_id,
        "data/precious.bin",
        len(b"precious bytes"),
    )
    assert item["deleted_by"] == "owner"
    assert anon.get(f"/api/dandisets/{dandiset}/trash/").status_code == 401
    with client_for(api, users.other) as other:
        assert other.get(f"/api/dandisets/{dandiset}/trash/").status_code == 403
        assert other.post(f"/api/dandisets/{dandiset}/trash/{asset_id}/restore/").status_code == 403

    # the path taken: 409, nothing changes
    squatter = add_blob_asset(api, dandiset, b"other", "data/precious.bin")
    response = api.post(f"/api/dandisets/{dandiset}/trash/{asset_id}/restore/")
    assert response.status_code == 409, response.text
    assert len(ok(api.get(f"/api/dandisets/{dandiset}/trash/"))) == 1
    ok(api.delete(f"{assets_url(dandiset)}{squatter['asset_id']}/"), 204)

    restored = ok(api.post(f"/api/dandisets/{dandiset}/trash/{asset_id}/restore/"))
    assert restored["asset_id"] == asset_id and restored["blob_id"] == asset["blob_id"]
    after = ok(api.get(f"/api/assets/{asset_id}/info/"))
    assert after["metadata"]["digest"] == before["metadata"]["digest"]
    url = api.get(f"/api/assets/{asset_id}/download/", follow_redirects=False).headers["location"]
    with httpx.Client(timeout=30) as raw:
        assert raw.get(url).content == b"precious bytes"
    assert [i["asset_id"] for i in ok(api.get(f"/api/dandisets/{dandiset}/trash/"))] == [
        squatter["asset_id"]
    ]
    assert "restore_asset" in _audit_types(archive, dandiset)
    assert api.post(f"/api/dandisets/{dandiset}/trash/{asset_id}/restore/").status_code == 404


def test_a_trashed_zarr_is_neither_changed_nor_collected(
    api: httpx.Client, archive: Archive, dandiset: str
) -> None:
    zarr_id = create_zarr(api, dandiset, "kept.zarr")
    files = {"a/.zarray": b"{}", "a/0": b"zero"}
    upload(api, zarr_id, files)
    asset = add_zarr_asset(api, dandiset, zarr_id, "kept.zarr")
    listing = list_files(api, zarr_id)
    ok(api.delete(f"{assets_url(dandiset)}{asset['asset_id']}/"), 204)

    later = utcnow() + timedelta(days=365)
    assert zarr_id not in [z.zarr_id for z in unreferenced_zarrs(archive, grace=NONE, now=later)]
    refused = api.post(f"/api/zarr/{zarr_id}/upload/", json=[{"path": "x", "etag": "0" * 32}])
    assert refused.status_code == 409, refused.text
    taken = api.post(
        assets_url(dandiset), json={"metadata": {"path": "b.zarr"}, "zarr_id": zarr_id}
    )
    assert taken.status_code == 409, taken.text

    ok(api.post(f"/api/dandisets/{dandiset}/trash/{asset['asset_id']}/restore/"))
    assert list_files(api, zarr_id) == listing
    assert _paths(api, dandiset) == ["kept.zarr"]


def test_a_deleted_dandiset_is_restorable_by_its_owners_then_purged(
    api: httpx.Client, anon: httpx.Client, users: Users, archive: Archive
) -> None:
    ident = ok(api.post("/api/dandisets/", json={"name": "mistake"}))["identifier"]
    add_blob_asset(api, ident, b"one", "one.bin")
    ok(api.delete(f"/api/dandisets/{ident}/"), 204)
    assert api.get(f"/api/dandisets/{ident}/").status_code == 404
    listed = ok(api.get("/api/dandisets/"))["results"]
    assert ident not in [d["identifier"] for d in listed]
    assert [d["identifier"] for d in ok(api.get("/api/dandisets/?deleted=true"))["results"]] == [
        ident
    ]
    with client_for(api, users.other) as other:
        assert ok(other.get("/api/dandisets/?deleted=true"))["count"] == 0
        assert other.post(f"/api/dandisets/{ident}/restore/").status_code == 404
    with client_for(api, users.admin) as admin:
        assert ok(admin.get("/api/dandisets/?deleted=true"))["count"] == 1
    assert anon.post(f"/api/dandisets/{ident}/restore/").status_code == 401

    restored = ok(api.post(f"/api/dandisets/{ident}/restore/"))
    assert restored["identifier"] == ident and restored["name"] == "mistake"
    assert _paths(api, ident) == ["one.bin"]
    assert ok(api.get(f"/api/dandisets/{ident}/trash/")) == []
    assert _audit_types(archive, ident)[-2:] == ["delete_dandiset", "restore_dandiset"]
    assert api.post(f"/api/dandisets/{ident}/restore/").status_code == 404

    # deleted again, then purged after the trash period (not before)
    ok(api.delete(f"/api/dandisets/{ident}/"), 204)
    with archive.db.write_session() as session:
        assert purge_expired(session, days=30).dandisets == 0
    with archive.db.write_session() as session:
        purged = purge_expired(session, days=30, now=utcnow() + timedelta(days=31))
        assert (purged.assets, purged.dandisets) == (1, 1)
    with archive.db.session() as session:
        assert session.get(Dandiset, int(ident)) is None
        assert session.query(TrashedAsset).count() == 0
    assert api.post(f"/api/dandisets/{ident}/restore/").status_code == 404


def _staging(archive: Archive) -> dict[str, int]:
    """Every object of the buckets' staging areas (a full listing), with its size."""
    return {
        o.key: o.size
        for store in (archive.store, archive.embargo_store)
        for o in store.iter_objects("zarr-staging/")
    }


def _wait_for_staging(archive: Archive, zarr_ids: list[str], timeout: float = 60) -> None:
    """Wait until the staging areas of *zarr_ids* hold only what no batch owns (applied
    batches remove their staged objects after the apply)."""
    deadline = time.monotonic() + timeout
    while True:
        ours = [k for k in _staging(archive) if k.split("/")[1] in zarr_ids]
        if all(k.split("/")[2] == "f" * 32 for k in ours):
            return
        assert time.monotonic() < deadline, f"staging still holds {ours}"
        time.sleep(0.2)


def _sum_sizes(items: list[dict[str, Any]]) -> int:
    return sum(int(i["size"]) for i in items)


def test_usage_and_stats_equal_what_listings_sum(
    api: httpx.Client, anon: httpx.Client, archive: Archive, dandiset: str
) -> None:
    add_blob_asset(api, dandiset, b"a" * 10, "a.bin")
    gone = add_blob_asset(api, dandiset, b"b" * 20, "b.bin")
    add_blob_asset(api, dandiset, b"c" * 30, "c.bin")
    ok(api.delete(f"{assets_url(dandiset)}{gone['asset_id']}/"), 204)
    zarr_id = create_zarr(api, dandiset, "z.zarr")
    upload(api, zarr_id, {"x/0": b"0123456789"})
    add_zarr_asset(api, dandiset, zarr_id, "z.zarr")
    orphan = create_zarr(api, dandiset, "orphan.zarr")
    upload(api, orphan, {"y": b"12345"})
    other = ok(api.post("/api/dandisets/", json={"name": "second"}))["identifier"]
    published = add_blob_asset(api, other, b"d" * 7, "d.bin")
    add_blob_asset(api, other, b"e" * 3, "e.bin")
    version = ok(api.post(f"/api/dandisets/{other}/versions/draft/publish/"))["version"]
    ok(api.delete(f"{assets_url(other)}{published['asset_id']}/"), 204)

    # a staging area no batch owns any more (a crash between apply and cleanup leaves one)
    leftover = f"zarr-staging/{zarr_id}/{'f' * 32}/x/0"
    archive.store.put(leftover, b"left over")
    _wait_for_staging(archive, [zarr_id, orphan])  # the applied batches' own cleanup is done

    report = usage_report(archive)
    # the buckets are the test session's: other tests' leftovers count on both sides
    staged = _staging(archive)
    assert leftover in staged
    assert (report.staging_objects, report.staging_bytes) == (len(staged), sum(staged.values()))
    draft = _sum_sizes(ok(api.get(assets_url(dandiset), params={"page_size": 1000}))["results"])
    trash = _sum_sizes(ok(api.get(f"/api/dandisets/{dandiset}/trash/")))
    mine = report.dandisets[dandiset]
    assert (mine.draft, mine.published_only, mine.trash) == (draft, 0, trash) == (50, 0, 20)
    published_sizes = _sum_sizes(
        ok(api.get(assets_url(other, version), params={"page_size": 1000}))["results"]
    )
    theirs = report.dandisets[other]
    assert (theirs.draft, theirs.published_only, theirs.trash) == (3, published_sizes - 3, 7)
    owner = report.users["owner"]
    assert (owner.draft, owner.published_only, owner.trash) == (50 + 3, 7, 20 + 7)
    assert report.users["other"].total == 0
    assert (report.orphaned_zarrs, report.orphaned_zarr_bytes) == (1, 5)
    assert report.orphaned_blobs == 0

    figures = ok(anon.get("/api/stats/"))
    assert figures == {
        "dandiset_count": 2,
        "published_dandiset_count": 1,
        "user_count": 3,
        "size": 50 + 7 + 3,  # the published d.bin too, e.bin once for both versions
    }


def test_the_page_shows_the_trash_to_owners_and_restores_from_it(
    live_server: LiveServer, archive: Archive, api: httpx.Client, users: Users, dandiset: str
) -> None:
    live_server.app.state.archive = archive
    origin = {"Origin": live_server.url}
    asset = add_blob_asset(api, dandiset, b"oops", "deleted-by-mistake.bin")
    ok(api.delete(f"{assets_url(dandiset)}{asset['asset_id']}/"), 204)
    restore = f"/dandiset/{dandiset}/trash/{asset['asset_id']}/restore"
    with browser(live_server.url, users.other) as stranger:
        page = stranger.get(f"/dandiset/{dandiset}").text
        assert 'id="trash"' not in page and "deleted-by-mistake.bin" not in page
        refused = stranger.post(restore, data={"csrf_token": form_token(page)}, headers=origin)
        assert refused.status_code == 403
    with browser(live_server.url, users.owner) as owner:
        page = owner.get(f"/dandiset/{dandiset}").text
        assert 'id="trash"' in page and "deleted-by-mistake.bin" in page
        token = form_token(page)
        forged = owner.post(
            restore, data={"csrf_token": token}, headers={"Origin": "https://evil.example"}
        )
        assert forged.status_code == 403
        done = owner.post(restore, data={"csrf_token": token}, headers=origin)
        assert done.status_code == 303, done.text
        assert 'id="trash-empty"' in owner.get(f"/dandiset/{dandiset}").text
    assert _paths(api, dandiset) == ["deleted-by-mistake.bin"]


def test_a_private_file_is_not_restored_into_a_dandiset_made_public_meanwhile(
    api: httpx.Client, archive: Archive
) -> None:
    ident = ok(api.post("/api/dandisets/", json={"name": "secret", "embargo": True}))["identifier"]
    asset = add_blob_asset(api, ident, b"private", "private.bin")
    ok(api.delete(f"{assets_url(ident)}{asset['asset_id']}/"), 204)
    # as an unembargo leaves it: the draft's blobs moved, the trash's not
    with archive.db.write_session() as session:
        dandiset = session.get(Dandiset, int(ident))
        assert dandiset is not None
        dandiset.embargoed, dandiset.embargo_status = False, "open"
    response = api.post(f"/api/dandisets/{ident}/trash/{asset['asset_id']}/restore/")
    assert response.status_code == 409, response.text
    assert "upload it again" in response.json()["detail"]
    assert _paths(api, ident) == []

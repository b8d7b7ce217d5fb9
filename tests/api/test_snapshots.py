"""Versioned Zarrs (snapshot mode): publishing pins states, the draft keeps changing the same
Zarr, every published version reads exactly its state, before and after ``admin gc``."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from tests.conftest import Users
from tests.helpers.api_uploads import upload
from tests.helpers.assets import add_zarr_asset, assets_url, client_for, ok
from tests.helpers.snapshots import (
    gc_now,
    oracle,
    pin_as_published,
    read_live,
    read_snapshot,
    snapshot_base,
    walk,
)
from tests.helpers.zarr_client import md5
from zarrchive.config import PublishedZarrs
from zarrchive.services.runtime import Archive
from zarrchive.services.zarr_engine.snapshots import (
    SNAPSHOT_CACHE,
    prepare_manifest,
)
from zarrchive.services.zarr_engine.zarrs import get_zarr

V1 = {
    ".zgroup": b'{"zarr_format":2}',
    "arr/.zarray": b'{"shape":[4]}',
    "arr/0": b"zero",
    "arr/sub/1": b"one",
    "arr/sub/2": b"two",
}


pytestmark = pytest.mark.settings(published_zarrs=PublishedZarrs.SNAPSHOT)


def publish(api: httpx.Client, dandiset: str) -> str:
    version: str = ok(api.post(f"/api/dandisets/{dandiset}/versions/draft/publish/"))["version"]
    return version


def delete(api: httpx.Client, zarr_id: str, paths: list[str]) -> None:
    ok(api.request("DELETE", f"/api/zarr/{zarr_id}/files/", json=[{"path": p} for p in paths]), 204)


def s3_versions(s3: Any, bucket: str, zarr_id: str) -> list[tuple[str, str]]:
    found = []
    for prefix in (f"zarr/{zarr_id}/", f"zarr_checksums/{zarr_id}/", f"zarr-staging/{zarr_id}/"):
        for page in s3.get_paginator("list_object_versions").paginate(Bucket=bucket, Prefix=prefix):
            found += [(v["Key"], v["VersionId"]) for v in page.get("Versions", [])]
            found += [(m["Key"], m["VersionId"]) for m in page.get("DeleteMarkers", [])]
    return sorted(found)


def check_every_state(
    client: httpx.Client, zarr_id: str, states: dict[str, dict[str, bytes]], draft: dict[str, bytes]
) -> None:
    """Each snapshot reads exactly its files (bytes and zarr_checksum oracle), the draft its
    latest state."""
    for checksum, files in states.items():
        got = read_snapshot(client, zarr_id, checksum)
        assert got == files
        assert oracle(got) == checksum
    live = read_live(client, zarr_id)
    assert live == draft
    assert ok(client.get(f"/api/zarr/{zarr_id}/"))["checksum"] == oracle(draft)


def test_versions_read_their_pinned_states(
    api: httpx.Client,
    anon: httpx.Client,
    archive: Archive,
    dandiset: str,
    zarr_id: str,
    s3: Any,
    bucket: str,
) -> None:
    upload(api, zarr_id, V1)
    add_zarr_asset(api, dandiset, zarr_id, "data.zarr")
    v1 = publish(api, dandiset)
    c1 = oracle(V1)

    # the draft's Zarr stays writable: change, add and delete files
    v2_files = dict(V1)
    v2_files["arr/0"] = b"ZERO changed"
    v2_files["arr/new"] = b"added"
    del v2_files["arr/sub/1"]
    upload(api, zarr_id, {"arr/0": v2_files["arr/0"], "arr/new": b"added"})
    delete(api, zarr_id, ["arr/sub/1"])
    # an intermediate state no version pins (gc may remove its versions)
    upload(api, zarr_id, {"arr/tmp": b"transient"})
    upload(api, zarr_id, {"arr/tmp": b"transient, changed"})
    delete(api, zarr_id, ["arr/tmp"])
    v2 = publish(api, dandiset)
    c2 = oracle(v2_files)
    assert c2 != c1

    # the draft moves on: arr/sub/2 deleted (both snapshots had it), arr/0 changed again
    draft = dict(v2_files)
    del draft["arr/sub/2"]
    draft["arr/0"] = b"zero, third state"
    upload(api, zarr_id, {"arr/0": draft["arr/0"]})
    delete(api, zarr_id, ["arr/sub/2"])

    # the snapshots, with the versions that pin them
    listed = ok(api.get(f"/api/zarr/{zarr_id}/snapshots/"))
    assert [(s["checksum"], s["versions"], s["frozen"]) for s in listed] == [
        (c1, [v1], False),
        (c2, [v2], False),
    ]
    info = ok(api.get(snapshot_base(zarr_id, c2)))
    assert (info["file_count"], info["size"]) == (len(v2_files), sum(map(len, v2_files.values())))
    assert info["manifest_url"].endswith(f"zarr-manifest/{zarr_id}/{c2}.json")

    # each published version names its snapshot as its Zarr asset's digest
    for version, checksum in ((v1, c1), (v2, c2)):
        zarrs = ok(api.get(f"/api/dandisets/{dandiset}/versions/{version}/info/"))["zarrs"]
        assert [z["checksum"] for z in zarrs] == [checksum]
        params = {"metadata": "true"}
        asset = ok(api.get(assets_url(dandiset, version), params=params))["results"][0]
        assert asset["metadata"]["digest"]["dandi:dandi-zarr-checksum"] == checksum
        # the download route names the snapshot, not the draft (400: no link for a Zarr)
        response = api.get(f"/api/assets/{asset['asset_id']}/download/")
        assert response.status_code == 400
        assert (
            snapshot_base(zarr_id, checksum).removeprefix(str(api.base_url))
            in (response.json()["detail"])
        )
        assert ok(api.get(snapshot_base(zarr_id, checksum)))["checksum"] == checksum
    draft_asset = ok(api.get(assets_url(dandiset)))["results"][0]
    response = api.get(f"/api/assets/{draft_asset['asset_id']}/download/")
    assert response.status_code == 400
    assert f"/api/zarr/{zarr_id}/ " in response.json()["detail"]

    states = {c1: V1, c2: v2_files}
    check_every_state(api, zarr_id, states, draft)
    # anonymous reads of a public snapshot: no token, and no credentials towards S3
    check_every_state(anon, zarr_id, states, draft)
    # a file deleted in the draft is readable in every snapshot that had it
    for checksum in (c1, c2):
        entry = ok(anon.get(snapshot_base(zarr_id, checksum) + "arr/sub/2"))
        assert (entry["type"], entry["md5"], entry["size"]) == ("file", md5(b"two"), 3)
        assert httpx.get(entry["s3_url"]).content == b"two"
    assert api.get(f"/api/zarr/{zarr_id}/arr/sub/2").status_code == 404

    # gc, dry run: reports what it would remove and removes nothing
    before = s3_versions(s3, bucket, zarr_id)
    report = gc_now(archive, zarr_id)
    assert report.versions.versions and report.bytes > 0 and not report.versions.applied
    assert s3_versions(s3, bucket, zarr_id) == before
    removable = {v.ref for v in report.versions.versions}
    # the transient file's versions go, the pinned ones stay
    tmp = s3.list_object_versions(Bucket=bucket, Prefix=f"zarr/{zarr_id}/arr/tmp")
    tmp_versions = {(v["Key"], v["VersionId"]) for v in tmp["Versions"]}
    # (the one a later version replaced, and the one the delete marker replaced)
    assert len(tmp_versions) == 2 and tmp_versions <= removable
    # its current delete marker stays (removing it would bring an old version back)
    assert [m["IsLatest"] for m in tmp["DeleteMarkers"]] == [True]
    assert (tmp["DeleteMarkers"][0]["Key"], tmp["DeleteMarkers"][0]["VersionId"]) not in removable
    pinned_one = s3.list_object_versions(Bucket=bucket, Prefix=f"zarr/{zarr_id}/arr/sub/1")
    assert all((v["Key"], v["VersionId"]) not in removable for v in pinned_one["Versions"])

    # gc --apply: exactly those go; every state still reads exactly
    report = gc_now(archive, zarr_id, apply=True)
    assert report.versions.applied
    after = s3_versions(s3, bucket, zarr_id)
    assert set(after) == set(before) - removable
    SNAPSHOT_CACHE.clear()
    check_every_state(api, zarr_id, states, draft)
    check_every_state(anon, zarr_id, states, draft)
    # and a second gc finds nothing more
    assert gc_now(archive, zarr_id).versions.versions == []


def test_gc_removes_a_version_a_marker_replaced(
    api: httpx.Client, archive: Archive, zarr_id: str, s3: Any, bucket: str
) -> None:
    upload(api, zarr_id, {"a": b"1", "b": b"2"})
    delete(api, zarr_id, ["a"])
    listed = s3.list_object_versions(Bucket=bucket, Prefix=f"zarr/{zarr_id}/a")["Versions"]
    report = gc_now(archive, zarr_id)
    assert (f"zarr/{zarr_id}/a", listed[0]["VersionId"]) in {
        v.ref for v in report.versions.versions
    }


def test_publish_refuses_open_batch_and_pins_nothing(
    api: httpx.Client, archive: Archive, dandiset: str, zarr_id: str
) -> None:
    upload(api, zarr_id, V1)
    add_zarr_asset(api, dandiset, zarr_id, "data.zarr")
    ok(api.post(f"/api/zarr/{zarr_id}/upload/", json=[{"path": "x", "etag": md5(b"x")}]))
    response = api.post(f"/api/dandisets/{dandiset}/versions/draft/publish/")
    assert response.status_code == 409, response.text
    assert ok(api.get(f"/api/zarr/{zarr_id}/snapshots/")) == []
    versions = ok(api.get(f"/api/dandisets/{dandiset}/versions/"))["results"]
    assert [v["version"] for v in versions] == ["draft"]


def test_republishing_a_returned_state_writes_a_fresh_manifest(
    api: httpx.Client, archive: Archive, dandiset: str, zarr_id: str, s3: Any, bucket: str
) -> None:
    """A state the Zarr left and came back to (new object versions) is pinned through a
    manifest naming versions that exist, even after gc removed the first ones."""
    upload(api, zarr_id, {"a": b"1"})
    add_zarr_asset(api, dandiset, zarr_id, "data.zarr")
    with archive.db.session() as session:
        assert get_zarr(session, None, zarr_id).checksum == oracle({"a": b"1"})
    prepare_manifest(archive, zarr_id)  # the manifest of the first visit to state A
    first = s3.list_object_versions(Bucket=bucket, Prefix=f"zarr/{zarr_id}/a")["Versions"]
    upload(api, zarr_id, {"a": b"2"})
    report = gc_now(archive, zarr_id, apply=True)  # nothing pinned: A's version goes
    assert (f"zarr/{zarr_id}/a", first[0]["VersionId"]) in {v.ref for v in report.versions.versions}
    upload(api, zarr_id, {"a": b"1"})  # back to state A, with a new object version
    publish(api, dandiset)
    assert read_snapshot(api, zarr_id, oracle({"a": b"1"})) == {"a": b"1"}


def test_routes_win_over_the_live_catch_all(api: httpx.Client, dandiset: str, zarr_id: str) -> None:
    files = {"snapshots/x": b"a file in a directory named snapshots", "b": b"b"}
    upload(api, zarr_id, files)
    add_zarr_asset(api, dandiset, zarr_id, "data.zarr")
    assert ok(api.get(f"/api/zarr/{zarr_id}/snapshots/")) == []
    # the live directory named "snapshots" stays reachable through {id}.zarr/{path}
    page = ok(api.get(f"/api/zarr/{zarr_id}.zarr/snapshots/"))
    assert [f["path"] for f in page["files"]] == ["snapshots/x"]
    publish(api, dandiset)
    checksum = oracle(files)
    base = snapshot_base(zarr_id, checksum)
    assert ok(api.get(base))["checksum"] == checksum
    assert ok(api.get(base + "snapshots/x"))["md5"] == md5(files["snapshots/x"])
    # pages: one entry each, following cursors
    assert set(walk(api, base, page_size=1)) == set(files)
    # a directory by its path, as the live route
    page = ok(api.get(base + "snapshots/"))
    assert (page["type"], page["path"], [f["name"] for f in page["files"]]) == (
        "directory",
        "snapshots",
        ["x"],
    )
    root = ok(api.get(base + "files/", params={"page_size": 1}))
    assert (root["file_count"], root["digest"], len(root["directories"])) == (2, checksum, 1)
    assert root["files"] == [] and root["next"]


def test_bad_requests_are_4xx(api: httpx.Client, dandiset: str, zarr_id: str) -> None:
    upload(api, zarr_id, V1)
    add_zarr_asset(api, dandiset, zarr_id, "data.zarr")
    publish(api, dandiset)
    base = snapshot_base(zarr_id, oracle(V1))
    assert api.get(snapshot_base(zarr_id, "0" * 32 + "-1--1")).status_code == 404
    assert api.get(base + "no/such/dir/").status_code == 404
    assert api.get(base + "arr/", params={"cursor": "garbage!"}).status_code == 400
    assert api.get(base + "../x").status_code in (400, 404)
    assert api.post(base + "download/", json=[]).status_code == 400
    response = api.post(base + "download/", json=[{"path": "arr/0"}, {"path": "nope"}])
    assert response.status_code == 404 and "nope" in response.text
    assert api.post(base + "download/", json=[{"path": "a//b"}]).status_code == 400
    assert api.get("/api/zarr/not-a-uuid/snapshots/").status_code == 404


def test_embargoed_snapshots_follow_the_embargo(
    api: httpx.Client, anon: httpx.Client, archive: Archive, users: Users, s3: Any
) -> None:
    """Publishing an embargoed dandiset is refused, so the state is pinned through the
    service (as an embargoed publication would); its snapshot is the owners' until the
    unembargo, which keeps it exact (the versions move, the manifest follows)."""
    dandiset = ok(api.post("/api/dandisets/", json={"name": "secret", "embargo": True}))[
        "identifier"
    ]
    zarr_id = ok(api.post("/api/zarr/", json={"name": "s.zarr", "dandiset": dandiset}))["zarr_id"]
    upload(api, zarr_id, V1)
    add_zarr_asset(api, dandiset, zarr_id, "data.zarr")
    assert api.post(f"/api/dandisets/{dandiset}/versions/draft/publish/").status_code == 409
    pin_as_published(archive, zarr_id)
    checksum = oracle(V1)
    base = snapshot_base(zarr_id, checksum)
    # the draft changes after the pin: arr/0 overwritten, arr/sub/1 deleted
    upload(api, zarr_id, {"arr/0": b"new zero"})
    delete(api, zarr_id, ["arr/sub/1"])

    with client_for(api, users.other) as other:
        for client, status in ((anon, 401), (other, 404)):
            assert client.get(f"/api/zarr/{zarr_id}/snapshots/").status_code == status
            assert client.get(base).status_code == status
            assert client.get(base + "arr/0").status_code == status
            response = client.post(base + "download/", json=[{"path": "arr/0"}])
            assert response.status_code == status
    # the owner reads it through presigned URLs of the exact versions
    entry = ok(api.get(base + "arr/0"))
    assert "X-Amz-Signature" in entry["s3_url"] and "versionId" in entry["s3_url"]
    assert read_snapshot(api, zarr_id, checksum) == V1
    # the public version URL of an embargoed object is refused to anyone
    private = archive.embargo_store.public_version_url(f"zarr/{zarr_id}/arr/0", entry["version_id"])
    assert httpx.get(private).status_code == 403

    ok(api.post(f"/api/dandisets/{dandiset}/unembargo/"))
    assert ok(api.get(f"/api/dandisets/{dandiset}/"))["embargo_status"] == "OPEN"
    # now public, anonymous, still exactly the pinned state (arr/0's old content included)
    assert read_snapshot(anon, zarr_id, checksum) == V1
    after = ok(anon.get(base + "arr/sub/1"))
    assert "X-Amz-Signature" not in after["s3_url"] and after["version_id"] != ""
    assert httpx.get(after["s3_url"]).content == V1["arr/sub/1"]
    draft = dict(V1, **{"arr/0": b"new zero"})
    del draft["arr/sub/1"]
    assert read_live(anon, zarr_id) == draft
    # nothing of the snapshot is left in the private bucket, and gc keeps it whole
    leftovers = s3.list_object_versions(
        Bucket=archive.embargo_store.bucket, Prefix=f"zarr/{zarr_id}/"
    )
    assert not leftovers.get("Versions")
    gc_now(archive, zarr_id, apply=True)
    SNAPSHOT_CACHE.clear()
    assert read_snapshot(anon, zarr_id, checksum) == V1

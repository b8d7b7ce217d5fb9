"""The audit trail (issue #24 part 4): every change of a dandiset recorded with who, when and
what, in DANDI's record shape; ``GET /api/dandisets/{id}/audit/`` for owners and admins."""

from __future__ import annotations

from typing import Any

import httpx
from sqlalchemy import select

from tests.conftest import Users
from tests.helpers.assets import add_blob_asset, assets_url, client_for, ok
from tests.helpers.databases import SQLITE_ONLY
from zarrchive.db.models import BatchKind, UploadBatch, UploadBatchFile, User, Zarr
from zarrchive.services.dandi import audit, changes
from zarrchive.services.runtime import Archive

pytestmark = SQLITE_ONLY

DATA = b"some bytes\n" * 20


def trail(client: httpx.Client, dandiset: str) -> list[dict[str, Any]]:
    body = ok(client.get(f"/api/dandisets/{dandiset}/audit/", params={"page_size": 1000}))
    results: list[dict[str, Any]] = body["results"]
    assert body["count"] == len(results)
    return results


def test_the_trail_of_a_scripted_sequence_of_changes(
    api: httpx.Client, anon: httpx.Client, users: Users
) -> None:
    created = ok(api.post("/api/dandisets/", params={"embargo": "true"}, json={"name": "audited"}))
    dandiset = created["identifier"]
    meta = {"name": "audited", "description": "d"}
    ok(api.put(f"/api/dandisets/{dandiset}/versions/draft/", json={"metadata": meta}))
    first = add_blob_asset(api, dandiset, DATA, "a.bin", note="first")
    changed = ok(
        api.put(
            assets_url(dandiset) + f"{first['asset_id']}/",
            json={"metadata": {"path": "b.bin"}, "blob_id": first["blob_id"]},
        )
    )
    assert api.delete(assets_url(dandiset) + f"{changed['asset_id']}/").status_code == 204
    second = add_blob_asset(api, dandiset, DATA, "c.bin")
    with client_for(api, users.admin) as admin:  # an admin who is not an owner
        ok(
            admin.put(
                f"/api/dandisets/{dandiset}/users/",
                json=[{"username": "owner"}, {"username": "other"}],
            )
        )
    ok(api.post(f"/api/dandisets/{dandiset}/unembargo/"))
    with client_for(api, users.other) as other:  # a co-owner publishes
        version = ok(other.post(f"/api/dandisets/{dandiset}/versions/draft/publish/"))["version"]

    records = trail(api, dandiset)
    assert [(r["record_type"], r["username"], r["admin"]) for r in records] == [
        ("create_dandiset", "owner", False),
        ("update_metadata", "owner", False),
        ("add_asset", "owner", False),
        ("update_asset", "owner", False),
        ("remove_asset", "owner", False),
        ("add_asset", "owner", False),
        ("change_owners", "admin", True),
        ("unembargo_dandiset", "owner", False),
        ("publish_dandiset", "other", False),
    ]
    assert set(records[0]) == {
        "id",
        "timestamp",
        "dandiset",
        "username",
        "user_email",
        "user_fullname",
        "admin",
        "record_type",
        "details",
    }
    assert all(r["dandiset"] == dandiset for r in records)
    stamps = [r["timestamp"] for r in records]
    assert stamps == sorted(stamps)
    details = [r["details"] for r in records]
    assert details[0]["embargoed"] is True
    assert details[0]["metadata"]["identifier"] == f"DANDI:{dandiset}"
    assert details[1]["metadata"]["description"] == "d"
    assert {k: details[2][k] for k in ("path", "size", "asset_blob_id", "asset_id")} == {
        "path": "a.bin",
        "size": len(DATA),
        "asset_blob_id": first["blob_id"],
        "asset_id": first["asset_id"],
    }
    assert details[2]["metadata"] == {"path": "a.bin", "note": "first"}
    assert details[2]["zarr_archive_id"] is None and details[2]["checksum"]
    assert details[3]["path"] == "b.bin"
    assert details[4] == {"path": "b.bin", "asset_id": first["asset_id"]}
    assert details[5]["asset_id"] == second["asset_id"]
    assert details[6] == {
        "removed_owners": [],
        "added_owners": [{"username": "other", "email": "", "name": "other"}],
    }
    assert details[7] == {}
    assert details[8] == {"version": version}

    # owners and admins only
    with client_for(api, users.admin) as admin:
        assert len(trail(admin, dandiset)) == len(records)
    with client_for(api, users.other) as other:
        assert len(trail(other, dandiset)) == len(records)
    ok(api.put(f"/api/dandisets/{dandiset}/users/", json=[{"username": "other"}]))
    assert api.get(f"/api/dandisets/{dandiset}/audit/").status_code == 403
    assert anon.get(f"/api/dandisets/{dandiset}/audit/").status_code == 401
    with client_for(api, users.other) as other:
        only = ok(
            other.get(f"/api/dandisets/{dandiset}/audit/", params={"record_type": "change_owners"})
        )
    assert [r["username"] for r in only["results"]] == ["admin", "owner"]


def test_a_refused_change_records_nothing_and_huge_details_are_bounded(
    api: httpx.Client, users: Users, dandiset: str
) -> None:
    with client_for(api, users.other) as other:
        meta = {"metadata": {"name": "x"}}
        assert other.put(f"/api/dandisets/{dandiset}/versions/draft/", json=meta).status_code == 403
    huge = {"name": "big", "description": "x" * (audit.MAX_DETAILS + 10)}
    ok(api.put(f"/api/dandisets/{dandiset}/versions/draft/", json={"metadata": huge}))
    records = trail(api, dandiset)
    assert [r["record_type"] for r in records] == ["create_dandiset", "update_metadata"]
    summary = records[1]["details"]["metadata"]
    assert summary["truncated"] is True and len(summary["sha256"]) == 64


def test_the_hook_of_an_applied_zarr_batch_records_it(
    api: httpx.Client, archive: Archive, dandiset: str, zarr_id: str
) -> None:
    """:func:`zarrchive.services.dandi.changes.zarr_batch_applied`, as the batch applier calls it."""
    with archive.db.write_session() as session:
        zarr = session.get(Zarr, zarr_id)
        assert zarr is not None
        owner = session.scalar(select(User).where(User.username == "owner"))
        assert owner is not None
        for kind, paths in ((BatchKind.UPLOAD, ["a/0", "zarr.json"]), (BatchKind.DELETE, ["a/0"])):
            batch = UploadBatch(zarr_id=zarr.id, kind=kind, created_by=owner.id)
            batch.files = [UploadBatchFile(path=p) for p in paths]
            session.add(batch)
            session.flush()
            changes.zarr_batch_applied(session, zarr, batch)
            session.delete(batch)
            session.flush()
    records = trail(api, dandiset)
    assert [(r["record_type"], r["username"], r["details"]) for r in records[-2:]] == [
        (
            "upload_zarr_chunks",
            "owner",
            {"zarr_id": zarr_id, "paths": ["a/0", "zarr.json"], "path_count": 2},
        ),
        ("delete_zarr_chunks", "owner", {"zarr_id": zarr_id, "paths": ["a/0"], "path_count": 1}),
    ]

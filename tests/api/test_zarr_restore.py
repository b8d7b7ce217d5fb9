"""Rolling a Zarr back (``POST /api/zarr/{id}/restore/``) and its history
(``GET /api/zarr/{id}/history/``) on SeaweedFS: the restored Zarr is exactly the earlier
state (checksum, bytes, keys, ``.checksum`` nodes, manifest); refusals change nothing."""

from __future__ import annotations

from typing import Any

import httpx
from sqlalchemy import select

from tests.conftest import LiveServer, Users
from tests.helpers.api_uploads import (
    FILES,
    assert_clean,
    assert_nodes_match,
    info,
    open_and_put,
    oracle,
    s3_body,
    upload,
)
from tests.helpers.assets import add_zarr_asset
from tests.helpers.databases import SQLITE_ONLY
from tests.helpers.manifest_records import manifest_as_listed
from tests.helpers.zarr_client import delete_files
from zarrchive.db.models import AuditRecord
from zarrchive.services.runtime import Archive
from zarrchive.services.zarr_engine.manifests import ManifestSource, current_entries, write_manifest

#: State B of the Zarr: one file rewritten, one deleted (its directory with it), new files,
#: and ``other``, a directory in state A, now a file.
CHANGED = {"arr/0": b"zero, rewritten", "new/dir/f": b"f", "top": b"top"}


def state(archive: Archive, zarr_id: str) -> dict[str, bytes]:
    """The Zarr's current files in S3, with their bytes."""
    paths = [e.path for e in current_entries(archive.store, zarr_id)]
    return {p: s3_body(archive, zarr_id, p) or b"" for p in paths}


def restore(api: httpx.Client, zarr_id: str, checksum: str) -> httpx.Response:
    return api.post(f"/api/zarr/{zarr_id}/restore/", json={"checksum": checksum})


def history(api: httpx.Client, zarr_id: str) -> list[dict[str, Any]]:
    response = api.get(f"/api/zarr/{zarr_id}/history/")
    assert response.status_code == 200, response.text
    result: list[dict[str, Any]] = response.json()
    return result


def test_a_zarr_is_restored_exactly_and_forward_again(
    api: httpx.Client, zarr_id: str, archive: Archive
) -> None:
    a = upload(api, zarr_id, FILES)["checksum"]
    assert a == oracle(FILES)
    write_manifest(archive, zarr_id)
    upload(api, zarr_id, CHANGED)
    delete_files(api, zarr_id, ["other/only"])
    files_b = {**{p: b for p, b in FILES.items() if p != "other/only"}, **CHANGED}
    b = upload(api, zarr_id, {"other": b"now a file"})["checksum"]
    files_b["other"] = b"now a file"
    assert b == oracle(files_b)
    write_manifest(archive, zarr_id)

    response = restore(api, zarr_id, a)
    assert response.status_code == 200, response.text
    # only the differences: arr/0 and other/only copied back; new/dir/f, top, other deleted
    assert response.json() == {
        "zarr_id": zarr_id,
        "checksum_before": b,
        "checksum": a,
        "copied": 2,
        "deleted": 3,
        "batches": 2,
        "applied": True,
    }
    assert info(api, zarr_id)["checksum"] == a
    assert state(archive, zarr_id) == FILES
    assert_nodes_match(archive, zarr_id, FILES)
    # the manifest of A is written again, naming the copies (from the records, as a
    # listing gives it: what the manifest job does once the restore is applied)
    manifest_as_listed(archive, zarr_id, a, ManifestSource.RECORDS)
    assert_clean(archive, zarr_id)

    states = history(api, zarr_id)
    assert [(s["checksum"], s["current"], s["restorable"]) for s in states] == [
        (a, True, True),
        (b, False, True),
    ]
    assert states[0]["file_count"] == len(FILES)
    assert states[0]["size"] == sum(len(v) for v in FILES.values())
    assert states[1]["file_count"] == len(files_b)
    assert states[0]["time"] > states[1]["time"]

    # and forward again, to B
    response = restore(api, zarr_id, b)
    assert response.status_code == 200, response.text
    assert info(api, zarr_id)["checksum"] == b
    assert state(archive, zarr_id) == files_b
    manifest_as_listed(archive, zarr_id, b, ManifestSource.RECORDS)
    assert_clean(archive, zarr_id)
    with archive.db.session() as session:
        records = session.scalars(
            select(AuditRecord.details).where(AuditRecord.record_type == "restore_zarr")
        ).all()
    assert [(r["checksum_before"], r["checksum"]) for r in records] == [(b, a), (a, b)]


@SQLITE_ONLY
def test_refused_restores_change_nothing(
    api: httpx.Client,
    zarr_id: str,
    dandiset: str,
    archive: Archive,
    live_server: LiveServer,
    users: Users,
) -> None:
    a = upload(api, zarr_id, FILES)["checksum"]
    write_manifest(archive, zarr_id)
    b = upload(api, zarr_id, CHANGED)["checksum"]
    files_b = {**FILES, **CHANGED}

    def unchanged() -> None:
        assert info(api, zarr_id)["checksum"] == b
        assert state(archive, zarr_id) == files_b

    # a checksum without a manifest (B's was never written), or no checksum at all
    response = restore(api, zarr_id, oracle({"x": b"x"}))
    assert response.status_code == 404, response.text
    assert "has no manifest of checksum" in response.text
    assert restore(api, zarr_id, "").status_code == 400
    # not an owner
    with httpx.Client(
        base_url=live_server.url, headers={"Authorization": f"token {users.other}"}
    ) as other:
        response = restore(other, zarr_id, a)
        assert response.status_code == 403, response.text
    # a batch open
    open_and_put(api, zarr_id, {"late": b"late"})
    response = restore(api, zarr_id, a)
    assert response.status_code == 409, response.text
    assert "upload batch open" in response.text
    assert api.delete(f"/api/zarr/{zarr_id}/upload/").status_code in (200, 204)
    unchanged()
    # the current checksum: nothing to do
    response = restore(api, zarr_id, b)
    assert response.status_code == 200, response.text
    assert response.json()["batches"] == 0
    # frozen by a published version
    add_zarr_asset(api, dandiset, zarr_id, "data/test.zarr")
    published = api.post(f"/api/dandisets/{dandiset}/versions/draft/publish/")
    assert published.status_code == 200, published.text
    response = restore(api, zarr_id, a)
    assert response.status_code == 409, response.text
    assert "can no longer change" in response.text
    unchanged()
    with archive.db.session() as session:
        assert not session.scalars(
            select(AuditRecord.id).where(AuditRecord.record_type == "restore_zarr")
        ).all()

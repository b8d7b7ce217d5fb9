"""A restore of more changes than a batch holds, on the in-memory store: deletions first,
then batches of copies (one of a file above the multipart threshold, copied in parts), left
to the apply job; the Zarr is the earlier state exactly once it is applied.  The history
lists each state once, newest first."""

from __future__ import annotations

from datetime import timedelta

import httpx
import pytest
from sqlalchemy import select, update

from tests.helpers.api_uploads import assert_nodes_match, info, oracle, s3_body
from tests.helpers.databases import SQLITE_ONLY
from tests.helpers.jobs import HeldJobQueue
from tests.helpers.seeded_zarr import seed_zarr
from tests.helpers.zarr_client import delete_files
from zarrchive.db.models import BatchKind, UploadBatch, ZarrManifest, utcnow
from zarrchive.services.runtime import Archive
from zarrchive.services.zarr_engine.manifests import current_entries, write_manifest

pytestmark = [SQLITE_ONLY, pytest.mark.settings(max_batch_files=2, multipart_threshold=5 << 20)]
BIG = bytes(range(256)) * ((5 << 20) // 256 + 1)  # above the threshold


@pytest.fixture
def archive(memory_archive: Archive) -> Archive:
    return memory_archive


def files_in_s3(archive: Archive, zarr_id: str) -> dict[str, bytes]:
    paths = [e.path for e in current_entries(archive.store, zarr_id)]
    return {p: s3_body(archive, zarr_id, p) or b"" for p in paths}


def test_a_large_restore_is_applied_by_the_job_in_batches(
    api: httpx.Client, zarr_id: str, archive: Archive, held: HeldJobQueue
) -> None:
    files_a = {"big": BIG, "a/0": b"0", "a/1": b"1", "b": b"b", "c/d/e": b"e"}
    seed_zarr(archive, zarr_id, files_a)
    a = info(api, zarr_id)["checksum"]
    assert a == oracle(files_a)
    write_manifest(archive, zarr_id)
    changed = {"big": BIG[::-1], "a/0": b"zero", "a/1": b"one", "x": b"x", "y/z": b"z"}
    seed_zarr(archive, zarr_id, changed)
    delete_files(api, zarr_id, ["c/d/e"])
    files_b = {**{p: v for p, v in files_a.items() if p != "c/d/e"}, **changed}
    b = info(api, zarr_id)["checksum"]
    assert b == oracle(files_b)
    write_manifest(archive, zarr_id)

    response = api.post(f"/api/zarr/{zarr_id}/restore/", json={"checksum": a})
    assert response.status_code == 200, response.text
    assert response.json() == {
        "zarr_id": zarr_id,
        "checksum_before": b,
        "checksum": a,
        "copied": 4,  # big, a/0, a/1, c/d/e
        "deleted": 2,  # x, y/z
        "batches": 3,
        "applied": False,
    }
    with archive.db.session() as session:
        queued = [
            (batch.kind, sorted(f.path for f in batch.files))
            for batch in session.scalars(
                select(UploadBatch).where(UploadBatch.zarr_id == zarr_id).order_by(UploadBatch.seq)
            )
        ]
    assert queued == [
        (BatchKind.DELETE, ["x", "y/z"]),
        (BatchKind.RESTORE, ["a/0", "a/1"]),
        (BatchKind.RESTORE, ["big", "c/d/e"]),
    ]
    assert info(api, zarr_id)["upload_state"] == "applying"
    # a second restore waits for the first
    assert api.post(f"/api/zarr/{zarr_id}/restore/", json={"checksum": b}).status_code == 409
    held.run("apply:")
    assert info(api, zarr_id)["checksum"] == a
    assert files_in_s3(archive, zarr_id) == files_a
    assert_nodes_match(archive, zarr_id, files_a)

    history = api.get(f"/api/zarr/{zarr_id}/history/").json()
    # each state once, newest first: A now, the two states between the restore's batches
    # (no manifest), B
    assert [(s["checksum"], s["current"], s["restorable"]) for s in history] == [
        (a, True, True),
        (history[1]["checksum"], False, False),
        (history[2]["checksum"], False, False),
        (b, False, True),
    ]
    assert [s["time"] for s in history] == sorted((s["time"] for s in history), reverse=True)


def test_a_state_older_than_the_retention_is_not_restorable(
    api: httpx.Client, zarr_id: str, archive: Archive
) -> None:
    """gc may collect the versions an old manifest names (older than the retention, pinned
    by no published version): the history says so and a restore to it is refused, before
    anything is copied; within the retention it is restorable."""
    seed_zarr(archive, zarr_id, {"a": b"1"})
    old = info(api, zarr_id)["checksum"]
    write_manifest(archive, zarr_id)
    seed_zarr(archive, zarr_id, {"a": b"2"})
    now = info(api, zarr_id)["checksum"]
    write_manifest(archive, zarr_id)
    states = {s["checksum"]: s for s in api.get(f"/api/zarr/{zarr_id}/history/").json()}
    assert states[old]["restorable"] and states[now]["restorable"]
    days = archive.settings.version_retention_days
    with archive.db.write_session() as session:
        session.execute(
            update(ZarrManifest)
            .where(ZarrManifest.zarr_id == zarr_id, ZarrManifest.checksum == old)
            .values(created_at=utcnow() - timedelta(days=days + 1))
        )
    states = {s["checksum"]: s for s in api.get(f"/api/zarr/{zarr_id}/history/").json()}
    assert not states[old]["restorable"] and states[now]["restorable"]
    refused = api.post(f"/api/zarr/{zarr_id}/restore/", json={"checksum": old})
    assert refused.status_code == 409 and "retention" in refused.text, refused.text
    assert info(api, zarr_id)["checksum"] == now

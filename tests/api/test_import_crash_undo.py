"""An applier that dies in the middle of an import batch's copies, whose batch is then refused
on its next apply (a source changed meanwhile), leaves no copy of its own behind (#39): the
refusing applier puts every key of the batch back at the version the Zarr's records name,
and deletes no recorded version.  The dead applier is the apply's own functions run up to
the copies: the batch claimed, some files copied into place, nothing recorded, the claim
left to expire.  (A second bucket of the test SeaweedFS; one SQLite database.)"""

from __future__ import annotations

import os
import uuid
from datetime import timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy import update

from tests.conftest import make_settings
from tests.helpers.api_uploads import info, oracle
from tests.helpers.jobs import HeldJobQueue
from tests.helpers.multipart import big_bytes, send_parts
from tests.helpers.s3_zarr import PART, source_s3_client
from tests.helpers.zarr_client import md5
from zarrchive.config import Settings
from zarrchive.db.models import UploadBatch, utcnow
from zarrchive.errors import UploadVerificationFailed
from zarrchive.services.runtime import Archive
from zarrchive.services.zarr_engine.fsck import fsck
from zarrchive.services.zarr_engine.uploads import apply
from zarrchive.storage.keys import zarr_object_key
from zarrchive.storage.seaweedfs import SeaweedFS

SOURCE = f"zundo-{os.getpid()}-{uuid.uuid4().hex[:6]}"
#: The Zarr's first state (applied, recorded, its manifest written).
BEFORE = {"zarr.json": b'{"zarr_format": 3}', "a/0": b"zero", "a/1": b"one", "a/2": b"two"}
#: The batch the applier dies in: every file changed, and one new (``a/3``).
AFTER = {
    "zarr.json": b'{"zarr_format": 3, "attributes": {}}',
    "a/0": b"zero again",
    "a/1": b"one again",
    "a/2": b"two again",
    "a/3": b"three",
}
#: The files the dead applier had copied when it died (``a/2`` not yet).
COPIED = ("zarr.json", "a/0", "a/1", "a/3")


@pytest.fixture
def database_url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'zarrchive.sqlite3'}"


@pytest.fixture
def settings(seaweedfs: SeaweedFS, bucket: str, database_url: str, tmp_path: Path) -> Settings:
    return make_settings(
        seaweedfs,
        bucket,
        database_url,
        tmp_path,
        import_buckets=(SOURCE,),
        multipart_threshold=PART,
    )


@pytest.fixture(scope="module")
def source_s3(seaweedfs: SeaweedFS) -> Any:
    return source_s3_client(seaweedfs, SOURCE)


def _import(
    api: httpx.Client,
    zarr_id: str,
    s3: Any,
    files: dict[str, bytes],
    parted: dict[str, tuple[bytes, bytes]] | None = None,
) -> tuple[str, str]:
    """Put *files* under a new prefix of the source bucket, open a batch of them, import
    them and complete it (queued ``verify=apply``): ``(prefix, batch uid)``.  *parted*:
    files of the batch uploaded in parts, ``path -> (declared content, sent content)``."""
    parted = parted or {}
    prefix = f"z/{uuid.uuid4().hex[:8]}"
    etags = {
        p: s3.put_object(Bucket=SOURCE, Key=f"{prefix}/{p}", Body=b)["ETag"]
        for p, b in files.items()
    }
    declared = {**files, **{p: body for p, (body, _sent) in parted.items()}}
    opened = api.post(
        f"/api/zarr/{zarr_id}/upload/",
        json=[{"path": p, "etag": md5(b), "size": len(b)} for p, b in declared.items()],
    )
    assert opened.status_code == 200, opened.text
    uid = opened.headers["X-Zarrchive-Batch"]
    imported = api.post(
        f"/api/zarr/{zarr_id}/upload/import/",
        json={
            "batch": uid,
            "bucket": SOURCE,
            "prefix": prefix,
            "files": [{"path": p, "etag": etags[p]} for p in files],
        },
    )
    assert imported.status_code == 200, imported.text
    for path, (_body, sent) in parted.items():
        send_parts(api, zarr_id, path, sent, PART)
    done = api.post(f"/api/zarr/{zarr_id}/upload/complete/", params={"verify": "apply"})
    assert done.status_code == 200, done.text
    return prefix, uid


def _versions(archive: Archive, zarr_id: str) -> set[tuple[str, str]]:
    """``(path, version id)`` of every version (not delete marker) of the Zarr's keys."""
    root = zarr_object_key(zarr_id, "")
    return {
        (v.key[len(root) :], v.version_id)
        for v in archive.store.iter_versions(root)
        if not v.is_delete_marker
    }


def _die_after_copies(archive: Archive, zarr_id: str, paths: tuple[str, ...]) -> None:
    """What an applier that dies during the copies of the Zarr's next batch leaves: the
    batch claimed by it, *paths* copied into place (the apply's own copies), nothing
    recorded; its claim then expires (nobody renews it)."""
    token = uuid.uuid4().hex
    claimed = apply._claim_next(archive, zarr_id, token, None)
    assert isinstance(claimed, apply._Claimed)
    apply.verify_claimed(archive.store, claimed)
    for path in set(claimed.files) - set(paths):
        del claimed.files[path], claimed.imports[path]
    written = apply._copy_into_place(archive, archive.store, claimed, token)
    assert written is not None and sorted(w.path for w in written) == sorted(paths)
    with archive.db.write_session() as session:
        session.execute(
            update(UploadBatch)
            .where(UploadBatch.uid == claimed.uid)
            .values(claimed_until=utcnow() - timedelta(seconds=1))
        )


def test_a_dead_appliers_copies_are_undone_when_its_batch_is_refused(
    api: httpx.Client, archive: Archive, zarr_id: str, source_s3: Any, held: HeldJobQueue
) -> None:
    _import(api, zarr_id, source_s3, BEFORE)
    assert held.run("apply:") == 1
    held.run("manifest:")
    recorded = _versions(archive, zarr_id)
    assert {p for p, _v in recorded} == set(BEFORE)

    prefix, uid = _import(api, zarr_id, source_s3, AFTER)
    _die_after_copies(archive, zarr_id, COPIED)
    for path in COPIED:  # the dead applier's copies are what S3 serves now
        assert archive.store.get(zarr_object_key(zarr_id, path)) == AFTER[path]
    source_s3.put_object(Bucket=SOURCE, Key=f"{prefix}/a/2", Body=b"changed meanwhile")

    with pytest.raises(UploadVerificationFailed):
        apply.apply_pending(archive, zarr_id)  # takes the expired claim over
    refused = api.get(f"/api/zarr/{zarr_id}/upload/refused/", params={"batch": [uid]}).json()
    assert [(r["path"], r["found_md5"]) for r in refused] == [("a/2", "source changed")]
    answer = info(api, zarr_id)
    assert answer["checksum"] == oracle(BEFORE) and answer["upload_state"] != "applying"

    # every key of the batch reads what the records say (a/3: absent), nothing recorded lost
    for path in AFTER:
        assert archive.store.get(zarr_object_key(zarr_id, path)) == BEFORE.get(path), path
    assert _versions(archive, zarr_id) == recorded
    report = fsck(archive, zarr_id)
    assert report.ok, report.problems
    assert report.manifest == "matches", report.manifest


def test_a_dead_appliers_copy_of_a_deleted_file_is_undone_down_to_its_delete_marker(
    api: httpx.Client, archive: Archive, zarr_id: str, source_s3: Any, held: HeldJobQueue
) -> None:
    before = {**BEFORE, "b/gone": b"deleted before the batch"}
    _import(api, zarr_id, source_s3, before)
    assert held.run("apply:") == 1
    deleted = api.request("DELETE", f"/api/zarr/{zarr_id}/files/", json=[{"path": "b/gone"}])
    assert deleted.status_code < 300, deleted.text
    held.run("apply:")
    held.run("manifest:")
    assert archive.store.get(zarr_object_key(zarr_id, "b/gone")) is None
    recorded = _versions(archive, zarr_id)
    assert "b/gone" in {p for p, _v in recorded}
    assert info(api, zarr_id)["checksum"] == oracle(BEFORE)

    after = {**AFTER, "b/gone": b"back again"}
    prefix, _uid = _import(api, zarr_id, source_s3, after)
    _die_after_copies(archive, zarr_id, (*COPIED, "b/gone"))
    assert archive.store.get(zarr_object_key(zarr_id, "b/gone")) == after["b/gone"]
    source_s3.put_object(Bucket=SOURCE, Key=f"{prefix}/a/2", Body=b"changed meanwhile")

    with pytest.raises(UploadVerificationFailed):
        apply.apply_pending(archive, zarr_id)
    for path in after:
        assert archive.store.get(zarr_object_key(zarr_id, path)) == BEFORE.get(path), path
    latest = archive.store.latest_version(zarr_object_key(zarr_id, "b/gone"))
    assert latest is not None and latest.is_delete_marker  # the delete batch's, kept
    assert _versions(archive, zarr_id) == recorded  # b/gone's old version too
    report = fsck(archive, zarr_id)
    assert report.ok, report.problems


def test_imported_copies_are_undone_when_a_big_file_of_their_batch_is_refused(
    api: httpx.Client, archive: Archive, zarr_id: str, source_s3: Any, held: HeldJobQueue
) -> None:
    """The refusing applier's own copies too: the imports are copied first, then a file
    uploaded in parts turns out not to be its md5 (one apply, no crash)."""
    _import(api, zarr_id, source_s3, BEFORE)
    assert held.run("apply:") == 1
    recorded = _versions(archive, zarr_id)
    big = big_bytes(2 * PART + 1024, seed=4)
    liar = big_bytes(len(big), seed=5)
    _import(api, zarr_id, source_s3, AFTER, parted={"big": (big, liar)})
    with pytest.raises(UploadVerificationFailed):
        apply.apply_pending(archive, zarr_id)
    for path in (*AFTER, "big"):
        assert archive.store.get(zarr_object_key(zarr_id, path)) == BEFORE.get(path), path
    assert _versions(archive, zarr_id) == recorded
    report = fsck(archive, zarr_id)
    assert report.ok, report.problems

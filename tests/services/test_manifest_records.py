"""Manifests from the apply engine's records: byte for byte the manifest a listing of S3
gives, through the real upload path (batches applied by the engine), after uploads,
overwrites, deletions, several batches in a row, cancels, crashes mid-apply (claims taken
over), the same content written again, files uploaded in parts and an unembargo; a broken
chain falls back to listing; records are pruned; the audit (and fsck) reports every
difference."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest
from sqlalchemy import delete, func, select, update

from tests.conftest import TEST_ACCESS_KEY, TEST_SECRET_KEY
from tests.helpers.api_uploads import FILES, complete, info, open_and_put, upload
from tests.helpers.databases import SQLITE_ONLY
from tests.helpers.manifest_records import (
    change_sets,
    forget_records,
    manifest_as_listed,
    recorded_versions,
)
from tests.helpers.multipart import THRESHOLD, big_bytes, open_sized, put_small, send_parts
from tests.helpers.zarr_client import delete_files
from zarrchive.checksum import EMPTY_CHECKSUM
from zarrchive.db.models import BatchState, UploadBatch, ZarrChangedObject, ZarrChangeSet
from zarrchive.db.models import ZarrManifest as ManifestRow
from zarrchive.errors import StorageError
from zarrchive.manifest import DifferenceKind, format_timestamp, manifest_key
from zarrchive.services.runtime import Archive
from zarrchive.services.zarr_engine.fsck import fsck, manifest_problems
from zarrchive.services.zarr_engine.manifests import (
    AuditStatus,
    ManifestSource,
    ManifestStatus,
    audit_manifest,
    current_entries,
    write_manifest,
)
from zarrchive.services.zarr_engine.uploads import apply as apply_engine
from zarrchive.services.zarr_engine.uploads import apply_pending
from zarrchive.storage.objects import ObjectStore

RECORDS, LISTING = ManifestSource.RECORDS, ManifestSource.LISTING


def _checksum(api: httpx.Client, zarr_id: str) -> str:
    checksum: str = info(api, zarr_id)["checksum"]
    return checksum


def test_records_give_the_listings_manifest_after_each_kind_of_change(
    api: httpx.Client, zarr_id: str, archive: Archive
) -> None:
    # an old Zarr (applied before records existed): its first manifest is listed
    first = upload(api, zarr_id, FILES)["checksum"]
    forget_records(archive, zarr_id)
    manifest_as_listed(archive, zarr_id, first, LISTING)
    assert change_sets(archive, zarr_id) == [(False, True)]  # the rest mark the chain starts from
    # overwrites and new files, in new and existing directories
    c1 = upload(api, zarr_id, {"arr/0": b"zero again", "arr/2": b"two", "new/dir/f": b"f"})
    manifest_as_listed(archive, zarr_id, c1["checksum"], RECORDS)
    assert change_sets(archive, zarr_id) == [(True, True)]  # the rest mark pruned
    # deletions, one emptying a directory
    c2 = delete_files(api, zarr_id, ["arr/sub/deep/x", "other/only"])
    manifest_as_listed(archive, zarr_id, c2["checksum"], RECORDS)
    # several batches in a row, one manifest: the last change of a path wins; paths whose
    # order differs between bytes and naive collations ('a-b' < 'a.b' < 'a/x' < 'aé')
    upload(api, zarr_id, {"a/x": b"1", "arr/1": b"uno"})
    delete_files(api, zarr_id, ["a/x"])
    upload(api, zarr_id, {"a/x": b"2", "a-b": b"dash", "a.b": b"dot", "aé": b"e", "B": b"b"})
    c5 = upload(api, zarr_id, {"arr/1": b"one"})["checksum"]
    stored = manifest_as_listed(archive, zarr_id, c5, RECORDS)
    assert b'"a-b"' in stored and b'"a.b"' in stored
    assert change_sets(archive, zarr_id) == [(True, True)]
    # whole directories deleted (one with subdirectories): each file below them recorded
    c6 = delete_files(api, zarr_id, ["arr/", "new"])["checksum"]
    stored = manifest_as_listed(archive, zarr_id, c6, RECORDS)
    entries = json.loads(stored)["entries"]
    assert "arr" not in entries and "new" not in entries and "a-b" in entries
    audit = audit_manifest(archive, zarr_id)
    assert audit.status is AuditStatus.MATCHES and audit.difference_count == 0
    report = fsck(archive, zarr_id)
    assert report.ok and report.manifest == "matches", report.problems


@SQLITE_ONLY
def test_a_new_zarr_gets_its_first_manifest_from_records(
    api: httpx.Client, zarr_id: str, archive: Archive
) -> None:
    upload(api, zarr_id, {"x/0": b"0", "x/1": b"1"})
    upload(api, zarr_id, {".zattrs": b"{}"})
    checksum = delete_files(api, zarr_id, ["x/0"])["checksum"]
    manifest_as_listed(archive, zarr_id, checksum, RECORDS)
    # emptied, then filled again: the chain starts at the empty checksum again
    assert delete_files(api, zarr_id, [".zattrs", "x/1"])["checksum"] == EMPTY_CHECKSUM
    with archive.db.session() as session:
        emptied = select(func.count()).where(
            ZarrChangeSet.zarr_id == zarr_id, ZarrChangeSet.checksum_after == EMPTY_CHECKSUM
        )
        assert session.scalar(emptied) == 1
    checksum = upload(api, zarr_id, {"y": b"y"})["checksum"]
    manifest_as_listed(archive, zarr_id, checksum, RECORDS)


@SQLITE_ONLY
def test_a_broken_chain_falls_back_to_listing(
    api: httpx.Client, zarr_id: str, archive: Archive
) -> None:
    first = upload(api, zarr_id, FILES)["checksum"]
    manifest_as_listed(archive, zarr_id, first, RECORDS)
    # the previous manifest is gone from S3
    c1 = upload(api, zarr_id, {"arr/0": b"z"})["checksum"]
    archive.store.delete(manifest_key(zarr_id, first))
    manifest_as_listed(archive, zarr_id, c1, LISTING)
    # a change set missing in the middle of the chain (pruned, or applied without records)
    upload(api, zarr_id, {"arr/1": b"a"})
    c3 = upload(api, zarr_id, {"arr/2": b"b"})["checksum"]
    with archive.db.write_session() as session:
        middle = session.scalars(
            select(ZarrChangeSet.id)
            .where(ZarrChangeSet.zarr_id == zarr_id, ZarrChangeSet.manifest_written.is_(False))
            .order_by(ZarrChangeSet.id)
        ).first()
        session.execute(delete(ZarrChangedObject).where(ZarrChangedObject.change_set_id == middle))
        session.execute(delete(ZarrChangeSet).where(ZarrChangeSet.id == middle))
    manifest_as_listed(archive, zarr_id, c3, LISTING)
    # records that do not hash to the checksum (a wrong ETag recorded)
    c4 = upload(api, zarr_id, {"arr/3": b"c"})["checksum"]
    with archive.db.write_session() as session:
        session.execute(
            update(ZarrChangedObject).where(ZarrChangedObject.path == "arr/3").values(etag="0" * 32)
        )
    manifest_as_listed(archive, zarr_id, c4, LISTING)
    # the previous manifest's row says S3 disagreed with the archive: not a base
    c5 = upload(api, zarr_id, {"arr/4": b"d"})["checksum"]
    with archive.db.write_session() as session:
        session.execute(
            update(ManifestRow)
            .where(ManifestRow.zarr_id == zarr_id, ManifestRow.checksum == c4)
            .values(listing_checksum=first)
        )
    manifest_as_listed(archive, zarr_id, c5, LISTING)
    # records made in the other bucket (before an unembargo moved the objects: new versions)
    c6 = upload(api, zarr_id, {"arr/5": b"e"})["checksum"]
    with archive.db.write_session() as session:
        session.execute(
            update(ZarrChangeSet).where(ZarrChangeSet.zarr_id == zarr_id).values(embargoed=True)
        )
    manifest_as_listed(archive, zarr_id, c6, LISTING)
    # and the chain is whole again from there
    c7 = upload(api, zarr_id, {"arr/6": b"f"})["checksum"]
    manifest_as_listed(archive, zarr_id, c7, RECORDS)


@SQLITE_ONLY
def test_the_audit_and_fsck_report_every_difference_and_fsck_repairs(
    api: httpx.Client, zarr_id: str, archive: Archive
) -> None:
    upload(api, zarr_id, FILES)
    c1 = upload(api, zarr_id, {"arr/0": b"z", "arr/9": b"nine"})["checksum"]
    # a wrong version recorded for arr/0: the tree hash cannot see it, the audit does
    with archive.db.write_session() as session:
        session.execute(
            update(ZarrChangedObject)
            .where(ZarrChangedObject.path == "arr/0")
            .values(version_id="not-a-version")
        )
    outcome = write_manifest(archive, zarr_id)
    assert outcome.source is RECORDS and outcome.checksum == c1
    report = fsck(archive, zarr_id)
    assert report.manifest == "differs" and not report.repaired
    assert len(report.problems) == 1 and report.problems[0].startswith(
        "manifest arr/0: different: versionId not-a-version in the manifest, "
    )
    # S3 changed behind the archive's back: a file gone, a file added
    archive.store.delete(f"zarr/{zarr_id}/arr/9")
    archive.store.put(f"zarr/{zarr_id}/stray", b"stray", "application/octet-stream")
    audit = audit_manifest(archive, zarr_id)
    assert audit.status is AuditStatus.DIFFERS and audit.difference_count == 3
    assert [(d.path, d.kind, d.fields) for d in audit.differences] == [
        ("arr/0", DifferenceKind.DIFFERENT, ("versionId",)),
        ("arr/9", DifferenceKind.MISSING, ()),
        ("stray", DifferenceKind.EXTRA, ()),
    ]
    # that audit raised the alarm: the manifest now names what S3 holds (issue #40)
    problems = manifest_problems(archive, zarr_id)
    assert len(problems) == 1 and "the checksum-mismatch alarm is up" in problems[0]
    # put S3 back as the archive holds it: fsck --repair writes the manifest from a listing
    archive.store.delete(f"zarr/{zarr_id}/stray")
    upload(api, zarr_id, {"arr/9": b"nine"})  # same content again: same checksum
    assert _checksum(api, zarr_id) == c1
    assert fsck(archive, zarr_id).manifest == "differs"
    repaired = fsck(archive, zarr_id, repair=True)
    assert repaired.repaired and repaired.manifest == "matches", repaired.problems
    assert fsck(archive, zarr_id).ok


@SQLITE_ONLY
def test_the_copy_answer_is_what_the_listing_says(
    api: httpx.Client, zarr_id: str, archive: Archive
) -> None:
    """The records rest on this: a copy's VersionId, ETag and LastModified (to the second)
    are those S3 lists afterwards."""
    files = {f"c/{i}": str(i).encode() for i in range(120)}
    upload(api, zarr_id, files)
    with archive.db.session() as session:
        recorded = {
            path: (version, format_timestamp(modified) if modified else None, size, etag)
            for path, version, modified, size, etag in session.execute(
                select(
                    ZarrChangedObject.path,
                    ZarrChangedObject.version_id,
                    ZarrChangedObject.last_modified,
                    ZarrChangedObject.size,
                    ZarrChangedObject.etag,
                )
            )
        }
    listed = {
        e.path: (e.version_id, format_timestamp(e.last_modified), e.size, e.etag)
        for e in current_entries(archive.store, zarr_id)
    }
    assert recorded == listed and len(listed) == 120


@SQLITE_ONLY
def test_audit_cli(api: httpx.Client, zarr_id: str, archive: Archive, dandiset: str) -> None:
    from typer.testing import CliRunner

    from zarrchive.cli import app

    checksum = upload(api, zarr_id, FILES)["checksum"]
    other = api.post("/api/zarr/", json={"name": "other.zarr", "dandiset": dandiset}).json()
    settings = archive.settings
    env = {
        "ZARRCHIVE_DATABASE_URL": settings.database_url,
        "ZARRCHIVE_S3_ENDPOINT_URL": str(settings.s3_endpoint_url),
        "ZARRCHIVE_S3_BUCKET": settings.s3_bucket,
        "ZARRCHIVE_S3_EMBARGO_BUCKET": settings.s3_embargo_bucket,
        "ZARRCHIVE_S3_ACCESS_KEY_ID": TEST_ACCESS_KEY,
        "ZARRCHIVE_S3_SECRET_ACCESS_KEY": TEST_SECRET_KEY,
    }
    runner = CliRunner()
    write_manifest(archive, zarr_id)
    ok = runner.invoke(app, ["manifest", "audit", zarr_id], env=env)
    assert ok.exit_code == 0, ok.output
    assert "1 Zarrs: 1 matches, 0 differs, 0 no-manifest" in ok.output
    archive.store.delete(f"zarr/{zarr_id}/arr/0")
    bad = runner.invoke(app, ["manifest", "audit", "--all"], env=env)
    assert bad.exit_code == 1, bad.output
    assert f"differs {zarr_id} {checksum}: 1 differences" in bad.output
    assert "  arr/0: missing from S3 (the manifest names it)" in bad.output
    assert f"no-manifest {other['zarr_id']}" in bad.output
    assert "2 Zarrs: 0 matches, 1 differs, 1 no-manifest" in bad.output
    assert runner.invoke(app, ["manifest", "audit"], env=env).exit_code == 2
    # fsck reports it too
    assert "MISMATCH: S3 holds" in bad.output  # the audit raised the alarm (issue #40)
    fsck_run = runner.invoke(app, ["admin", "fsck", zarr_id], env=env)
    assert fsck_run.exit_code == 1, fsck_run.output
    assert "database holds checksum" in fsck_run.output


def test_a_crash_mid_apply_records_the_versions_of_the_copy_that_lands(
    api: httpx.Client, zarr_id: str, archive: Archive, monkeypatch: pytest.MonkeyPatch
) -> None:
    first = upload(api, zarr_id, FILES)["checksum"]
    manifest_as_listed(archive, zarr_id, first, RECORDS)
    batch = {"arr/0": b"new zero", "arr/7": b"seven", "c/d": b"d"}
    open_and_put(api, zarr_id, batch)
    # 1. the applier dies after one copy (S3 fails it): nothing recorded, nothing visible
    copy = ObjectStore.copy_within
    calls = [0]

    def flaky(self: ObjectStore, *args: Any, **kwargs: Any) -> Any:
        calls[0] += 1
        if calls[0] > 1:
            raise StorageError("injected: the applier died while copying")
        return copy(self, *args, **kwargs)

    monkeypatch.setattr(ObjectStore, "copy_within", flaky)
    assert api.post(f"/api/zarr/{zarr_id}/upload/complete/").status_code == 502
    monkeypatch.undo()
    assert _checksum(api, zarr_id) == first
    assert change_sets(archive, zarr_id) == [(True, True)]

    # 2. the next applier copies everything, then dies before its commit: rolled back with
    # the root (its copies stay in S3 as versions)
    def dies(*args: Any, **kwargs: Any) -> None:
        raise StorageError("injected: the applier died before its commit")

    monkeypatch.setattr(apply_engine, "zarr_batch_applied", dies)
    with pytest.raises(StorageError):
        apply_pending(archive, zarr_id)
    monkeypatch.undo()
    assert _checksum(api, zarr_id) == first
    assert change_sets(archive, zarr_id) == [(True, True)]
    crashed = {e.path: e.version_id for e in current_entries(archive.store, zarr_id)}
    # 3. a SIGKILLed applier leaves its claim behind: the next one takes it over (once the
    # lease is over), copies again (new versions) and records what its own copies made
    with archive.db.write_session() as session:
        session.execute(
            update(UploadBatch)
            .where(UploadBatch.zarr_id == zarr_id)
            .values(state=BatchState.APPLYING, claimed_by="dead" * 8, claimed_until=None)
        )
    assert apply_pending(archive, zarr_id) == 1
    final = _checksum(api, zarr_id)
    stored = manifest_as_listed(archive, zarr_id, final, RECORDS)
    recorded = recorded_versions(archive, zarr_id)
    for path in batch:
        assert recorded[path] != crashed[path]  # the takeover's own version...
        assert f'"{recorded[path]}"'.encode() in stored  # ...is the manifest's
    assert fsck(archive, zarr_id).ok


@SQLITE_ONLY
def test_a_cancelled_batch_is_not_recorded(
    api: httpx.Client, zarr_id: str, archive: Archive
) -> None:
    first = upload(api, zarr_id, FILES)["checksum"]
    manifest_as_listed(archive, zarr_id, first, RECORDS)
    open_and_put(api, zarr_id, {"arr/0": b"never", "z": b"never"})
    assert api.delete(f"/api/zarr/{zarr_id}/upload/").status_code == 204
    assert change_sets(archive, zarr_id) == [(True, True)]
    assert write_manifest(archive, zarr_id).status is ManifestStatus.EXISTS
    # publication drops the row of a manifest older than the Zarr's last change (the
    # cancel): its file still names the current versions, so it is made again without
    # listing
    with archive.db.write_session() as session:
        session.execute(delete(ManifestRow).where(ManifestRow.zarr_id == zarr_id))
    manifest_as_listed(archive, zarr_id, first, RECORDS)
    checksum = upload(api, zarr_id, {"z": b"zed"})["checksum"]
    manifest_as_listed(archive, zarr_id, checksum, RECORDS)


@SQLITE_ONLY
def test_the_same_content_again_rewrites_the_unpinned_manifest(
    api: httpx.Client, zarr_id: str, archive: Archive
) -> None:
    first = upload(api, zarr_id, FILES)["checksum"]
    manifest_as_listed(archive, zarr_id, first, RECORDS)
    # new versions, same checksum: the manifest named the old ones (same bytes); rewritten
    assert upload(api, zarr_id, {"arr/0": FILES["arr/0"]})["checksum"] == first
    manifest_as_listed(archive, zarr_id, first, RECORDS)
    assert audit_manifest(archive, zarr_id).status is AuditStatus.MATCHES
    assert write_manifest(archive, zarr_id).status is ManifestStatus.EXISTS
    # a change undone: back to the first checksum through another one
    second = upload(api, zarr_id, {"arr/1": b"changed"})["checksum"]
    manifest_as_listed(archive, zarr_id, second, RECORDS)
    assert upload(api, zarr_id, {"arr/1": FILES["arr/1"]})["checksum"] == first
    manifest_as_listed(archive, zarr_id, first, RECORDS)


@SQLITE_ONLY
@pytest.mark.settings(multipart_threshold=THRESHOLD)
def test_files_uploaded_in_parts_are_recorded_as_listed(
    api: httpx.Client, zarr_id: str, archive: Archive
) -> None:
    big = big_bytes(THRESHOLD + 1024, seed=3)  # two parts
    files = {"arr/.zarray": b"{}", "arr/0": big, "arr/1": b"one"}
    for content in (big, big_bytes(THRESHOLD + 2048, seed=4)):
        files["arr/0"] = content
        response = open_sized(api, zarr_id, files)
        assert response.status_code == 200, response.text
        put_small(response.json(), files)
        send_parts(api, zarr_id, "arr/0", content, THRESHOLD)
        checksum = complete(api, zarr_id, wait="true")["checksum"]
        # the listing shows the md5 the archive verified (not the multipart ETag): so do
        # the records
        stored = manifest_as_listed(archive, zarr_id, checksum, RECORDS)
        head = archive.store.head(f"zarr/{zarr_id}/arr/0")
        assert head is not None and head.etag.endswith("-2") and head.etag.encode() not in stored


@SQLITE_ONLY
def test_an_unembargo_breaks_the_chain(
    api: httpx.Client, archive: Archive, embargoed: tuple[str, str]
) -> None:
    identifier, zarr_id = embargoed
    first = upload(api, zarr_id, FILES)["checksum"]
    manifest_as_listed(archive, zarr_id, first, RECORDS, embargoed=True)
    second = upload(api, zarr_id, {"arr/0": b"embargoed zero"})["checksum"]
    response = api.post(f"/api/dandisets/{identifier}/unembargo/")  # no job queue: inline
    assert response.status_code == 200, response.text
    # the objects moved to the public bucket (new versions): the records name the old ones
    manifest_as_listed(archive, zarr_id, second, LISTING)
    assert audit_manifest(archive, zarr_id).status is AuditStatus.MATCHES
    third = upload(api, zarr_id, {"arr/9": b"public nine"})["checksum"]
    manifest_as_listed(archive, zarr_id, third, RECORDS)

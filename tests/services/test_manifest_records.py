"""Manifests from recorded changes: byte for byte the manifest a listing of S3 gives, after
uploads, overwrites, deletions and several batches in a row; a broken chain (records or the
previous manifest missing, records that disagree) falls back to listing; records are pruned;
the audit reports every difference."""

from __future__ import annotations

import httpx
import pytest
from sqlalchemy import delete, func, select, update

from tests.conftest import TEST_ACCESS_KEY, TEST_SECRET_KEY
from tests.helpers.api_uploads import FILES, upload
from tests.helpers.recorded_apply import AppliedButCrashed, apply_recorded_batch, listed_manifest
from zarrchive.checksum import EMPTY_CHECKSUM
from zarrchive.db.models import ZarrChangedObject, ZarrChangeSet, ZarrManifest
from zarrchive.manifest import DifferenceKind, format_timestamp, manifest_key
from zarrchive.services.fsck import manifest_problems
from zarrchive.services.manifests import (
    AuditStatus,
    ManifestSource,
    ManifestStatus,
    audit_manifest,
    current_entries,
    write_manifest,
)
from zarrchive.services.runtime import Archive


def _manifest(archive: Archive, zarr_id: str, checksum: str, source: ManifestSource) -> bytes:
    """Write the manifest of the Zarr's state, check how it was made and that it is the
    listing's, byte for byte; return it."""
    outcome = write_manifest(archive, zarr_id)
    assert outcome.status is ManifestStatus.WRITTEN and outcome.checksum == checksum
    assert outcome.source is source and not outcome.mismatch
    stored = archive.store.get(manifest_key(zarr_id, checksum))
    assert stored is not None
    assert stored == listed_manifest(archive, zarr_id, checksum)
    return stored


def _sets(archive: Archive, zarr_id: str) -> list[tuple[int | None, bool]]:
    with archive.db.session() as session:
        rows = session.execute(
            select(ZarrChangeSet.seq, ZarrChangeSet.manifest_written)
            .where(ZarrChangeSet.zarr_id == zarr_id)
            .order_by(ZarrChangeSet.id)
        )
        return [(seq, written) for seq, written in rows]


def test_records_give_the_listings_manifest_after_each_kind_of_change(
    api: httpx.Client, zarr_id: str, archive: Archive
) -> None:
    # an old Zarr (applied without records): its first manifest is listed
    first = upload(api, zarr_id, FILES)["checksum"]
    _manifest(archive, zarr_id, first, ManifestSource.LISTING)
    assert _sets(archive, zarr_id) == [(None, True)]  # the rest mark the chain starts from
    # overwrites and new files, in new and existing directories
    c1 = apply_recorded_batch(
        archive, zarr_id, {"arr/0": b"zero again", "arr/2": b"two", "new/dir/f": b"f"}
    )
    _manifest(archive, zarr_id, c1, ManifestSource.RECORDS)
    assert _sets(archive, zarr_id) == [(1, True)]  # the rest mark pruned
    # deletions, one emptying a directory
    c2 = apply_recorded_batch(archive, zarr_id, {}, ["arr/sub/deep/x", "other/only"])
    _manifest(archive, zarr_id, c2, ManifestSource.RECORDS)
    # several batches in a row, one manifest: the last change of a path wins
    apply_recorded_batch(archive, zarr_id, {"a/x": b"1", "arr/1": b"uno"})
    apply_recorded_batch(archive, zarr_id, {}, ["a/x"])
    apply_recorded_batch(archive, zarr_id, {"a/x": b"2", "a-b": b"dash", "a.b": b"dot"})
    c5 = apply_recorded_batch(archive, zarr_id, {"arr/1": b"one"}, [])
    stored = _manifest(archive, zarr_id, c5, ManifestSource.RECORDS)
    assert b'"a-b"' in stored and b'"a.b"' in stored
    assert _sets(archive, zarr_id) == [(6, True)]
    audit = audit_manifest(archive, zarr_id)
    assert audit.status is AuditStatus.MATCHES and audit.difference_count == 0
    assert manifest_problems(archive, zarr_id) == []


def test_a_new_zarr_gets_its_first_manifest_from_records(zarr_id: str, archive: Archive) -> None:
    apply_recorded_batch(archive, zarr_id, {"x/0": b"0", "x/1": b"1"})
    checksum = apply_recorded_batch(archive, zarr_id, {".zattrs": b"{}"}, ["x/0"])
    _manifest(archive, zarr_id, checksum, ManifestSource.RECORDS)
    # emptied, then filled again: the chain starts at the empty checksum again
    apply_recorded_batch(archive, zarr_id, {}, [".zattrs", "x/1"])
    with archive.db.session() as session:
        assert (
            session.scalar(
                select(func.count()).where(ZarrChangeSet.checksum_after == EMPTY_CHECKSUM)
            )
            == 1
        )
    checksum = apply_recorded_batch(archive, zarr_id, {"y": b"y"})
    _manifest(archive, zarr_id, checksum, ManifestSource.RECORDS)


def test_a_broken_chain_falls_back_to_listing(
    api: httpx.Client, zarr_id: str, archive: Archive
) -> None:
    first = upload(api, zarr_id, FILES)["checksum"]
    _manifest(archive, zarr_id, first, ManifestSource.LISTING)
    # the previous manifest is gone from S3
    c1 = apply_recorded_batch(archive, zarr_id, {"arr/0": b"z"})
    archive.store.delete(manifest_key(zarr_id, first))
    _manifest(archive, zarr_id, c1, ManifestSource.LISTING)
    # a change set missing in the middle of the chain (pruned, or applied without records)
    apply_recorded_batch(archive, zarr_id, {"arr/1": b"a"})
    c3 = apply_recorded_batch(archive, zarr_id, {"arr/2": b"b"})
    with archive.db.write_session() as session:
        middle = session.scalars(
            select(ZarrChangeSet.id)
            .where(ZarrChangeSet.zarr_id == zarr_id, ZarrChangeSet.manifest_written.is_(False))
            .order_by(ZarrChangeSet.id)
        ).first()
        session.execute(delete(ZarrChangedObject).where(ZarrChangedObject.change_set_id == middle))
        session.execute(delete(ZarrChangeSet).where(ZarrChangeSet.id == middle))
    _manifest(archive, zarr_id, c3, ManifestSource.LISTING)
    # records that do not hash to the checksum (a wrong ETag recorded)
    c4 = apply_recorded_batch(archive, zarr_id, {"arr/3": b"c"})
    with archive.db.write_session() as session:
        session.execute(
            update(ZarrChangedObject).where(ZarrChangedObject.path == "arr/3").values(etag="0" * 32)
        )
    _manifest(archive, zarr_id, c4, ManifestSource.LISTING)
    # the previous manifest's row says S3 disagreed with the archive: not a base
    c5 = apply_recorded_batch(archive, zarr_id, {"arr/4": b"d"})
    with archive.db.write_session() as session:
        session.execute(
            update(ZarrManifest)
            .where(ZarrManifest.zarr_id == zarr_id, ZarrManifest.checksum == c4)
            .values(listing_checksum=first)
        )
    _manifest(archive, zarr_id, c5, ManifestSource.LISTING)
    # records made in the other bucket (before an unembargo moved the objects: new versions)
    c6 = apply_recorded_batch(archive, zarr_id, {"arr/5": b"e"})
    with archive.db.write_session() as session:
        session.execute(
            update(ZarrChangeSet).where(ZarrChangeSet.zarr_id == zarr_id).values(embargoed=True)
        )
    _manifest(archive, zarr_id, c6, ManifestSource.LISTING)
    # and the chain is whole again from there
    c7 = apply_recorded_batch(archive, zarr_id, {"arr/6": b"f"})
    _manifest(archive, zarr_id, c7, ManifestSource.RECORDS)


def test_the_audit_reports_every_difference(
    api: httpx.Client, zarr_id: str, archive: Archive
) -> None:
    first = upload(api, zarr_id, FILES)["checksum"]
    _manifest(archive, zarr_id, first, ManifestSource.LISTING)
    c1 = apply_recorded_batch(archive, zarr_id, {"arr/0": b"z", "arr/9": b"nine"})
    # a wrong version recorded for arr/0: the tree hash cannot see it, the audit does
    with archive.db.write_session() as session:
        session.execute(
            update(ZarrChangedObject)
            .where(ZarrChangedObject.path == "arr/0")
            .values(version_id="not-a-version")
        )
    outcome = write_manifest(archive, zarr_id)
    assert outcome.source is ManifestSource.RECORDS and outcome.checksum == c1
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
    problems = manifest_problems(archive, zarr_id)
    assert problems[0].startswith(
        "manifest arr/0: different: versionId not-a-version in the manifest, "
    )
    assert problems[1:] == [
        "manifest arr/9: missing from S3 (the manifest names it)",
        "manifest stray: extra in S3 (the manifest lacks it)",
    ]


def test_the_copy_answer_is_what_the_listing_says(zarr_id: str, archive: Archive) -> None:
    """The records rest on this: a copy's VersionId, ETag and LastModified (to the second)
    are those S3 lists afterwards."""
    files = {f"c/{i}": str(i).encode() for i in range(120)}
    apply_recorded_batch(archive, zarr_id, files)
    with archive.db.session() as session:
        recorded = {
            path: (version, format_timestamp(modified), size, etag)
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


def test_an_apply_that_crashed_before_its_commit_leaves_no_records(
    zarr_id: str, archive: Archive
) -> None:
    first = apply_recorded_batch(archive, zarr_id, {"a/0": b"0", "a/1": b"1"})
    _manifest(archive, zarr_id, first, ManifestSource.RECORDS)
    batch = {"a/0": b"new", "b/0": b"b"}
    with pytest.raises(AppliedButCrashed):
        apply_recorded_batch(archive, zarr_id, batch, crash_before_commit=True)
    assert _sets(archive, zarr_id) == [(1, True)]  # rolled back with the root
    # whoever takes the batch over copies again (new versions) and records its own answers
    again = apply_recorded_batch(archive, zarr_id, batch)
    stored = _manifest(archive, zarr_id, again, ManifestSource.RECORDS)
    with archive.db.session() as session:
        version = session.scalar(
            select(ZarrChangedObject.version_id).where(ZarrChangedObject.path == "a/0")
        )
    assert version is not None and version.encode() in stored

"""A write behind the archive's back (an object put straight into the Zarr's S3 prefix)
shows where users look once an audit finds it (issue #40): the manifest of the current
checksum carries ``zarrChecksumMismatch`` and ``GET /api/zarr/{id}/`` the Zarr's
``checksum_mismatch``, through later batches (whose manifests records alone would make
clean) until ``fsck --repair``.  On SeaweedFS: the objects are S3's."""

from __future__ import annotations

import httpx
import pytest

from tests.helpers.api_uploads import info, oracle, upload
from tests.helpers.databases import SQLITE_ONLY
from zarrchive.config import PublishedZarrs
from zarrchive.manifest import ManifestStatistics, manifest_key, read_manifest
from zarrchive.services.runtime import Archive
from zarrchive.services.zarr_engine.fsck import fsck
from zarrchive.services.zarr_engine.manifests import (
    AuditStatus,
    ManifestStatus,
    audit_manifest,
    write_manifest,
)
from zarrchive.storage.keys import zarr_object_key

pytestmark = SQLITE_ONLY

FILES = {".zgroup": b"{}", "arr/.zarray": b"{...}", "arr/0": b"zero", "arr/1": b"one"}
STRAY = {"arr/stray": b"written behind the archive's back"}


def manifest_statistics(archive: Archive, zarr_id: str, checksum: str) -> ManifestStatistics:
    body = archive.store.get(manifest_key(zarr_id, checksum))
    assert body is not None
    return read_manifest(body, verify=False).statistics


def test_fsck_raises_the_alarm_until_repaired(
    api: httpx.Client, zarr_id: str, archive: Archive
) -> None:
    upload(api, zarr_id, FILES)
    assert write_manifest(archive, zarr_id).status is ManifestStatus.WRITTEN
    assert fsck(archive, zarr_id).ok  # a clean audit raises nothing
    checksum = info(api, zarr_id)["checksum"]
    archive.store.put(zarr_object_key(zarr_id, "arr/stray"), STRAY["arr/stray"])
    assert info(api, zarr_id)["checksum_mismatch"] is None  # nothing has looked yet

    assert not fsck(archive, zarr_id).ok
    behind = oracle({**FILES, **STRAY})
    assert info(api, zarr_id)["checksum_mismatch"] == behind
    stats = manifest_statistics(archive, zarr_id, checksum)
    assert (stats.zarr_checksum, stats.zarr_checksum_mismatch) == (behind, checksum)

    # a batch through the archive: the alarm stays (S3 still holds the stray object)
    upload(api, zarr_id, {"arr/2": b"two"})
    assert write_manifest(archive, zarr_id).status is ManifestStatus.WRITTEN
    after = info(api, zarr_id)
    assert after["checksum"] == oracle({**FILES, "arr/2": b"two"})
    behind = oracle({**FILES, **STRAY, "arr/2": b"two"})
    assert after["checksum_mismatch"] == behind
    stats = manifest_statistics(archive, zarr_id, after["checksum"])
    assert stats.zarr_checksum_mismatch == after["checksum"]

    # the repair takes S3's content as the Zarr's: the alarm goes
    assert fsck(archive, zarr_id, repair=True).repaired
    write_manifest(archive, zarr_id)
    repaired = info(api, zarr_id)
    assert repaired["checksum"] == behind and repaired["checksum_mismatch"] is None
    assert manifest_statistics(archive, zarr_id, behind).zarr_checksum_mismatch is None
    assert fsck(archive, zarr_id).ok


@pytest.mark.settings(published_zarrs=PublishedZarrs.SNAPSHOT)
def test_manifest_audit_raises_the_alarm_on_a_pinned_manifest_and_it_stays(
    api: httpx.Client, dandiset: str, zarr_id: str, archive: Archive
) -> None:
    """The manifest a published version pins is never rewritten: its row carries the
    alarm, and the next state's manifest (which records alone would make from the pinned,
    clean one) is listed and carries it too."""
    upload(api, zarr_id, FILES)
    api.post(
        f"/api/dandisets/{dandiset}/versions/draft/assets/",
        json={"metadata": {"path": "test.zarr"}, "zarr_id": zarr_id},
    ).raise_for_status()
    api.post(f"/api/dandisets/{dandiset}/versions/draft/publish/").raise_for_status()
    checksum = info(api, zarr_id)["checksum"]
    pinned = archive.store.get(manifest_key(zarr_id, checksum))
    assert audit_manifest(archive, zarr_id).status is AuditStatus.MATCHES
    assert info(api, zarr_id)["checksum_mismatch"] is None
    archive.store.put(zarr_object_key(zarr_id, "arr/stray"), STRAY["arr/stray"])

    outcome = audit_manifest(archive, zarr_id)
    assert outcome.status is AuditStatus.DIFFERS
    assert outcome.s3_checksum == oracle({**FILES, **STRAY})
    assert info(api, zarr_id)["checksum_mismatch"] == outcome.s3_checksum
    assert archive.store.get(manifest_key(zarr_id, checksum)) == pinned

    upload(api, zarr_id, {"arr/2": b"two"})
    assert write_manifest(archive, zarr_id).status is ManifestStatus.WRITTEN
    after = info(api, zarr_id)
    assert after["checksum_mismatch"] == oracle({**FILES, **STRAY, "arr/2": b"two"})
    stats = manifest_statistics(archive, zarr_id, after["checksum"])
    assert stats.zarr_checksum_mismatch == after["checksum"]

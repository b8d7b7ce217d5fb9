"""Manifest files written by the service (``write_manifest``): exact content, statistics,
alarms, busy and pinned Zarrs; presigned manifest URLs."""

from __future__ import annotations

import dataclasses
from typing import Any

import httpx
import pytest

from tests.fixtures import ZARR_MANIFESTS
from tests.helpers.api_uploads import FILES, info, upload
from tests.helpers.manifest_records import forget_records
from tests.helpers.manifests import stored_manifest
from tests.helpers.zarr_client import md5
from zarrchive.checksum import EMPTY_CHECKSUM, compute_checksum
from zarrchive.db.models import Zarr
from zarrchive.manifest import DifferenceKind, format_timestamp, manifest_key, read_manifest
from zarrchive.services.runtime import Archive
from zarrchive.services.zarr_engine.manifests import (
    ManifestSource,
    ManifestStatus,
    audit_manifest,
    manifest_url,
    write_manifest,
)
from zarrchive.services.zarr_engine.zarrs import ZarrRef


def test_manifest_content_is_exact(
    api: httpx.Client, anon: httpx.Client, zarr_id: str, archive: Archive, s3: Any
) -> None:
    final = upload(api, zarr_id, FILES)
    assert final["manifest_url"] is None  # no job queue in this test: pending
    outcome = write_manifest(archive, zarr_id)
    assert outcome.status == "written" and not outcome.mismatch
    manifest = stored_manifest(archive, zarr_id, final["checksum"])
    assert list(manifest) == ["schemaVersion", "fields", "statistics", "entries"]
    assert manifest["fields"] == ["versionId", "lastModified", "size", "ETag"]
    expected_entries: dict[str, Any] = {}
    newest = None
    for path, body in FILES.items():
        head = s3.head_object(Bucket=archive.store.bucket, Key=f"zarr/{zarr_id}/{path}")
        node = expected_entries
        *dirs, name = path.split("/")
        for d in dirs:
            node = node.setdefault(d, {})
        node[name] = [
            head["VersionId"],
            format_timestamp(head["LastModified"]),
            len(body),
            md5(body),
        ]
        newest = max(newest or head["LastModified"], head["LastModified"])
    assert manifest["entries"] == expected_entries
    assert newest is not None
    assert manifest["statistics"] == {
        "entries": len(FILES),
        "depth": 3,
        "totalSize": sum(len(b) for b in FILES.values()),
        "lastModified": format_timestamp(newest),
        "zarrChecksum": final["checksum"],
        "zarrChecksumMismatch": None,
    }
    # the layout of the fixtures: one-space indent, one line per entry array
    raw = archive.store.get(manifest_key(zarr_id, final["checksum"]))
    assert raw is not None and raw.startswith(b'{\n "schemaVersion": 2,\n "fields": ["versionId"')
    head = s3.head_object(Bucket=archive.store.bucket, Key=manifest_key(zarr_id, final["checksum"]))
    assert head["ContentType"] == "application/json"
    # our reader agrees, and the API points at it; the public bucket serves it anonymously
    assert read_manifest(raw).statistics.zarr_checksum == final["checksum"]
    now = info(api, zarr_id)
    assert now["checksum_mismatch"] is None and now["manifest_status"] == "available"
    assert httpx.get(now["manifest_url"]).content == raw
    listed = anon.get(f"/api/zarr/{zarr_id}/manifests/").json()
    assert [m["checksum"] for m in listed] == [final["checksum"]]
    # idempotent
    assert write_manifest(archive, zarr_id).status == "exists"


@pytest.mark.parametrize(
    ("files", "depth"),
    [
        ({}, 0),
        ({"a": b"1", "b": b"22"}, 0),
        ({"a/b": b"1", "c": b"2"}, 1),
        ({"x/y/z/w": b"1", "q": b"22"}, 3),
    ],
)
def test_statistics(
    api: httpx.Client, zarr_id: str, archive: Archive, files: dict[str, bytes], depth: int
) -> None:
    checksum = upload(api, zarr_id, files)["checksum"] if files else EMPTY_CHECKSUM
    assert write_manifest(archive, zarr_id).status == "written"
    stats = stored_manifest(archive, zarr_id, checksum)["statistics"]
    assert stats["depth"] == depth
    assert stats["entries"] == len(files)
    assert stats["totalSize"] == sum(len(b) for b in files.values())
    assert stats["zarrChecksum"] == checksum
    if not files:
        assert stats["lastModified"] is None
        empty = next(ZARR_MANIFESTS.glob("*481a2f77*"))
        raw = archive.store.get(manifest_key(zarr_id, checksum))
        assert raw == empty.read_bytes()


def test_object_written_behind_the_apis_back_raises_the_alarm(
    api: httpx.Client, zarr_id: str, archive: Archive
) -> None:
    checksum = upload(api, zarr_id, FILES)["checksum"]
    archive.store.put(f"zarr/{zarr_id}/arr/intruder", b"not through the API")
    # from the apply's records (no listing), the manifest names what the archive wrote;
    # the audit (and fsck) is what lists S3 and sees the intruder
    outcome = write_manifest(archive, zarr_id)
    assert outcome.source is ManifestSource.RECORDS and not outcome.mismatch
    audit = audit_manifest(archive, zarr_id)
    assert [(d.path, d.kind) for d in audit.differences] == [("arr/intruder", DifferenceKind.EXTRA)]
    # a manifest listed from S3 (an old Zarr, without records) raises the alarm itself
    forget_records(archive, zarr_id)
    outcome = write_manifest(archive, zarr_id, force=True)
    assert outcome.source is ManifestSource.LISTING
    assert outcome.mismatch
    intruded = {**FILES, "arr/intruder": b"not through the API"}
    listing = compute_checksum([(p, len(b), md5(b)) for p, b in intruded.items()])
    assert outcome.listing_checksum == listing
    stats = stored_manifest(archive, zarr_id, checksum)["statistics"]
    assert stats["zarrChecksum"] == listing
    assert stats["zarrChecksumMismatch"] == checksum
    assert info(api, zarr_id)["checksum_mismatch"] == listing


def test_busy_zarr_gets_no_manifest(api: httpx.Client, zarr_id: str, archive: Archive) -> None:
    upload(api, zarr_id, FILES)
    api.post(f"/api/zarr/{zarr_id}/upload/", json=[{"path": "n", "etag": md5(b"n")}])
    assert write_manifest(archive, zarr_id).status == "busy"


def test_forced_rewrite_never_touches_a_pinned_manifest(
    api: httpx.Client, zarr_id: str, archive: Archive, dandiset: str
) -> None:
    """``write_manifest(force=True)`` rewrites a manifest, except one a published version
    pins: its object versions are what that version reads."""
    from tests.helpers.assets import add_zarr_asset, ok

    checksum = upload(api, zarr_id, FILES)["checksum"]
    first = write_manifest(archive, zarr_id)
    assert first.status is ManifestStatus.WRITTEN
    assert write_manifest(archive, zarr_id, force=True).status is ManifestStatus.WRITTEN
    add_zarr_asset(api, dandiset, zarr_id, "data.zarr")
    ok(api.post(f"/api/dandisets/{dandiset}/versions/draft/publish/"))
    key = manifest_key(zarr_id, checksum)
    before = archive.store.head(key)
    assert write_manifest(archive, zarr_id, force=True).status is ManifestStatus.EXISTS
    assert archive.store.head(key) == before


def test_embargoed_manifest_urls_follow_the_presign_expiry(
    api: httpx.Client, archive: Archive, embargoed: tuple[str, str]
) -> None:
    _identifier, zarr_id = embargoed
    upload(api, zarr_id, FILES)
    write_manifest(archive, zarr_id)
    short = dataclasses.replace(
        archive, settings=archive.settings.with_overrides(presign_expiry=77)
    )
    with archive.db.session() as session:
        zarr = session.get(Zarr, zarr_id)
        assert zarr is not None
        url = manifest_url(short, ZarrRef.of(zarr), zarr.checksum)
    assert "X-Amz-Expires=77" in url
    assert httpx.get(url).status_code == 200

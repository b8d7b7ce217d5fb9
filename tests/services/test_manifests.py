"""Manifest files written by the archive: exact content, statistics, alarms, access, queues."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.conftest import TEST_ACCESS_KEY, TEST_SECRET_KEY
from tests.fixtures import ZARR_MANIFESTS
from tests.helpers.api_uploads import FILES, info, upload
from tests.helpers.zarr_client import md5
from zarrchive.checksum import EMPTY_CHECKSUM, compute_checksum
from zarrchive.jobs import InProcessJobQueue, RedisJobQueue
from zarrchive.manifest import format_timestamp, manifest_key, read_manifest
from zarrchive.services.manifests import ManifestStatus, write_manifest
from zarrchive.services.runtime import Archive, set_current_archive
from zarrchive.storage.seaweedfs import SeaweedFS

REDIS_URL = os.environ.get("ZARRCHIVE_TEST_REDIS_URL", "redis://127.0.0.1:6379/0")


def stored_manifest(archive: Archive, zarr_id: str, checksum: str) -> dict[str, Any]:
    data = archive.store.get(manifest_key(zarr_id, checksum))
    assert data is not None, "no manifest"
    parsed: dict[str, Any] = json.loads(data)
    return parsed


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
    outcome = write_manifest(archive, zarr_id)
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


def test_quick_batches_then_rest_give_the_final_manifest(
    api: httpx.Client, zarr_id: str, archive: Archive
) -> None:
    queue = InProcessJobQueue(backoff=0.1)
    archive.jobs = queue
    set_current_archive(archive)
    try:
        checksums = []
        for i in range(10):
            checksums.append(upload(api, zarr_id, {f"b/{i}": str(i).encode()})["checksum"])
        assert queue.join(timeout=60)
        queue.close()
    finally:
        archive.jobs = None
        set_current_archive(None)
    final = info(api, zarr_id)
    assert final["checksum"] == checksums[-1]
    assert final["manifest_url"] is not None
    manifest = stored_manifest(archive, zarr_id, checksums[-1])
    assert manifest["statistics"]["entries"] == 10
    listed = [m["checksum"] for m in api.get(f"/api/zarr/{zarr_id}/manifests/").json()]
    assert listed[-1] == checksums[-1]
    assert len(listed) < 10 or listed == checksums  # coalesced, or each written in time


def test_worker_on_redis_writes_the_manifest(
    api: httpx.Client, zarr_id: str, archive: Archive, seaweedfs: SeaweedFS, tmp_path: Path
) -> None:
    redis = pytest.importorskip("redis")
    try:
        redis.Redis.from_url(REDIS_URL, socket_connect_timeout=2).ping()
    except Exception as exc:
        pytest.skip(f"Redis is not reachable at {REDIS_URL}: {exc}")
    queue_name = f"test-{uuid.uuid4().hex[:8]}"
    queue = RedisJobQueue(REDIS_URL, queue_name=queue_name)
    archive.jobs = queue
    try:
        checksum = upload(api, zarr_id, FILES)["checksum"]
    finally:
        archive.jobs = None
    settings = archive.settings
    env = {k: v for k, v in os.environ.items() if not k.startswith("ZARRCHIVE_")}
    env.update(
        ZARRCHIVE_DATA_DIR=str(tmp_path),
        ZARRCHIVE_DATABASE_URL=settings.database_url,
        ZARRCHIVE_S3_ENDPOINT_URL=seaweedfs.endpoint_url,
        ZARRCHIVE_S3_BUCKET=settings.s3_bucket,
        ZARRCHIVE_S3_EMBARGO_BUCKET=settings.s3_embargo_bucket,
        ZARRCHIVE_S3_ACCESS_KEY_ID=TEST_ACCESS_KEY,
        ZARRCHIVE_S3_SECRET_ACCESS_KEY=TEST_SECRET_KEY,
        ZARRCHIVE_REDIS_URL=REDIS_URL,
    )
    done = subprocess.run(
        [sys.executable, "-m", "zarrchive.cli", "worker", "--burst", "--queue", queue_name],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert stored_manifest(archive, zarr_id, checksum)["statistics"]["entries"] == len(FILES)
    assert info(api, zarr_id)["manifest_url"] is not None
    queue.close()


def test_backfill_cli(api: httpx.Client, zarr_id: str, archive: Archive, dandiset: str) -> None:
    from typer.testing import CliRunner

    from zarrchive.cli import app

    checksum = upload(api, zarr_id, FILES)["checksum"]
    other = api.post("/api/zarr/", json={"name": "empty.zarr", "dandiset": dandiset}).json()
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
    result = runner.invoke(app, ["manifest", "backfill", "--all"], env=env)
    assert result.exit_code == 0, result.output
    assert f"written {zarr_id} {checksum}" in result.output
    assert f"written {other['zarr_id']} {EMPTY_CHECKSUM}" in result.output
    assert "2 Zarrs: 2 written, 0 exists" in result.output
    assert stored_manifest(archive, zarr_id, checksum)["statistics"]["entries"] == len(FILES)
    again = runner.invoke(app, ["manifest", "backfill", zarr_id], env=env)
    assert again.exit_code == 0 and "1 Zarrs: 0 written, 1 exists" in again.output
    bad = runner.invoke(app, ["manifest", "backfill"], env=env)
    assert bad.exit_code == 2


def test_publishing_guarantees_the_manifest_of_the_pinned_checksum(
    api: httpx.Client, zarr_id: str, archive: Archive, dandiset: str
) -> None:
    from tests.helpers.assets import add_zarr_asset, ok

    checksum = upload(api, zarr_id, FILES)["checksum"]  # no queue: no manifest yet
    assert info(api, zarr_id)["manifest_url"] is None
    add_zarr_asset(api, dandiset, zarr_id, "data.zarr")
    queue = InProcessJobQueue(backoff=0.1)
    archive.jobs = queue
    set_current_archive(archive)
    try:
        ok(api.post(f"/api/dandisets/{dandiset}/versions/draft/publish/"))
        assert queue.join(timeout=60)
        queue.close()
    finally:
        archive.jobs = None
        set_current_archive(None)
    assert stored_manifest(archive, zarr_id, checksum)["statistics"]["zarrChecksum"] == checksum


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

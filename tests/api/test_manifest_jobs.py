"""Manifests written by jobs: after quick batches, by a worker on Redis, on publishing; the
backfill CLI."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from pathlib import Path

import httpx
import pytest

from tests.conftest import TEST_ACCESS_KEY, TEST_SECRET_KEY
from tests.helpers.api_uploads import FILES, info, upload
from tests.helpers.manifests import stored_manifest
from zarrchive.checksum import EMPTY_CHECKSUM
from zarrchive.jobs import InProcessJobQueue, RedisJobQueue
from zarrchive.services.runtime import Archive, set_current_archive
from zarrchive.storage.seaweedfs import SeaweedFS

REDIS_URL = os.environ.get("ZARRCHIVE_TEST_REDIS_URL", "redis://127.0.0.1:6379/0")


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
        ZARRCHIVE_REDIS_QUEUE=queue_name,
    )
    done = subprocess.run(
        [sys.executable, "-m", "zarrchive.cli", "worker", "--burst", "--queue", "zarr"],
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

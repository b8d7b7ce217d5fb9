"""Crashes: SIGKILL the server at random points of ``complete``; after a restart the Zarr is
exactly as before or after the batch, fsck is clean and nothing is lost."""

from __future__ import annotations

import os
import random
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.conftest import make_settings
from tests.helpers.consistency import assert_consistent
from tests.helpers.reliability import budget, count, note
from tests.helpers.server_process import ServerProcess
from tests.helpers.zarr_client import (
    authed,
    create_dandiset,
    create_zarr,
    expect,
    md5,
    oracle_checksum,
    put_presigned,
    upload,
    wait_at_rest,
)
from zarrchive.services.identity.auth import create_user
from zarrchive.services.runtime import Archive
from zarrchive.storage.seaweedfs import SeaweedFS

PART = "crashes"


@pytest.fixture
def crash_setup(
    seaweedfs: SeaweedFS, bucket: str, embargo_bucket: str, tmp_path: Path
) -> Iterator[tuple[ServerProcess, Archive, str]]:
    """A ``zarrchive serve`` child over SQLite in a temporary data dir and the test S3."""
    settings = make_settings(
        seaweedfs, bucket, f"sqlite:///{tmp_path / 'zarrchive.sqlite3'}", tmp_path
    )
    archive = Archive.from_settings(settings)  # migrates; the test's own view of the state
    with archive.db.session() as session:
        token = create_user(session, "owner", admin=False)[1]
    server = ServerProcess(settings, tmp_path / "server.log")
    server.start()
    try:
        yield server, archive, token
    finally:
        server.stop()
        archive.close()


def test_sigkill_during_complete_leaves_before_or_after(
    crash_setup: tuple[ServerProcess, Archive, str], s3: Any
) -> None:
    server, archive, token = crash_setup
    trials = budget(3, 24)
    rng = random.Random()
    seed = rng.randrange(2**32)
    rng.seed(seed)
    note(PART, f"seed {seed}")
    bucket = archive.settings.s3_bucket
    with authed(server.url, token) as api:
        zarr_id = create_zarr(api, create_dandiset(api, "crashes"))
        files = {f"d{i % 3}/{i}": os.urandom(32) for i in range(12)}
        upload(api, zarr_id, files)
    outcomes = {"before": 0, "after": 0}
    for trial in range(trials):
        batch = {f"d{rng.randrange(4)}/{rng.randrange(20)}": os.urandom(40) for _ in range(8)}
        after = {**files, **batch}
        with authed(server.url, token) as api:
            urls = expect(
                api.post(
                    f"/api/zarr/{zarr_id}/upload/",
                    json=[{"path": p, "etag": md5(b)} for p, b in batch.items()],
                )
            )
            with httpx.Client(timeout=60) as raw:
                for item in urls:
                    expect(put_presigned(raw, item["upload_url"], batch[item["path"]]))
        delay = rng.uniform(0, 0.25)

        def complete() -> None:
            try:
                with authed(server.url, token, timeout=30) as c:
                    c.post(f"/api/zarr/{zarr_id}/upload/complete/")
            except httpx.HTTPError:
                pass  # the server died under it

        thread = threading.Thread(target=complete)
        thread.start()
        time.sleep(delay)
        server.kill()
        count(PART, faults=1)
        thread.join(30)
        server.start()
        with authed(server.url, token) as api:
            # a batch verified before the kill is applied by the start sweep
            info = wait_at_rest(api, zarr_id)
            if info["checksum"] == oracle_checksum(after):
                outcomes["after"] += 1
            else:
                assert info["checksum"] == oracle_checksum(files), (trial, delay, info)
                outcomes["before"] += 1
                # the batch is still open (or was rolled back): completing it again works
                if expect(api.get(f"/api/zarr/{zarr_id}/")).get("upload_in_progress"):
                    expect(api.post(f"/api/zarr/{zarr_id}/upload/complete/"))
                    info = wait_at_rest(api, zarr_id)
                    assert info["checksum"] == oracle_checksum(after)
                else:
                    after = files
            listed = assert_consistent(archive, api, s3, bucket, zarr_id)
            assert listed == {p: (len(b), md5(b)) for p, b in after.items()}, trial
            count(PART, cases=1)
        files = after
    note(PART, f"{outcomes['before']} before, {outcomes['after']} after")

"""S3 and database faults: S3 paused (SIGSTOP) mid-batch gets 503 + Retry-After within a
bounded time, changes nothing, and the same batch completes once S3 is back."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.conftest import (
    PUBLIC_BUCKET_PREFIX,
    TEST_ACCESS_KEY,
    TEST_SECRET_KEY,
    LiveServer,
    make_settings,
)
from tests.helpers.consistency import assert_consistent
from tests.helpers.reliability import FULL, count
from tests.helpers.throwaway_postgres import ThrowawayPostgres, find_pg_bin
from tests.helpers.zarr_client import (
    authed,
    create_dandiset,
    create_zarr,
    expect,
    md5,
    oracle_checksum,
    put_presigned,
    upload,
)
from zarrchive.services.identity.auth import create_user
from zarrchive.services.runtime import Archive
from zarrchive.storage import objects
from zarrchive.storage.objects import READ_TIMEOUT
from zarrchive.storage.seaweedfs import SeaweedFS

PART = "faults"
#: S3 timeouts are at most 10 s (issue 11): an answer within this bound, retries included
#: (the archive's worst: 2 attempts of an 8 s read, and the request's own work on a machine
#: that may be loaded, issue #41); botocore's defaults (60 s reads, retried) would exceed it.
ANSWER_WITHIN = 45.0
#: The S3 read timeout of the paused-S3 test's archive under ``make test``'s budget: each
#: request with S3 paused waits it out on each attempt (the archive's own 8 s: 16 s a
#: request).  The test checks that the archive's own timeout keeps within ANSWER_WITHIN;
#: ``make reliability`` pauses S3 under the archive's own timeouts.
BUDGET_READ_TIMEOUT = 3


@pytest.fixture
def own_seaweedfs(tmp_path: Path) -> Iterator[SeaweedFS]:
    """A SeaweedFS of this test alone: pausing it disturbs no other test."""
    server = SeaweedFS(
        tmp_path / "s3",
        TEST_ACCESS_KEY,
        TEST_SECRET_KEY,
        public_read_buckets=[f"{PUBLIC_BUCKET_PREFIX}*"],
    )
    server.start()
    try:
        yield server
    finally:
        if server.process is not None:
            server.process.send_signal(signal.SIGCONT)
        server.stop()


@pytest.fixture
def fault_api(
    own_seaweedfs: SeaweedFS,
    live_server: LiveServer,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> Iterator[tuple[httpx.Client, Archive]]:
    if not FULL:
        monkeypatch.setattr(objects, "READ_TIMEOUT", BUDGET_READ_TIMEOUT)
    client: Any = own_seaweedfs.client()
    public = f"{PUBLIC_BUCKET_PREFIX}faults"
    for name in (public, public.replace(PUBLIC_BUCKET_PREFIX, "zemb-", 1)):
        client.create_bucket(Bucket=name)
        client.put_bucket_versioning(Bucket=name, VersioningConfiguration={"Status": "Enabled"})
    settings = make_settings(
        own_seaweedfs, public, f"sqlite:///{tmp_path / 'zarrchive.sqlite3'}", tmp_path
    )
    archive = Archive.from_settings(settings)
    with archive.db.session() as session:
        token = create_user(session, "owner", admin=False)[1]
    live_server.app.state.archive = archive
    try:
        with authed(live_server.url, token, timeout=ANSWER_WITHIN + 5) as api:
            yield api, archive
    finally:
        archive.close()


def test_s3_paused_mid_batch(
    fault_api: tuple[httpx.Client, Archive], own_seaweedfs: SeaweedFS
) -> None:
    api, archive = fault_api
    # the archive's own S3 timeouts answer within the bound, retries included (make test's
    # archive waits BUDGET_READ_TIMEOUT instead: see there)
    assert isinstance(archive.store, objects.ObjectStore)
    config: Any = archive.store.client.meta.config  # (botocore's stubs name no options)
    attempts = config.retries["total_max_attempts"]
    assert READ_TIMEOUT * attempts < ANSWER_WITHIN, (READ_TIMEOUT, attempts)
    if not FULL:
        assert config.read_timeout == BUDGET_READ_TIMEOUT
    zarr_id = create_zarr(api, create_dandiset(api, "faults"))
    files = {"a/0": b"zero", "a/1": b"one"}
    upload(api, zarr_id, files)
    batch = {"a/2": os.urandom(20), "b/0": os.urandom(20)}
    urls = expect(
        api.post(
            f"/api/zarr/{zarr_id}/upload/",
            json=[{"path": p, "etag": md5(b)} for p, b in batch.items()],
        )
    )
    with httpx.Client(timeout=30) as raw:
        for item in urls:
            expect(put_presigned(raw, item["upload_url"], batch[item["path"]]))
    assert own_seaweedfs.process is not None
    pid = own_seaweedfs.process.pid
    os.kill(pid, signal.SIGSTOP)
    count(PART, faults=1)
    try:
        for method, url in (
            ("POST", f"/api/zarr/{zarr_id}/upload/complete/"),
            # a route that reads S3 on every request (DANDI's flat listing is cut from the
            # archive's records and answers without S3 once they cover the Zarr)
            ("GET", f"/api/zarr/{zarr_id}/node/a"),
        ):
            started = time.monotonic()
            try:
                response = api.request(method, url)
            except httpx.TimeoutException:
                pytest.fail(f"{method} {url}: no answer within {ANSWER_WITHIN} s while S3 hangs")
            elapsed = time.monotonic() - started
            count(PART, cases=1, server_errors=int(response.status_code >= 500))
            assert response.status_code == 503, (method, url, response.status_code, response.text)
            assert int(response.headers["Retry-After"]) > 0
            assert elapsed < ANSWER_WITHIN
        # the database still answers, and nothing changed
        info = expect(api.get(f"/api/zarr/{zarr_id}/"))
        assert info["checksum"] == oracle_checksum(files) and info["upload_in_progress"]
    finally:
        os.kill(pid, signal.SIGCONT)
    # S3 is back: the same batch completes
    info = expect(api.post(f"/api/zarr/{zarr_id}/upload/complete/"))
    assert info["checksum"] == oracle_checksum({**files, **batch})
    assert_consistent(archive, api, own_seaweedfs.client(), archive.settings.s3_bucket, zarr_id)


@pytest.fixture
def own_postgres() -> Iterator[ThrowawayPostgres]:
    bin_dir = find_pg_bin()
    if bin_dir is None or (shutil.which("runuser") is None and os.geteuid() == 0):
        pytest.skip("no PostgreSQL binaries (initdb, pg_ctl) to run a throwaway cluster")
    cluster = ThrowawayPostgres(bin_dir)
    try:
        cluster.init()
        cluster.start()
    except (subprocess.CalledProcessError, OSError) as exc:
        cluster.destroy()
        pytest.skip(f"could not start a throwaway PostgreSQL cluster: {exc}")
    try:
        yield cluster
    finally:
        cluster.destroy()


def test_postgresql_restart_mid_batch(
    own_postgres: ThrowawayPostgres,
    seaweedfs: SeaweedFS,
    bucket: str,
    embargo_bucket: str,
    live_server: LiveServer,
    tmp_path: Path,
    s3: Any,
) -> None:
    """The database goes away mid-batch: 503 + Retry-After within a bounded time, nothing
    changes, and the same batch completes once it is back."""
    settings = make_settings(seaweedfs, bucket, own_postgres.url, tmp_path)
    archive = Archive.from_settings(settings)
    try:
        with archive.db.session() as session:
            token = create_user(session, "owner", admin=False)[1]
        live_server.app.state.archive = archive
        with authed(live_server.url, token, timeout=ANSWER_WITHIN + 5) as api:
            zarr_id = create_zarr(api, create_dandiset(api, "pg"))
            files = {"a/0": b"zero"}
            upload(api, zarr_id, files)
            batch = {"a/1": os.urandom(20)}
            (item,) = expect(
                api.post(
                    f"/api/zarr/{zarr_id}/upload/",
                    json=[{"path": p, "etag": md5(b)} for p, b in batch.items()],
                )
            )
            with httpx.Client(timeout=30) as raw:
                expect(put_presigned(raw, item["upload_url"], batch["a/1"]))
            own_postgres.stop()
            count(PART, faults=1)
            try:
                started = time.monotonic()
                try:
                    response = api.post(f"/api/zarr/{zarr_id}/upload/complete/")
                except httpx.TimeoutException:
                    pytest.fail(f"no answer within {ANSWER_WITHIN} s while the database is down")
                count(PART, cases=1, server_errors=int(response.status_code >= 500))
                assert time.monotonic() - started < ANSWER_WITHIN
                assert response.status_code == 503, (response.status_code, response.text)
                assert int(response.headers["Retry-After"]) > 0
            finally:
                own_postgres.start()
            info = expect(api.get(f"/api/zarr/{zarr_id}/"))
            assert info["checksum"] == oracle_checksum(files) and info["upload_in_progress"]
            info = expect(api.post(f"/api/zarr/{zarr_id}/upload/complete/"))
            assert info["checksum"] == oracle_checksum({**files, **batch})
            assert_consistent(archive, api, s3, bucket, zarr_id)
    finally:
        archive.close()

"""``zarrchive publish`` in snapshot mode says the draft stays writable; ``zarrchive admin gc``
is a dry run by default and never removes a pinned version."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest
from tests.conftest import LiveServer, Users
from tests.helpers.api_uploads import upload
from tests.helpers.assets import add_zarr_asset, md5, ok
from tests.helpers.snapshots import admin_env, oracle, read_snapshot
from typer.testing import CliRunner

from zarrchive.cli import app
from zarrchive.config import PublishedZarrs, Settings


@pytest.fixture
def database_url(tmp_path: Path) -> str:
    """SQLite only: the commands are the subject here, not the database."""
    return f"sqlite:///{tmp_path / 'zarrchive.sqlite3'}"


pytestmark = pytest.mark.settings(published_zarrs=PublishedZarrs.SNAPSHOT)


def all_versions(s3: Any, bucket: str, zid: str) -> set[tuple[str, str]]:
    found = set()
    for prefix in (f"zarr/{zid}/", f"zarr_checksums/{zid}/"):
        listing = s3.list_object_versions(Bucket=bucket, Prefix=prefix)
        found |= {(v["Key"], v["VersionId"]) for v in listing.get("Versions", [])}
        found |= {(m["Key"], m["VersionId"]) for m in listing.get("DeleteMarkers", [])}
    return found


def test_publish_says_the_draft_stays_writable(
    api: httpx.Client,
    dandiset: str,
    zarr_id: str,
    live_server: LiveServer,
    users: Users,
) -> None:
    upload(api, zarr_id, {"a": b"abc"})
    add_zarr_asset(api, dandiset, zarr_id, "data.zarr")
    env = {k: v for k, v in os.environ.items() if not k.startswith("ZARRCHIVE_")}
    env.update(ZARRCHIVE_URL=live_server.url, ZARRCHIVE_TOKEN=users.owner, COLUMNS="200")
    command = [sys.executable, "-m", "zarrchive.cli", "publish", dandiset]
    refused = subprocess.run(
        command, stdin=subprocess.DEVNULL, capture_output=True, text=True, env=env, timeout=60
    )
    assert refused.returncode == 2
    assert "1 Zarr(s) would have their state pinned" in refused.stderr
    result = subprocess.run(
        [*command, "--yes"],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    assert "IMMUTABLE" not in result.stderr
    assert "pins the current state of 1 Zarr(s)" in result.stderr
    assert "The draft's Zarrs stay writable" in result.stderr
    # and it does: the draft changes, the version keeps its state
    upload(api, zarr_id, {"a": b"changed", "b": b"new"})
    assert read_snapshot(api, zarr_id, oracle({"a": b"abc"})) == {"a": b"abc"}


def test_gc_dry_run_then_apply(
    api: httpx.Client,
    dandiset: str,
    zarr_id: str,
    settings: Settings,
    s3: Any,
    bucket: str,
) -> None:
    upload(api, zarr_id, {"a": b"1", "b": b"pinned"})
    add_zarr_asset(api, dandiset, zarr_id, "data.zarr")
    ok(api.post(f"/api/dandisets/{dandiset}/versions/draft/publish/"))
    upload(api, zarr_id, {"a": b"22"})
    upload(api, zarr_id, {"a": b"333", "b": b"changed"})
    before = all_versions(s3, bucket, zarr_id)
    env = admin_env(settings)
    result = CliRunner().invoke(app, ["admin", "gc", zarr_id, "--retention-days", "0"], env=env)
    assert result.exit_code == 0, result.stderr
    lines = [line.split("\t") for line in result.stdout.splitlines()]
    assert lines and all(line[0] == "would remove" for line in lines)
    listed = {(line[1], line[2]) for line in lines}
    total = sum(int(line[3]) for line in lines)
    # a's middle version (2 bytes) goes; a's and b's pinned versions stay
    assert (f"zarr/{zarr_id}/a", _version_of(s3, bucket, f"zarr/{zarr_id}/a", b"22")) in listed
    assert all(not key.endswith("/b") for key, _ in listed)
    assert f"would remove {len(lines)} object versions and 0 staging areas: {total} bytes" in (
        result.stderr.replace("\n", " ")
    )
    assert all_versions(s3, bucket, zarr_id) == before  # a dry run removes nothing
    result = CliRunner().invoke(
        app, ["admin", "gc", zarr_id, "--apply", "--retention-days", "0"], env=env
    )
    assert result.exit_code == 0, result.stderr
    assert all_versions(s3, bucket, zarr_id) == before - listed
    assert read_snapshot(api, zarr_id, oracle({"a": b"1", "b": b"pinned"})) == {
        "a": b"1",
        "b": b"pinned",
    }
    response = api.post(f"/api/zarr/{zarr_id}/upload/", json=[{"path": "c", "etag": md5(b"c")}])
    assert response.status_code == 200  # still writable


def _version_of(s3: Any, bucket: str, key: str, content: bytes) -> str:
    for version in s3.list_object_versions(Bucket=bucket, Prefix=key)["Versions"]:
        body = s3.get_object(Bucket=bucket, Key=key, VersionId=version["VersionId"])["Body"]
        if body.read() == content:
            return str(version["VersionId"])
    raise AssertionError(f"no version of {key} holds {content!r}")

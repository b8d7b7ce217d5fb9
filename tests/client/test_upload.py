"""Uploads through the library against the live server and a real SeaweedFS."""

from __future__ import annotations

import shutil
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from tests.helpers.local_zarr import file_count, make_zarr, zarr_checksum_of
from tests.helpers.upload_batches import batch_count
from zarrchive.client import ApiClient, NullProgress, Uploader
from zarrchive.client.upload import BatchRecords, checks


def test_upload_modify_reupload_exact(
    tmp_path: Path,
    client: ApiClient,
    dandiset: str,
    records: BatchRecords,
    s3: Any,
    bucket: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # the walk's clock runs 10 s ahead: the files just written count as settled, so the
    # digest cache keeps them (it skips files changed in the last seconds)
    monkeypatch.setattr(
        sys.modules["zarrchive.client.local.hashing"], "clock_ns", lambda: time.time_ns() + 10**10
    )
    local = tmp_path / "data.zarr"
    make_zarr(local)
    total = file_count(local)
    assert 1700 < total < 2100
    uploader = Uploader(client, jobs=8, batch_files=400, records=records)

    first = uploader.upload(local, dandiset=dandiset)
    assert first.created and first.ok
    assert (first.uploaded, first.deleted, first.skipped) == (total, 0, 0)
    assert first.batches == batch_count(total, 400)  # 5 of 400 at most, the last ones smaller
    assert first.remote_checksum == zarr_checksum_of(local)
    zarr = client.get_zarr(first.zarr_id or "")
    assert (zarr.file_count, zarr.name, zarr.upload_in_progress) == (total, "data.zarr", False)
    keys = {
        o["Key"]
        for page in s3.get_paginator("list_objects_v2").paginate(
            Bucket=bucket, Prefix=f"zarr/{zarr.zarr_id}/"
        )
        for o in page.get("Contents", [])
    }
    assert len(keys) == total
    asset = client.find_asset(dandiset, "data.zarr")
    assert asset is not None and asset.zarr_id == zarr.zarr_id
    assert first.asset_id == asset.asset_id

    # Nothing changed: nothing transferred, found by name, no listing needed; the directory
    # is known to the digest cache, so its files are not walked and stat-ed a second time
    # (scan_local) before the cached tree says it is unchanged
    def no_second_walk(root: str) -> tuple[int, int]:
        raise AssertionError(f"scan_local({root!r}) walked a directory the cache knows")

    monkeypatch.setattr(checks, "scan_local", no_second_walk)
    again = uploader.upload(local, dandiset=dandiset)
    assert (again.zarr_id, again.created, again.asset_id) == (first.zarr_id, False, first.asset_id)
    assert (again.uploaded, again.deleted, again.skipped, again.batches) == (0, 0, total, 0)
    assert again.ok and again.local_checksum == first.remote_checksum
    # the digest cache's directory digests matched the Zarr: no remote tree was compared
    assert "plan" not in again.timings

    # Modify 3 chunks, add 5 files (one in a new directory), delete 4 (a whole directory of 2).
    chunks = sorted(p for p in (local / "a" / "c").rglob("*") if p.is_file())
    for p in chunks[:3]:
        p.write_bytes(p.read_bytes() + b"changed")
    for i in range(4):
        (local / "g" / f"extra{i}.bin").write_bytes(bytes([i]) * (100 + i))
    (local / "new" / "deep").mkdir(parents=True)
    (local / "new" / "deep" / "file").write_bytes(b"new")
    gone = sorted(p for p in (local / "g" / "c" / "c").rglob("*") if p.is_file())
    gone[0].unlink()
    gone[1].unlink()
    victim = next(p for p in (local / "g" / "b" / "c").iterdir() if p.is_dir())
    victim_files = sorted(p for p in victim.rglob("*") if p.is_file())
    shutil.rmtree(victim)
    deleted = 2 + len(victim_files)

    third = uploader.upload(local, dandiset=dandiset)
    assert (third.uploaded, third.deleted) == (8, deleted)
    assert third.skipped == total - 3 - deleted
    assert third.ok and third.remote_checksum == zarr_checksum_of(local)
    assert client.get_zarr(first.zarr_id or "").file_count == total + 5 - deleted


def test_dry_run_changes_nothing(
    tmp_path: Path, client: ApiClient, dandiset: str, records: BatchRecords
) -> None:
    local = tmp_path / "dry.zarr"
    local.mkdir()
    (local / "zarr.json").write_bytes(b"{}")
    (local / "x").mkdir()
    (local / "x" / "0").write_bytes(b"0")
    uploader = Uploader(client, jobs=2, records=records, progress=NullProgress())
    plan = uploader.upload(local, dandiset=dandiset, dry_run=True)
    assert (plan.zarr_id, plan.planned_uploads, plan.uploaded) == (None, 2, 0)
    assert client.find_zarr(dandiset, "dry.zarr") is None
    done = uploader.upload(local, dandiset=dandiset)
    (local / "x" / "0").write_bytes(b"1")
    (local / "zarr.json").unlink()
    plan = uploader.upload(local, dandiset=dandiset, dry_run=True)
    assert (plan.zarr_id, plan.planned_uploads, plan.planned_deletes) == (done.zarr_id, 1, 1)
    assert client.get_zarr(done.zarr_id or "").checksum == done.remote_checksum


@pytest.mark.parametrize("where", ["zarr_id", "name"])
def test_upload_to_named_zarr(
    tmp_path: Path, client: ApiClient, dandiset: str, records: BatchRecords, where: str
) -> None:
    local = tmp_path / "local-name"
    local.mkdir()
    (local / "f").write_bytes(b"f")
    uploader = Uploader(client, jobs=2, records=records)
    if where == "name":
        result = uploader.upload(local, dandiset=dandiset, name="sub/path.zarr")
        assert client.get_zarr(result.zarr_id or "").name == "sub/path.zarr"
    else:
        zarr = client.create_zarr("premade.zarr", dandiset)
        result = uploader.upload(local, zarr_id=zarr.zarr_id)
        assert result.zarr_id == zarr.zarr_id and not result.created
    assert result.ok and result.uploaded == 1


def test_the_asset_at_the_path_decides_the_zarr(
    tmp_path: Path, client: ApiClient, dandiset: str, records: BatchRecords
) -> None:
    local = tmp_path / "renamed.zarr"
    local.mkdir()
    (local / "f").write_bytes(b"f")
    zarr = client.create_zarr("original-name", dandiset)
    # a Zarr with files (one without is no asset)
    assert Uploader(client, jobs=2, records=records).upload(local, zarr_id=zarr.zarr_id).ok
    asset = client.create_asset(dandiset, "sub/renamed.zarr", zarr_id=zarr.zarr_id)
    result = Uploader(client, jobs=2, records=records).upload(
        local, dandiset=dandiset, name="sub/renamed.zarr"
    )
    assert (result.zarr_id, result.created, result.asset_id) == (
        zarr.zarr_id,
        False,
        asset.asset_id,
    )
    assert result.ok and client.find_zarr(dandiset, "sub/renamed.zarr") is None


def test_a_first_run_with_an_empty_cache_walks_once(
    tmp_path: Path,
    client: ApiClient,
    dandiset: str,
    records: BatchRecords,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """An upload whose Zarr is already in the archive, with an empty digest cache: its check
    is the first half of the cached tree's walk (no scan_local), every file is read once,
    and the cache is filled for the next run, which reads nothing."""
    from zarrchive.client.local import tree as local_tree
    from zarrchive.client.local.digest_cache import default_cache

    monkeypatch.setattr(
        sys.modules["zarrchive.client.local.hashing"], "clock_ns", lambda: time.time_ns() + 10**10
    )
    local = tmp_path / "once.zarr"
    make_zarr(local)
    total = file_count(local)
    uploader = Uploader(client, jobs=4, records=records)
    first = uploader.upload(local, dandiset=dandiset)
    assert first.ok and first.uploaded == total
    cache = default_cache()
    assert cache is not None
    cache.forget()

    def no_second_walk(root: str) -> tuple[int, int]:
        raise AssertionError(f"scan_local({root!r}) walked the directory a second time")

    read: list[int] = []
    original = local_tree._read_surveyed_batch

    def counted(batch: list[Any], settled_ns: int) -> Any:
        read.append(sum(len(run[2]) for run in batch))
        return original(batch, settled_ns)

    monkeypatch.setattr(checks, "scan_local", no_second_walk)
    monkeypatch.setattr(local_tree, "_read_surveyed_batch", counted)
    again = uploader.upload(local, dandiset=dandiset)
    assert (again.uploaded, again.deleted, again.skipped) == (0, 0, total)
    assert again.ok and again.local_checksum == first.remote_checksum
    assert "plan" not in again.timings and sum(read) == total
    read.clear()
    assert uploader.upload(local, dandiset=dandiset).skipped == total
    assert read == []


def test_a_too_big_file_is_refused_before_anything_is_sent(
    tmp_path: Path, client: ApiClient, dandiset: str, records: BatchRecords
) -> None:
    from zarrchive.client.upload import MAX_FILE_BYTES
    from zarrchive.errors import InvalidInput

    local = tmp_path / "big.zarr"
    local.mkdir()
    (local / "zarr.json").write_bytes(b"{}")
    for name in ("b", "a/x"):
        (local / name).parent.mkdir(parents=True, exist_ok=True)
        with open(local / name, "wb") as f:
            f.truncate(MAX_FILE_BYTES + 1)  # sparse
    with pytest.raises(InvalidInput) as raised:
        Uploader(client, jobs=2, records=records).upload(local, dandiset=dandiset)
    assert str(raised.value) == (
        "2 file(s) larger than 5 TiB, the largest object S3 can hold: "
        f"a/x ({MAX_FILE_BYTES + 1} bytes), b ({MAX_FILE_BYTES + 1} bytes)"
    )
    assert client.find_zarr(dandiset, "big.zarr") is None

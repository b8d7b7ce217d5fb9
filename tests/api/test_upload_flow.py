"""The upload flow end to end: real zarr-python data, presigned PUTs, exact tree hash in S3."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import numpy as np
import zarr
from zarr_checksum import compute_zarr_checksum
from zarr_checksum.checksum import ZarrChecksum, ZarrChecksumManifest  # noqa: F401
from zarr_checksum.generators import yield_files_local

from tests.helpers.api_uploads import (
    assert_nodes_match,
    read_tree,
    upload,
)
from zarrchive.checksum import EMPTY_CHECKSUM
from zarrchive.services.runtime import Archive


def make_zarr(root: Path) -> Path:
    """A v2 Zarr of a few hundred files: several arrays, nested '/' chunk keys, a unicode group."""
    path = root / "data.zarr"
    group = zarr.open_group(str(path), mode="w", zarr_format=2)
    rng = np.random.default_rng(0)
    a = group.create_array(
        "a",
        shape=(40, 40),
        chunks=(2, 4),
        dtype="i4",
        chunk_key_encoding={"name": "v2", "separator": "/"},
    )
    a[:] = rng.integers(0, 1000, size=(40, 40))
    sub = group.create_group("grüppe-α")
    b = sub.create_array("b", shape=(60,), chunks=(1,), dtype="f8")
    b[:] = rng.random(60)
    c = group.create_array(
        "c",
        shape=(8, 8, 8),
        chunks=(2, 2, 4),
        dtype="u1",
        chunk_key_encoding={"name": "v2", "separator": "/"},
    )
    c[:] = rng.integers(0, 255, size=(8, 8, 8))
    return path


def oracle(root: Path) -> str:
    return str(compute_zarr_checksum(yield_files_local(str(root))))


def test_new_zarr_is_empty(api: httpx.Client, zarr_id: str, dandiset: str) -> None:
    info = api.get(f"/api/zarr/{zarr_id}/").json()
    assert info["checksum"] == EMPTY_CHECKSUM
    assert info["file_count"] == 0 and info["size"] == 0
    assert info["dandiset"] == dandiset and info["name"] == "test.zarr"
    assert info["s3_path"] == f"zarr/{zarr_id}/"
    assert info["upload_in_progress"] is False
    assert info["published_versions"] == [] and info["manifest_url"] is None
    assert info["manifest_status"] == "pending"
    # timestamps are UTC and say so, on SQLite as on PostgreSQL
    assert info["created"].endswith("Z") and info["modified"].endswith("Z")
    assert info["checksum_mismatch"] is None
    listing = api.get(f"/api/zarr/{zarr_id}/").json()
    assert listing["checksum"] == EMPTY_CHECKSUM


def test_upload_real_zarr_in_batches(
    api: httpx.Client, zarr_id: str, tmp_path: Path, archive: Archive, s3: Any
) -> None:
    root = make_zarr(tmp_path)
    files = read_tree(root)
    assert 300 < len(files) < 600
    info = upload(api, zarr_id, files, batch_size=120)
    assert info["checksum"] == oracle(root)
    assert info["file_count"] == len(files)
    assert info["size"] == sum(len(b) for b in files.values())
    assert info["upload_in_progress"] is False
    assert_nodes_match(archive, zarr_id, files, s3)
    # the objects themselves are where the spec says
    key = f"zarr/{zarr_id}/grüppe-α/b/.zarray"
    assert (
        s3.get_object(Bucket=archive.store.bucket, Key=key)["Body"].read()
        == files["grüppe-α/b/.zarray"]
    )

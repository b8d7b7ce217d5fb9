"""The public bucket is world-listable and readable as DANDI's is (zarr-python over s3fs with
``anon=True``, ``ListObjectsV2`` without credentials); the embargo bucket refuses both."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import boto3
import httpx
import pytest
from botocore import UNSIGNED
from botocore.config import Config
from botocore.exceptions import ClientError

from tests.helpers.dandi_zarr import dandi_upload
from tests.helpers.databases import SQLITE_ONLY
from tests.helpers.oracle_env import oracle_python
from tests.helpers.s3fs_oracle import S3FS_PYTHON_ENV, local_zarr, run_oracle
from tests.helpers.zarr_client import create_dandiset, create_zarr, oracle_checksum
from zarrchive.services.runtime import Archive
from zarrchive.storage.seaweedfs import SeaweedFS

pytestmark = SQLITE_ONLY


@pytest.fixture
def s3fs_python() -> str:
    return oracle_python(
        S3FS_PYTHON_ENV,
        ".venv-s3fs/.installed-stamp",
        ".venv-s3fs with s3fs and zarr, to read the public bucket anonymously",
    )


def unsigned_client(seaweedfs: SeaweedFS) -> Any:
    """``aws s3 ... --no-sign-request``."""
    return boto3.client(
        "s3",
        endpoint_url=seaweedfs.endpoint_url,
        region_name="us-east-1",
        config=Config(signature_version=UNSIGNED, s3={"addressing_style": "path"}),
    )


def test_zarr_python_reads_a_public_zarr_anonymously_over_s3fs(
    api: httpx.Client, archive: Archive, seaweedfs: SeaweedFS, s3fs_python: str, tmp_path: Path
) -> None:
    files, expected = local_zarr(s3fs_python, tmp_path)
    assert len(files) > 10 and "a/.zarray" in files and "g/b/.zarray" in files
    zarr_id = create_zarr(api, create_dandiset(api, "public"))
    _report, done = dandi_upload(api, zarr_id, files)
    assert done["checksum"] == oracle_checksum(files)
    root = f"{archive.settings.s3_bucket}/zarr/{zarr_id}"
    got = run_oracle(s3fs_python, "read", seaweedfs.endpoint_url, root, cwd=tmp_path)
    assert {k: got[k] for k in ("a", "g/b", "title")} == expected
    assert got["find"] == sorted(files)
    assert {"a", "g", ".zgroup", ".zattrs"} <= set(got["ls"])
    # ListObjectsV2 with no credentials at all
    listed = unsigned_client(seaweedfs).list_objects_v2(
        Bucket=archive.settings.s3_bucket, Prefix=f"zarr/{zarr_id}/"
    )
    assert sorted(o["Key"] for o in listed["Contents"]) == sorted(
        f"zarr/{zarr_id}/{p}" for p in files
    )


def test_the_embargo_bucket_refuses_anonymous_listing_and_reads(
    api: httpx.Client, archive: Archive, seaweedfs: SeaweedFS, s3fs_python: str, tmp_path: Path
) -> None:
    files, _expected = local_zarr(s3fs_python, tmp_path)
    zarr_id = create_zarr(api, create_dandiset(api, "secret", embargo=True))
    _report, done = dandi_upload(api, zarr_id, files)
    assert done["checksum"] == oracle_checksum(files)
    bucket = archive.settings.s3_embargo_bucket
    assert archive.embargo_store.head(f"zarr/{zarr_id}/a/.zarray") is not None
    root = f"{bucket}/zarr/{zarr_id}"
    outcome = run_oracle(
        s3fs_python, "refused", seaweedfs.endpoint_url, root, f"{root}/a/.zarray", cwd=tmp_path
    )
    assert outcome["ls"] == "denied" and outcome["cat"] == "denied", outcome
    assert outcome["zarr"] != "allowed", outcome
    client = unsigned_client(seaweedfs)
    calls: list[Callable[[], object]] = [
        lambda: client.list_objects_v2(Bucket=bucket, Prefix=f"zarr/{zarr_id}/"),
        lambda: client.get_object(Bucket=bucket, Key=f"zarr/{zarr_id}/a/.zarray"),
    ]
    for call in calls:
        with pytest.raises(ClientError) as refused:
            call()
        assert refused.value.response["Error"]["Code"] == "AccessDenied"

"""Does a Zarr agree with itself? Its ``.checksum`` tree, the database root, a fresh
computation from the S3 listing (the zarr_checksum oracle) and the API's listing."""

from __future__ import annotations

from typing import Any

import httpx

from tests.helpers.zarr_client import expect, list_files, oracle_from_digests
from zarrchive.services.runtime import Archive
from zarrchive.services.zarr_engine.fsck import fsck


def s3_files(s3: Any, bucket: str, zarr_id: str) -> dict[str, tuple[int, str]]:
    """path -> (size, md5) of the Zarr's current objects, straight from S3's listing."""
    prefix = f"zarr/{zarr_id}/"
    found: dict[str, tuple[int, str]] = {}
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix):
        for item in page.get("Contents", []):
            found[item["Key"][len(prefix) :]] = (int(item["Size"]), item["ETag"].strip('"'))
    return found


def assert_consistent(
    archive: Archive, api: httpx.Client, s3: Any, bucket: str, zarr_id: str
) -> dict[str, tuple[int, str]]:
    """The four views agree (and fsck finds nothing); returns the files."""
    report = fsck(archive, zarr_id)
    assert report.ok, report.problems
    listed = s3_files(s3, bucket, zarr_id)
    info = expect(api.get(f"/api/zarr/{zarr_id}/"))
    assert info["checksum"] == oracle_from_digests(listed) == report.checksum_in_database
    assert info["file_count"] == len(listed)
    assert list_files(api, zarr_id) == listed
    return listed

"""``admin gc`` (``version_gc.collect_zarr``) keeps an open batch and removes stale staging areas."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from tests.helpers.api_uploads import put_files, upload
from tests.helpers.assets import ok
from tests.helpers.snapshots import gc_now, oracle, read_live
from tests.helpers.zarr_client import md5
from zarrchive.config import PublishedZarrs
from zarrchive.services.runtime import Archive

pytestmark = pytest.mark.settings(published_zarrs=PublishedZarrs.SNAPSHOT)


def test_gc_keeps_an_open_batch_and_removes_stale_staging(
    api: httpx.Client, archive: Archive, dandiset: str, zarr_id: str, s3: Any, bucket: str
) -> None:
    upload(api, zarr_id, {"a": b"1"})
    # a cancelled batch whose URL is replayed: a stale staging area
    urls = ok(api.post(f"/api/zarr/{zarr_id}/upload/", json=[{"path": "b", "etag": md5(b"b")}]))
    assert api.delete(f"/api/zarr/{zarr_id}/upload/").status_code == 204
    put_files(urls, {"b": b"b"})
    stale_prefix = urls[0]["upload_url"].split(f"/{bucket}/", 1)[1].split("?")[0]
    stale_prefix = stale_prefix.rsplit("/", 1)[0] + "/"
    # an open batch with its staged file
    files = {"c": b"staged content"}
    urls = ok(
        api.post(
            f"/api/zarr/{zarr_id}/upload/", json=[{"path": "c", "etag": md5(b"staged content")}]
        )
    )
    put_files(urls, files)

    report = gc_now(archive, zarr_id)
    assert [p for p, _ in report.staging] == [stale_prefix]
    assert report.staging[0][1] == 1
    report = gc_now(archive, zarr_id, apply=True)
    leftover = s3.list_object_versions(Bucket=bucket, Prefix=stale_prefix)
    assert not leftover.get("Versions")
    # the open batch still completes with what it staged
    info = ok(api.post(f"/api/zarr/{zarr_id}/upload/complete/", params={"wait": "true"}))
    assert info["checksum"] == oracle({"a": b"1", "c": b"staged content"})
    assert read_live(api, zarr_id) == {"a": b"1", "c": b"staged content"}

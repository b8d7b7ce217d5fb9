"""Embargoed Zarrs: uploaded like any other; owners read them through presigned URLs from
the API (download and open_store); strangers are told nothing exists; injected credentials
(the library's hook) work too."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest
import zarr

from tests.conftest import Users
from tests.helpers.boto3_readers import Boto3Fetcher, Boto3Reader
from tests.helpers.local_zarr import make_zarr, zarr_checksum_of
from tests.helpers.zarr_nodes import as_array
from zarrchive.client import ApiClient, Downloader, Uploader, open_store
from zarrchive.client.upload import BatchRecords
from zarrchive.errors import ApiError
from zarrchive.services.runtime import Archive


def test_embargoed_zarr(
    tmp_path: Path,
    client: ApiClient,
    client_env: dict[str, str],
    records: BatchRecords,
    archive: Archive,
    users: Users,
    s3: Any,
) -> None:
    private_bucket = archive.settings.s3_embargo_bucket
    dandiset = client.create_dandiset("secret", embargo=True)
    assert client.is_private(dandiset)
    source = tmp_path / "secret.zarr"
    arrays = make_zarr(source, seed=5, coarse=12)
    result = Uploader(client, jobs=4, records=records).upload(source, dandiset=dandiset)
    assert result.ok and result.zarr_id
    zarr_id = result.zarr_id
    s3.head_object(Bucket=private_bucket, Key=f"zarr/{zarr_id}/zarr.json")

    # the owner, with nothing but the API token: presigned URLs from the API
    with Downloader(client, jobs=4) as downloader:
        owned = downloader.download(zarr_id, tmp_path / "owned")
    assert owned.ok and zarr_checksum_of(tmp_path / "owned") == result.local_checksum
    with open_store(zarr_id, api_url=client.url, token=client.token) as store:
        group = zarr.open_group(store, mode="r")
        for name, data in arrays.items():
            np.testing.assert_array_equal(as_array(group[name])[...], data)
    # the objects themselves stay private
    public_url = f"{archive.settings.s3_endpoint_url}/{private_bucket}/zarr/{zarr_id}/zarr.json"
    assert httpx.get(public_url).status_code == 403

    fetcher = Boto3Fetcher(s3, private_bucket, lambda f: f"zarr/{zarr_id}/{f.path}")
    with Downloader(client, jobs=4, fetcher=fetcher) as downloader:
        copy = downloader.download(zarr_id, tmp_path / "copy")
    assert copy.ok and zarr_checksum_of(tmp_path / "copy") == result.local_checksum

    reader = Boto3Reader(s3, private_bucket, f"zarr/{zarr_id}/")
    with open_store(zarr_id, api_url=client.url, token=client.token, reader=reader) as store:
        group = zarr.open_group(store, mode="r")
        for name, data in arrays.items():
            np.testing.assert_array_equal(as_array(group[name])[...], data)

    # A stranger is told nothing exists.
    with pytest.raises(ApiError) as stranger:
        open_store(zarr_id, api_url=client.url, token=users.other)
    assert stranger.value.status_code == 404


def test_expired_presigned_urls_are_minted_again_never_read_as_absent(
    tmp_path: Path, client: ApiClient, records: BatchRecords, archive: Archive
) -> None:
    """A presigned URL that expired answers 403: open_store asks for a new one instead of
    handing zarr "no such chunk" (which zarr would silently fill with the fill value)."""
    dandiset = client.create_dandiset("secret", embargo=True)
    source = tmp_path / "secret.zarr"
    arrays = make_zarr(source, seed=7, coarse=12)
    result = Uploader(client, jobs=4, records=records).upload(source, dandiset=dandiset)
    assert result.ok and result.zarr_id
    archive.settings = archive.settings.with_overrides(presign_expiry=3)
    with open_store(result.zarr_id, api_url=client.url, token=client.token) as store:
        group = zarr.open_group(store, mode="r")
        name = next(iter(arrays))
        np.testing.assert_array_equal(as_array(group[name])[...], arrays[name])
        time.sleep(4)  # every URL the store holds has expired (it would keep them 300 s)
        for name, data in arrays.items():
            np.testing.assert_array_equal(as_array(group[name])[...], data)

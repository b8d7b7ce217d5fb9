"""zarr-python 3 reads Zarrs of the archive through open_store (public reads over HTTP)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import zarr

from tests.helpers.boto3_readers import Boto3Reader
from tests.helpers.local_zarr import make_zarr
from tests.helpers.zarr_nodes import as_array, as_group
from zarrchive.client import ApiClient, Uploader
from zarrchive.client.store import ZarrchiveStore, open_store
from zarrchive.client.upload import BatchRecords
from zarrchive.errors import InvalidInput


@pytest.fixture
def published(
    tmp_path: Path, client: ApiClient, dandiset: str, records: BatchRecords
) -> tuple[str, dict[str, np.ndarray]]:
    source = tmp_path / "read.zarr"
    arrays = make_zarr(source, seed=11, coarse=6)
    group = zarr.open_group(source, mode="a")
    sharded = np.arange(4096, dtype="int16").reshape(64, 64)
    array = group.create_array(
        "sharded", shape=(64, 64), chunks=(8, 8), shards=(32, 32), dtype="int16"
    )
    array[...] = sharded
    arrays["sharded"] = sharded
    result = Uploader(client, jobs=8, records=records).upload(source, dandiset=dandiset)
    assert result.ok and result.zarr_id
    return result.zarr_id, arrays


def check(store: ZarrchiveStore, arrays: dict[str, np.ndarray]) -> None:
    group = zarr.open_group(store, mode="r")
    assert group.attrs["title"] == "client test"
    for name, data in arrays.items():
        np.testing.assert_array_equal(as_array(group[name])[...], data)
    # partial reads: one chunk, and a slice of a sharded array (byte ranges of a shard)
    np.testing.assert_array_equal(as_array(group["a"])[7:9, 3:14], arrays["a"][7:9, 3:14])
    np.testing.assert_array_equal(
        as_array(group["sharded"])[5:9, 30:35], arrays["sharded"][5:9, 30:35]
    )


def test_open_store_by_id_and_api_url(
    client: ApiClient,
    client_env: dict[str, str],
    published: tuple[str, dict[str, np.ndarray]],
) -> None:
    zarr_id, arrays = published
    store = open_store(
        zarr_id, api_url=client_env["ZARRCHIVE_URL"], token=client_env["ZARRCHIVE_TOKEN"]
    )
    try:
        check(store, arrays)
        group = zarr.open_group(store, mode="r")
        assert sorted(name for name, _ in group.members()) == ["a", "g", "sharded"]
        assert sorted(as_group(group["g"]).array_keys()) == ["b", "c"]
    finally:
        store.close()
    with open_store(f"{client_env['ZARRCHIVE_URL']}/api/zarr/{zarr_id}/") as store:
        check(store, arrays)
    # the S3 URL of the objects: no API, no listing
    with open_store(client.get_zarr(zarr_id).s3_url) as store:
        check(store, arrays)
        with pytest.raises(InvalidInput, match="this store cannot list"):
            list(zarr.open_group(store, mode="r").members())
    # read-only
    with (
        open_store(zarr_id, api_url=client_env["ZARRCHIVE_URL"]) as store,
        pytest.raises(ValueError),
    ):
        zarr.open_group(store, mode="w")


def test_open_store_with_an_injected_reader(
    client_env: dict[str, str],
    s3: Any,
    bucket: str,
    published: tuple[str, dict[str, np.ndarray]],
) -> None:
    zarr_id, arrays = published
    reader = Boto3Reader(s3, bucket, f"zarr/{zarr_id}/")
    with open_store(zarr_id, api_url=client_env["ZARRCHIVE_URL"], reader=reader) as store:
        check(store, arrays)
    assert reader.reads > 0

"""A small archive to browse: built through the real API and presigned URLs.

- a public dandiset with a Zarr asset (a v2 group ``image`` 2-D uint16 array, a v3 3-D
  ``volume`` array, a 1-D ``labels`` array, a ``wide`` directory of many entries) and a blob
  asset in a folder;
- an embargoed dandiset of the owner with a Zarr of its own.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import httpx
import numpy as np
import zarr
from zarr.storage import MemoryStore

from tests.helpers.presigned import put_headers
from tests.helpers.web_forms import sign_in
from tests.helpers.zarr_client import create_dandiset, create_zarr, expect, md5, upload
from zarrchive.checksum import ChecksumNode
from zarrchive.services.runtime import Archive
from zarrchive.storage.keys import checksum_node_key

#: The 2-D array: rows x columns, chunks.
IMAGE_SHAPE, IMAGE_CHUNKS = (40, 60), (16, 16)
VOLUME_SHAPE, VOLUME_CHUNKS = (5, 30, 20), (1, 16, 16)
#: A sharded v3 array, and one larger than a thumbnail (sampled every 3rd element).
SHARDED_SHAPE, SHARDED_CHUNKS, SHARDS = (64, 48), (8, 8), (32, 24)
BIG_SHAPE, BIG_CHUNKS = (600, 300), (300, 300)


def sharded_values() -> np.ndarray[Any, np.dtype[np.int32]]:
    rows, cols = np.indices(SHARDED_SHAPE)
    return (rows * cols).astype(np.int32)


def big_values() -> np.ndarray[Any, np.dtype[np.uint8]]:
    rows, cols = np.indices(BIG_SHAPE)
    return ((rows + 2 * cols) % 251).astype(np.uint8)


def image_values() -> np.ndarray[Any, np.dtype[np.uint16]]:
    rows, cols = np.indices(IMAGE_SHAPE)
    return (rows * 100 + cols).astype(np.uint16)


def volume_values() -> np.ndarray[Any, np.dtype[np.float32]]:
    return np.arange(np.prod(VOLUME_SHAPE), dtype=np.float32).reshape(VOLUME_SHAPE)


def zarr_files() -> dict[str, bytes]:
    """Every file of the sample Zarr (path -> bytes), written by zarr-python."""
    store = MemoryStore()
    root = zarr.open_group(store=store, mode="w", zarr_format=2, attributes={"title": "sample"})
    image = root.create_array(
        "image", shape=IMAGE_SHAPE, chunks=IMAGE_CHUNKS, dtype="uint16", attributes={"unit": "au"}
    )
    image[:] = image_values()
    labels = root.create_array("labels", shape=(10,), chunks=(5,), dtype="int8")
    labels[:] = np.arange(10, dtype=np.int8)
    files = {key: value.to_bytes() for key, value in store._store_dict.items()}
    v3 = MemoryStore()
    volume = zarr.create_array(
        v3, shape=VOLUME_SHAPE, chunks=VOLUME_CHUNKS, dtype="float32", zarr_format=3
    )
    volume[:] = volume_values()
    files.update({f"volume/{k}": v.to_bytes() for k, v in v3._store_dict.items()})
    sharded_store = MemoryStore()
    sharded = zarr.create_array(
        sharded_store,
        shape=SHARDED_SHAPE,
        chunks=SHARDED_CHUNKS,
        shards=SHARDS,
        dtype="int32",
        zarr_format=3,
    )
    sharded[:] = sharded_values()
    files.update({f"sharded/{k}": v.to_bytes() for k, v in sharded_store._store_dict.items()})
    big = root.create_array("big", shape=BIG_SHAPE, chunks=BIG_CHUNKS, dtype="uint8")
    big[:] = big_values()
    files.update(
        {f"big/{k}": store._store_dict[f"big/{k}"].to_bytes() for k in (".zarray", "0.0", "1.0")}
    )
    return files


def wide_node(count: int) -> bytes:
    node = ChecksumNode()
    for i in range(count):
        node.set_file(f"{i:06d}", hashlib.md5(str(i).encode()).hexdigest(), i)
    return node.to_json()


def upload_blob(api: httpx.Client, dandiset: str, data: bytes) -> str:
    plan = expect(
        api.post(
            "/api/uploads/initialize/",
            json={"size": len(data), "md5": md5(data), "dandiset": dandiset},
        )
    )
    if plan["blob_id"] is not None:
        return str(plan["blob_id"])
    (part,) = plan["parts"]
    with httpx.Client(timeout=60) as s3:
        response = s3.put(
            part["upload_url"], content=data, headers=put_headers(part["upload_url"], data)
        )
        assert response.status_code == 200, response.text
    return str(expect(api.post(f"/api/uploads/{plan['upload_id']}/validate/"))["blob_id"])


def add_asset(api: httpx.Client, dandiset: str, path: str, **content: str) -> dict[str, Any]:
    body = {"metadata": {"path": path}, **content}
    found: dict[str, Any] = expect(
        api.post(f"/api/dandisets/{dandiset}/versions/draft/assets/", json=body)
    )
    return found


@dataclass(frozen=True)
class Site:
    public: str
    zarr_id: str
    files: dict[str, bytes]
    blob: bytes
    blob_asset: str
    zarr_asset: str
    embargoed: str
    embargoed_zarr: str
    #: Entries of the ``wide`` directory.
    wide: int


def build_site(api: httpx.Client, archive: Archive, *, wide: int = 2_500) -> Site:
    public = create_dandiset(api, "Public mouse brain")
    zarr_id = create_zarr(api, public, "sample.zarr")
    files = zarr_files()
    upload(api, zarr_id, {**files, "wide/000000": b"0"})
    # the wide directory: its node written as the tree updater would, without 10^3 PUTs
    archive.store.put(checksum_node_key(zarr_id, "wide"), wide_node(wide), "application/json")
    zarr_asset = add_asset(api, public, "sub-1/sample.zarr", zarr_id=zarr_id)["asset_id"]
    blob = b"a blob of the public dandiset\n"
    blob_asset = add_asset(api, public, "sub-1/notes.txt", blob_id=upload_blob(api, public, blob))
    embargoed = create_dandiset(api, "Secret rat", embargo=True)
    embargoed_zarr = create_zarr(api, embargoed, "secret.zarr")
    upload(api, embargoed_zarr, {"a/b": b"secret"})
    add_asset(api, embargoed, "secret.zarr", zarr_id=embargoed_zarr)
    return Site(
        public=public,
        zarr_id=zarr_id,
        files=files,
        blob=blob,
        blob_asset=str(blob_asset["asset_id"]),
        zarr_asset=str(zarr_asset),
        embargoed=embargoed,
        embargoed_zarr=embargoed_zarr,
        wide=wide,
    )


@contextmanager
def browser(base_url: str, token: str | None = None) -> Iterator[httpx.Client]:
    """An httpx client as a browser: signed in with *token* (the sign-in cookie only)."""
    with httpx.Client(base_url=base_url, timeout=60) as client:
        if token is not None:
            response = sign_in(client, token)
            assert response.status_code == 303, response.text
        yield client

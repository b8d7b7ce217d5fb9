"""The README's first array gets a thumbnail (issue #41): 100 x 100 float32 in 10 x 10
chunks (100 chunks of 400 bytes, more than the 64 objects a thumbnail reads whatever their
size, but small) is drawn at full resolution, every chunk read; values as stored."""

from __future__ import annotations

import io

import httpx
import numpy as np
import zarr
from PIL import Image
from zarr.storage import MemoryStore

from tests.helpers.api_uploads import upload
from tests.helpers.databases import SQLITE_ONLY

pytestmark = SQLITE_ONLY


def test_the_readme_array_gets_its_thumbnail(api: httpx.Client, zarr_id: str) -> None:
    store = MemoryStore()
    array = zarr.create_array(store, shape=(100, 100), chunks=(10, 10), dtype="f4")
    values = np.zeros((100, 100), dtype="f4")
    values[:, 50:] = 1  # left half dark, right half bright
    array[:] = values
    upload(api, zarr_id, {k: v.to_bytes() for k, v in store._store_dict.items()})
    response = api.get(f"/thumbnail/zarr/{zarr_id}/")
    assert response.status_code == 200, response.text  # was 404: "touches 100 chunks"
    grey = np.asarray(Image.open(io.BytesIO(response.content)))
    assert grey.shape == (100, 100)
    assert (grey[:, :50] == 0).all() and (grey[:, 50:] == 255).all()

"""Local Zarrs for client tests: made with zarr-python, hashed by the zarr-checksum oracle."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import zarr
from zarr_checksum import compute_zarr_checksum
from zarr_checksum.generators import yield_files_local

from zarrchive.client import ApiClient, Uploader
from zarrchive.client.upload import BatchRecords


def zarr_checksum_of(path: Path) -> str:
    """The checksum by the reference implementation, zarr-checksum."""
    return str(compute_zarr_checksum(yield_files_local(path)).digest)


def make_zarr(path: Path, *, seed: int = 0, coarse: int = 1) -> dict[str, np.ndarray]:
    """A zarr-python Zarr of about ``1850 / coarse`` small files; returns its arrays."""
    rng = np.random.default_rng(seed)
    root = zarr.open_group(path, mode="w")
    arrays: dict[str, np.ndarray] = {
        "a": rng.integers(0, 1000, size=(260, 200), dtype="int32"),
        "g/b": rng.random((100, 100, 4)),
        "g/c": rng.integers(0, 255, size=(60, 100), dtype="uint8"),
    }
    chunks = {"a": (5 * coarse, 10), "g/b": (5 * coarse, 5, 4), "g/c": (3 * coarse, 5)}
    for name, data in arrays.items():
        array = root.create_array(name, shape=data.shape, chunks=chunks[name], dtype=data.dtype)
        array[...] = data
    root.attrs["title"] = "client test"
    return arrays


def file_count(path: Path) -> int:
    return sum(1 for p in path.rglob("*") if p.is_file())


def upload_files(
    client: ApiClient, records: BatchRecords, dandiset: str, root: Path, files: dict[str, bytes]
) -> str:
    """Write *files* (path -> bytes) as a local Zarr at *root* and upload it to a new Zarr of
    *dandiset* with the client's :class:`Uploader`: the new Zarr's id."""
    for path, content in files.items():
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).write_bytes(content)
    result = Uploader(client, jobs=2, records=records).upload(root, dandiset=dandiset)
    assert result.ok and result.zarr_id
    return result.zarr_id

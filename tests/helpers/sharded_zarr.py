"""Sharded Zarr v3 stores written by zarr-python 3, hostile shards built by hand, and the
plain-HTTP oracle (zarr-python over fsspec's HTTP filesystem in ``.venv-s3fs``, anonymous,
no zarrchive code) that reads a public Zarr from the bucket as any reader of a URL does."""

from __future__ import annotations

import json
import subprocess
import textwrap
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import zarr
from zarr.codecs import BloscCodec, BytesCodec, ShardingCodec, ZstdCodec

from tests.helpers.fsspec_oracle import s3fs_python

#: The sharded 3-D array: shape, inner chunks, shards (each shard holds 3 planes of 3 x 2
#: inner chunks: a thumbnail of the middle plane needs a third of each shard it touches).
VOLUME_SHAPE, VOLUME_CHUNKS, VOLUME_SHARDS = (6, 96, 80), (1, 16, 20), (3, 48, 40)
#: The 2-D array: blosc inner chunks, the index at the start of each shard, no checksum.
PLANE_SHAPE, PLANE_CHUNKS, PLANE_SHARDS = (64, 64), (8, 8), (32, 32)
#: One shard above an 8 MiB multipart threshold: uint16 noise, uncompressed (8.6 MiB), of 4
#: inner chunks.
BIG_SHAPE, BIG_CHUNKS = (1, 2200, 2048), (1, 1100, 1024)


@dataclass(frozen=True)
class ShardedSource:
    volume: np.ndarray[Any, np.dtype[np.int16]]
    plane: np.ndarray[Any, np.dtype[np.float32]]
    #: The array of one big shard (``big_shard=True``), else None.
    big: np.ndarray[Any, np.dtype[np.uint16]] | None = None


def volume_values(seed: int = 3) -> np.ndarray[Any, np.dtype[np.int16]]:
    """Values of the 3-D array: no zero (the fill value) but where chunks are left empty:
    the inner chunk at (3, 0, 0) of the middle plane, and the whole shard (0, 1, 1)."""
    rng = np.random.default_rng(seed)
    values = rng.integers(1, 4000, size=VOLUME_SHAPE, dtype=np.int16)
    values[3, 0:16, 0:20] = 0
    values[0:3, 48:96, 40:80] = 0
    return values


def plane_values() -> np.ndarray[Any, np.dtype[np.float32]]:
    rows, cols = np.indices(PLANE_SHAPE)
    values = (np.sin(rows / 7.0) * np.cos(cols / 5.0) * 100).astype(np.float32)
    values[8:16, 40:48] = 0  # one empty inner chunk
    return values


def write_sharded_zarr(path: Path, *, big_shard: bool = False) -> ShardedSource:
    """A Zarr v3 group at *path* with two sharded arrays, written by zarr-python 3; with
    *big_shard*, a third (``big``) whose one shard is above an 8 MiB multipart threshold."""
    root = zarr.open_group(path, mode="w", zarr_format=3, attributes={"title": "sharded"})
    volume = root.create_array(
        "volume",
        shape=VOLUME_SHAPE,
        chunks=VOLUME_CHUNKS,
        shards=VOLUME_SHARDS,
        dtype="int16",
        compressors=ZstdCodec(level=3),
        fill_value=0,
        dimension_names=["z", "y", "x"],
    )
    values = volume_values()
    volume[:] = values
    plane = root.create_array(
        "plane",
        shape=PLANE_SHAPE,
        chunks=PLANE_SHARDS,  # the shards: the serializer names the inner chunks
        dtype="float32",
        serializer=ShardingCodec(
            chunk_shape=PLANE_CHUNKS,
            codecs=[BytesCodec(), BloscCodec(cname="lz4", clevel=5)],
            index_codecs=[BytesCodec()],
            index_location="start",
        ),
        compressors=None,
        fill_value=0,
    )
    plane_data = plane_values()
    plane[:] = plane_data
    big_data = None
    if big_shard:
        big = root.create_array(
            "big",
            shape=BIG_SHAPE,
            chunks=BIG_CHUNKS,
            shards=BIG_SHAPE,
            dtype="uint16",
            compressors=None,
            fill_value=0,
        )
        big_data = np.random.default_rng(11).integers(1, 2**16, size=BIG_SHAPE, dtype=np.uint16)
        big[:] = big_data
    return ShardedSource(values, plane_data, big_data)


HTTP_SCRIPT = textwrap.dedent(
    """
    import json, sys
    import zarr

    url, = sys.argv[1:]
    group = zarr.open_group(url, mode="r", zarr_format=3)
    volume = group["volume"]
    print(json.dumps({
        "title": group.attrs["title"],
        "volume": volume[:].tolist(),
        "volume_part": volume[2:4, 10:50, 33:71].tolist(),
        "plane": group["plane"][:].tolist(),
        "shards": list(volume.shards),
        "chunks": list(volume.chunks),
    }))
    """
)


def read_over_http(url: str, cwd: Path) -> Any:
    """zarr-python (in ``.venv-s3fs``) reading the Zarr at the public *url* over plain HTTP."""
    script = cwd / "http_oracle.py"
    script.write_text(HTTP_SCRIPT)
    done = subprocess.run(
        [s3fs_python(), str(script), url], capture_output=True, text=True, timeout=300, cwd=cwd
    )
    assert done.returncode == 0, done.stderr[-4000:]
    return json.loads(done.stdout.strip().splitlines()[-1])

"""Which sharded arrays get a thumbnail: bounds on the inner chunks and shards it reads."""

from __future__ import annotations

import zarr
from zarr.storage import MemoryStore

from zarrchive.services.views import arrays
from zarrchive.services.views.thumbnail import MAX_CHUNKS, MAX_INNER_CHUNKS


def meta(
    shape: tuple[int, ...], chunks: tuple[int, ...], shards: tuple[int, ...]
) -> arrays.ArrayMeta:
    array = zarr.create_array(
        MemoryStore(), shape=shape, chunks=chunks, shards=shards, dtype="uint16"
    )
    return arrays._array_meta(array)


def test_a_thumbnail_reads_inner_chunks_not_whole_shards() -> None:
    # one shard of 16 x 16 inner chunks: every inner chunk is needed, 256 of them
    found = meta((512, 512), (32, 32), (512, 512))
    assert found.no_thumbnail is None
    assert found.sharding is not None and found.sharding.chunks_per_shard == (16, 16)
    assert found.sharding.index_location == "end" and not found.sharding.nested
    assert [c.split(" ")[0] for c in found.sharding.inner_codecs] == ["bytes", "zstd"]


def test_too_many_shards_or_inner_chunks_get_no_thumbnail() -> None:
    many_shards = meta((512, 512), (32, 32), (32, 32))  # 256 shards of one inner chunk
    assert many_shards.no_thumbnail == (
        f"the slice touches 256 shards; a thumbnail reads at most {MAX_CHUNKS}"
    )
    tiny_inner = meta((2048, 2048), (8, 8), (1024, 1024))  # 256 x 256 inner chunks touched
    assert tiny_inner.no_thumbnail == (
        f"the slice touches 65536 chunks; a thumbnail reads at most {MAX_INNER_CHUNKS}"
    )

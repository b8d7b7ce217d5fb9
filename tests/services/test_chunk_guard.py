"""The bounds on what a thumbnail decodes (pure): every chunk zarr-python writes with a codec
the guard knows passes it; a chunk decompressing past its declared size is refused, with the
decompression stopped at the bound; absurd metadata is refused before it is parsed; attributes
render within a bound however deep they nest."""

from __future__ import annotations

import bz2
import gzip
import json
import lzma
import struct
import zlib
from typing import Any

import numcodecs
import numpy as np
import pytest
import zarr
import zarr.codecs
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.helpers.bombs import MiB, bz2_zeros, zarray, zlib_zeros
from zarrchive.services.dandi import metadata_limits
from zarrchive.services.views import chunk_guard
from zarrchive.services.views.chunk_guard import check_object, layout_of, zstd_content_size
from zarrchive.services.views.shard_index import ByteRange, encode_index
from zarrchive.services.views.thumbnail import NoThumbnail
from zarrchive.web.attributes import render_attributes

SHAPE, CHUNKS = (40, 60), (16, 32)


def _values(dtype: str) -> np.ndarray[Any, Any]:
    rng = np.random.default_rng(7)
    return (rng.random(SHAPE) * 100).astype(dtype)


def _stored(array: zarr.Array[Any], store: dict[str, Any]) -> dict[str, bytes]:
    """The chunk objects (not metadata) zarr-python wrote."""
    return {
        key: value.to_bytes()
        for key, value in store.items()
        if not key.endswith((".zarray", ".zattrs", ".zgroup", "zarr.json"))
    }


V2_COMPRESSORS = [
    None,
    numcodecs.Zlib(level=5),
    numcodecs.GZip(level=5),
    numcodecs.BZ2(level=5),
    numcodecs.LZMA(),
    numcodecs.Zstd(level=3),
    numcodecs.Blosc(cname="lz4", shuffle=numcodecs.Blosc.SHUFFLE),
    numcodecs.Blosc(cname="zstd", shuffle=numcodecs.Blosc.BITSHUFFLE),
    numcodecs.LZ4(),
]
V2_FILTERS = [
    [],
    [numcodecs.Delta(dtype="<i4")],
    [numcodecs.AsType(encode_dtype="<f8", decode_dtype="<i4")],
    [numcodecs.FixedScaleOffset(offset=0, scale=1, dtype="<i4", astype="<i2")],
    [numcodecs.Shuffle(elementsize=4)],
]


@pytest.mark.parametrize("compressor", V2_COMPRESSORS, ids=repr)
@pytest.mark.parametrize("filters", V2_FILTERS, ids=repr)
def test_every_v2_chunk_zarr_writes_passes(compressor: Any, filters: list[Any]) -> None:
    store: dict[str, Any] = {}
    array = zarr.create_array(
        store=store,
        shape=SHAPE,
        chunks=CHUNKS,
        dtype="<i4",
        zarr_format=2,
        compressors=compressor,
        filters=filters or None,
    )
    array[:] = _values("<i4")
    layout = layout_of(array)
    for key, body in _stored(array, store).items():
        check_object(layout, body, key)


V3_CHAINS: list[list[Any]] = [
    [],
    [zarr.codecs.GzipCodec()],
    [zarr.codecs.ZstdCodec(checksum=True)],
    [zarr.codecs.BloscCodec()],
    [zarr.codecs.ZstdCodec(), zarr.codecs.Crc32cCodec()],
]


# ids from the codecs' class names: their reprs show sets and timestamps, which differ between
# processes (pytest-xdist's workers must collect the same ids)
@pytest.mark.parametrize(
    "compressors", V3_CHAINS, ids=lambda chain: "+".join(type(c).__name__ for c in chain) or "raw"
)
@pytest.mark.parametrize("shards", [None, (32, 64)])
def test_every_v3_chunk_and_shard_zarr_writes_passes(
    compressors: list[Any], shards: tuple[int, int] | None
) -> None:
    store: dict[str, Any] = {}
    array = zarr.create_array(
        store=store,
        shape=SHAPE,
        chunks=CHUNKS,
        shards=shards,
        dtype="float32",
        zarr_format=3,
        compressors=compressors or None,
        filters=[zarr.codecs.TransposeCodec(order=(1, 0))],
    )
    array[:] = _values("float32")
    layout = layout_of(array)
    assert (layout.shard is not None) == (shards is not None)
    stored = _stored(array, store)
    assert stored
    for key, body in stored.items():
        check_object(layout, body, key)


def _v2(compressor: Any, chunks: tuple[int, ...] = (256, 256)) -> zarr.Array[Any]:
    return zarr.create_array(
        store={}, shape=chunks, chunks=chunks, dtype="|u1", zarr_format=2, compressors=compressor
    )


#: Each compressor's data of twice the declared 64 KiB chunk.
TWICE = b"\0" * (2 * 65536)
BOMBS = [
    (numcodecs.Zlib(), zlib.compress(TWICE), "its zlib data decompresses to more than 65536"),
    (
        numcodecs.GZip(),
        gzip.compress(TWICE, mtime=0),
        "its gzip data decompresses to more than 65536",
    ),
    (
        numcodecs.GZip(),
        gzip.compress(TWICE[:65536], mtime=0) * 2,  # two members: numcodecs reads both
        "its gzip data decompresses to more than 65536",
    ),
    (numcodecs.BZ2(), bz2.compress(TWICE), "its bz2 data decompresses to more than 65536"),
    (numcodecs.LZMA(), lzma.compress(TWICE), "its lzma data decompresses to more than 65536"),
    (numcodecs.Zstd(), numcodecs.Zstd().encode(TWICE), "its zstd data decompresses to more"),
    (numcodecs.Blosc(), numcodecs.Blosc().encode(TWICE), "its blosc data decompresses to more"),
    (numcodecs.LZ4(), numcodecs.LZ4().encode(TWICE), "its lz4 data decompresses to more"),
]


@pytest.mark.parametrize(
    ("compressor", "body", "reason"),
    BOMBS,
    ids=[f"{type(codec).__name__}-{i}" for i, (codec, _, _) in enumerate(BOMBS)],
)
def test_a_chunk_decompressing_past_its_declared_size_is_refused(
    compressor: Any, body: bytes, reason: str
) -> None:
    with pytest.raises(NoThumbnail, match=rf"chunk 0\.0: {reason}"):
        check_object(layout_of(_v2(compressor)), body, "chunk 0.0")


def test_gigabyte_bombs_are_refused_without_decompressing_them() -> None:
    """bz2 2 GiB and zlib 1 GiB in a 64 KiB chunk: refused in milliseconds (it would take
    seconds and gigabytes to decompress them); the zlib one by its size alone."""

    def check(compressor: Any, body: bytes) -> None:
        check_object(layout_of(_v2(compressor)), body, "chunk 0.0")

    with pytest.raises(NoThumbnail, match="its bz2 data decompresses to more than 65536"):
        check(numcodecs.BZ2(), bz2_zeros(2048 * MiB))
    with pytest.raises(NoThumbnail, match=r"chunk 0\.0 is 1060873 bytes; its declared size allows"):
        check(numcodecs.Zlib(), zlib_zeros(1024 * MiB))


def test_a_zstd_frame_that_does_not_declare_its_size_is_refused() -> None:
    streamed = struct.pack("<IB", 0xFD2FB528, 0b0000_0000) + b"\x58" + b"\0" * 16
    assert zstd_content_size(streamed) is None
    with pytest.raises(NoThumbnail, match="does not declare its decompressed size"):
        check_object(layout_of(_v2(numcodecs.Zstd())), streamed, "chunk 0.0")


@settings(max_examples=60, deadline=None)
@given(st.integers(min_value=0, max_value=300_000))
def test_the_zstd_header_tells_the_decompressed_size(size: int) -> None:
    assert zstd_content_size(numcodecs.Zstd().encode(b"\7" * size)) == size


def test_blosc_is_refused_on_its_header_before_decompressing() -> None:
    body = bytearray(numcodecs.Blosc().encode(b"\0" * 65536))
    assert chunk_guard.blosc_sizes(bytes(body))[0] == 65536
    check_object(layout_of(_v2(numcodecs.Blosc())), bytes(body), "chunk 0.0")
    struct.pack_into("<I", body, 4, 2**31)  # claims 2 GiB
    with pytest.raises(NoThumbnail, match="its blosc data decompresses to more than 65536"):
        check_object(layout_of(_v2(numcodecs.Blosc())), bytes(body), "chunk 0.0")


def test_a_shard_whose_inner_chunk_is_a_bomb_or_whose_index_lies_is_refused() -> None:
    store: dict[str, Any] = {}
    array = zarr.create_array(
        store=store,
        shape=(64, 64),
        chunks=(32, 32),
        shards=(64, 64),
        dtype="|u1",
        zarr_format=3,
        compressors=[zarr.codecs.GzipCodec()],
    )
    array[:] = 1
    layout = layout_of(array)
    assert layout.shard is not None
    index_layout = layout.shard.index_layout
    assert index_layout.chunks_per_shard == (2, 2) and index_layout.checksum
    inner_bomb = gzip.compress(b"\0" * (32 * 32 + 1))
    index = encode_index(index_layout, [ByteRange(0, len(inner_bomb)), None, None, None])
    shard = inner_bomb + index
    with pytest.raises(NoThumbnail, match="an inner chunk of shard c/0/0: its gzip data"):
        check_object(layout, shard, "shard c/0/0")
    lying = encode_index(index_layout, [ByteRange(0, 10**9), None, None, None])
    with pytest.raises(NoThumbnail, match=r"shard c/0/0: the shard index's entry 0 .* allows"):
        check_object(layout, lying, "shard c/0/0")
    past = encode_index(index_layout, [ByteRange(0, 70), None, None, None])
    with pytest.raises(NoThumbnail, match="points outside the shard's"):
        check_object(layout, b"\0" * 10 + past, "shard c/0/0")
    corrupt = bytearray(shard)
    corrupt[-5] ^= 1
    with pytest.raises(NoThumbnail, match="crc32c"):
        check_object(layout, bytes(corrupt), "shard c/0/0")
    with pytest.raises(NoThumbnail, match="inner chunk of shard c/0/0: its gzip"):
        chunk_guard.check_inner_chunk(layout, inner_bomb, "an inner chunk of shard c/0/0")


def test_inner_chunks_that_do_not_divide_the_shard_are_refused() -> None:
    sharding = zarr.codecs.ShardingCodec(chunk_shape=(3, 3))
    with pytest.raises(NoThumbnail, match="does not divide the shard shape"):
        chunk_guard.v3_layout([sharding], (8, 9), 1)


@pytest.mark.parametrize(
    ("filters", "reason"),
    [
        ([numcodecs.Zlib()], "the filter zlib is not one a thumbnail decodes"),
        ([numcodecs.Delta(dtype="<i4")] * 16, "the array has 16 filters"),
    ],
)
def test_filters_of_unbounded_output_or_too_many_are_refused(
    filters: list[Any], reason: str
) -> None:
    array = zarr.create_array(
        store={}, shape=(4, 4), chunks=(4, 4), dtype="<i4", zarr_format=2, filters=filters
    )
    with pytest.raises(NoThumbnail, match=reason):
        layout_of(array)


def test_absurd_metadata_is_refused_before_zarr_parses_it() -> None:
    refusal = metadata_limits.refusal
    assert refusal({".zarray": zarray((1,) * 32, (1,) * 32)}) is None
    assert refusal({".zarray": zarray((1,) * 33, (1,) * 33)}) == (
        "the array declares 33 dimensions; at most 32 are read"
    )
    v3 = {
        "zarr_format": 3,
        "node_type": "array",
        "shape": [4, 4],
        "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [1] * 40}},
        "codecs": [{"name": "bytes"}] + [{"name": "crc32c"}] * 20,
    }
    assert "40 dimensions" in str(refusal({"zarr.json": json.dumps(v3).encode()}))
    v3["chunk_grid"] = {"name": "regular", "configuration": {"chunk_shape": [4, 4]}}
    assert "21 codecs" in str(refusal({"zarr.json": json.dumps(v3).encode()}))
    # not JSON, nested past the parser's depth, not an object: zarr-python judges
    for body in (b"{", b"[" * 100_000, b"[]"):
        assert refusal({".zarray": body}) is None


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=5),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=5), children, max_size=4)
    ),
    max_leaves=30,
)


@settings(max_examples=100, deadline=None)
@given(st.dictionaries(st.text(max_size=8), json_values, max_size=5))
def test_attributes_render_as_json_dumps_when_within_the_bound(attributes: dict[str, Any]) -> None:
    rendered = render_attributes(attributes)
    assert not rendered.truncated
    assert rendered.text == json.dumps(attributes, indent=2, sort_keys=True)


@pytest.mark.parametrize("depth", [1, 100, 900])
def test_attributes_render_within_the_bound_however_deep(depth: int) -> None:
    attributes = {"bomb": json.loads("[" * depth + ",".join(["0"] * 50_000) + "]" * depth)}
    rendered = render_attributes(attributes, limit=10_000)
    assert rendered.truncated and len(rendered.text) == 10_000
    assert json.dumps(attributes, indent=2, sort_keys=True).startswith(rendered.text)

"""Codecs as the pages name them: name and settings, from the JSON configuration."""

from __future__ import annotations

from typing import Any

import numcodecs
import zarr
from hypothesis import given
from hypothesis import strategies as st
from zarr.codecs import ZstdCodec
from zarr.core.metadata import ArrayV3Metadata

from zarrchive.services.views.codec_names import describe


def test_v2_codecs() -> None:
    assert describe(numcodecs.Zstd(level=0).get_config()) == "zstd (level 0, checksum false)"
    assert describe(numcodecs.Zlib(level=5).get_config()) == "zlib (level 5)"
    assert describe(numcodecs.Blosc(cname="lz4").get_config()) == (
        "blosc (cname lz4, clevel 5, shuffle 1, blocksize 0)"
    )
    assert describe({"id": "crc32"}) == "crc32"


def test_v3_codecs_and_sharding() -> None:
    array = zarr.create_array(
        store={},
        shape=(64, 64),
        chunks=(16, 16),
        shards=(32, 32),
        dtype="u2",
        compressors=ZstdCodec(level=0),
    )
    assert isinstance(array.metadata, ArrayV3Metadata)
    (sharding,) = array.metadata.codecs
    assert describe(sharding.to_dict()) == (
        "sharding (inner chunks 16 × 16: bytes (endian little), zstd (level 0, checksum false))"
    )
    assert describe({"name": "gzip", "configuration": {"level": 5}}) == "gzip (level 5)"
    assert describe({"name": "transpose", "configuration": {"order": [1, 0]}}) == (
        "transpose (order 1 × 0)"
    )


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=5),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner),
    max_leaves=10,
)


@given(
    st.dictionaries(st.sampled_from(["id", "name", "configuration", "codecs", "x"]), json_values)
)
def test_any_configuration_is_described_without_error(config: dict[str, Any]) -> None:
    assert isinstance(describe(config), str)


@given(json_values)
def test_hostile_sharding_configurations(inner: Any) -> None:
    config = {"name": "sharding_indexed", "configuration": {"chunk_shape": inner, "codecs": inner}}
    assert describe(config).startswith("sharding (")

"""The pure rules of LINDI: annotations, filters -> codecs, conversion helpers, reference files."""

from __future__ import annotations

import base64
import json
import math
from typing import Any

import numcodecs
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import zarrchive.lindi.annotations as ann
import zarrchive.lindi.convert as rules
import zarrchive.lindi.refs as rfs_mod
from zarrchive.errors import (
    InvalidInput,
    InvalidLindiFile,
    UnsupportedDatatype,
    UnsupportedFilter,
)
from zarrchive.lindi.codecs import CodecChain, H5Filter, decode_chunk, filters_to_codecs, get_codec


def no_refs(_value: Any) -> None:
    return None


# -- filters -> codecs ------------------------------------------------------------
def test_supported_filters_map_to_exact_codecs_in_pipeline_order() -> None:
    pipeline = [
        H5Filter(2, (8,)),
        H5Filter(1, (7,)),
        H5Filter(3, ()),
        H5Filter(32015, (5,)),
        H5Filter(32001, (2, 2, 4, 40000, 9, 2, 1)),
    ]
    assert filters_to_codecs(pipeline, itemsize=8, dataset="/d") == [
        {"id": "shuffle", "elementsize": 8},
        {"id": "zlib", "level": 7},
        {"id": "fletcher32"},
        {"id": "zstd", "level": 5},
        {"id": "blosc", "cname": "lz4", "clevel": 9, "shuffle": 2, "blocksize": 0},
    ]


def test_filter_defaults_without_client_data() -> None:
    pipeline = [H5Filter(2), H5Filter(1), H5Filter(32015), H5Filter(32001, (2, 2, 4, 0))]
    assert filters_to_codecs(pipeline, itemsize=4, dataset="/d") == [
        {"id": "shuffle", "elementsize": 4},
        {"id": "zlib", "level": 6},
        {"id": "zstd", "level": 0},
        {"id": "blosc", "cname": "blosclz", "clevel": 5, "shuffle": 1, "blocksize": 0},
    ]


@pytest.mark.parametrize("code", range(6))
def test_every_blosc_compressor_code(code: int) -> None:
    (codec,) = filters_to_codecs(
        [H5Filter(32001, (2, 2, 4, 0, 5, 1, code))], itemsize=4, dataset="/d"
    )
    assert codec["cname"] == ("blosclz", "lz4", "lz4hc", "snappy", "zlib", "zstd")[code]


def test_unknown_blosc_compressor_is_an_error() -> None:
    with pytest.raises(UnsupportedFilter, match="unknown compressor code 9"):
        filters_to_codecs([H5Filter(32001, (2, 2, 4, 0, 5, 1, 9))], itemsize=4, dataset="/d")


@pytest.mark.parametrize(
    ("code", "name"),
    [
        (4, "szip"),
        (5, "nbit"),
        (6, "scaleoffset"),
        (32000, "lzf"),
        (32004, "lz4"),
        (32008, "bitshuffle"),
        (32026, "blosc2"),
        (40000, "filter 40000"),
    ],
)
def test_unsupported_filters_name_the_filter_and_the_dataset(code: int, name: str) -> None:
    with pytest.raises(UnsupportedFilter) as info:
        filters_to_codecs(
            [H5Filter(2, (4,)), H5Filter(code, (1,))], itemsize=4, dataset="/acq/data"
        )
    assert f"'{name}'" in info.value.message
    assert "/acq/data" in info.value.message
    assert isinstance(info.value, InvalidInput)


def test_pickle_and_unknown_codecs_are_refused() -> None:
    with pytest.raises(InvalidLindiFile, match="pickle"):
        get_codec({"id": "pickle"})
    with pytest.raises(InvalidLindiFile, match="malformed"):
        get_codec({"level": 1})


# -- chunk decoding ---------------------------------------------------------------
def _encode(data: bytes, configs: list[dict[str, Any]]) -> bytes:
    out: Any = data
    for cfg in configs:
        out = numcodecs.get_codec(dict(cfg)).encode(out)
    return bytes(out)


def test_short_raw_chunk_is_padded_after_decoding() -> None:
    chunk = decode_chunk(
        np.arange(5, dtype="<i4").tobytes(), CodecChain(), dtype=np.dtype("<i4"), chunk_shape=(4, 2)
    )
    assert chunk.tolist() == [[0, 1], [2, 3], [4, 0], [0, 0]]


def test_short_chunk_with_compression_and_fletcher32_decodes_right() -> None:
    """The last piece of a dataset, gzip + fletcher32: padding the encoded bytes would break it."""
    configs: list[dict[str, Any]] = [
        {"id": "shuffle", "elementsize": 8},
        {"id": "zlib", "level": 4},
        {"id": "fletcher32"},
    ]
    data = np.arange(6, dtype="<f8")
    encoded = _encode(data.tobytes(), configs)
    chain = CodecChain.from_zarray({"filters": configs, "compressor": None})
    chunk = decode_chunk(encoded, chain, dtype=np.dtype("<f8"), chunk_shape=(6,))
    assert chunk.tolist() == data.tolist()
    # shorter than the chunk after decoding: padded
    short = _encode(np.arange(4, dtype="<f8").tobytes(), configs)
    assert decode_chunk(short, chain, dtype=np.dtype("<f8"), chunk_shape=(6,)).tolist() == [
        0,
        1,
        2,
        3,
        0,
        0,
    ]
    # what padding the *encoded* bytes does (lindi's reader): the checksum no longer matches
    with pytest.raises(RuntimeError):
        chain.decode(encoded + b"\0" * (48 - len(encoded)))


def test_chunk_longer_than_its_shape_is_an_error() -> None:
    with pytest.raises(InvalidLindiFile, match="more than"):
        decode_chunk(bytes(40), CodecChain(), dtype=np.dtype("<i4"), chunk_shape=(2,))


def test_compressor_then_filters_are_decoded_in_reverse() -> None:
    data = np.arange(10, dtype="<i2")
    zarray = {
        "filters": [{"id": "delta", "dtype": "<i2"}],
        "compressor": {"id": "zlib", "level": 1},
    }
    encoded = _encode(
        numcodecs.Delta(dtype="<i2").encode(data).tobytes(), [{"id": "zlib", "level": 1}]
    )
    chunk = decode_chunk(
        encoded, CodecChain.from_zarray(zarray), dtype=np.dtype("<i2"), chunk_shape=(10,)
    )
    assert chunk.tolist() == list(range(10))


def test_fortran_order_chunks() -> None:
    data = np.arange(6, dtype="<i4").reshape(2, 3)
    chunk = decode_chunk(
        np.asfortranarray(data).tobytes(order="F"),
        CodecChain(),
        dtype=np.dtype("<i4"),
        chunk_shape=(2, 3),
        order="F",
    )
    assert chunk.tolist() == data.tolist()


# -- conversion helpers -------------------------------------------------------------
def test_zarray_literal() -> None:
    assert rules.zarray(
        [10, 3], [4, 3], "<f4", fill_value="NaN", filters=[{"id": "fletcher32"}]
    ) == {
        "zarr_format": 2,
        "shape": [10, 3],
        "chunks": [4, 3],
        "dtype": "<f4",
        "compressor": None,
        "fill_value": "NaN",
        "filters": [{"id": "fletcher32"}],
        "order": "C",
        "dimension_separator": ".",
    }
    assert rules.zarray([0], [1], "|O")["filters"] is None


@pytest.mark.parametrize(
    ("value", "dtype", "expected"),
    [
        (0, "<i4", 0),
        (np.int64(-3), "<i8", -3),
        (np.float32(1.5), "<f4", 1.5),
        (np.nan, "<f8", "NaN"),
        (np.inf, "<f8", "Infinity"),
        (-np.inf, "<f4", "-Infinity"),
        (True, "|b1", True),
        (1 + 2j, "<c16", [1.0, 2.0]),
        (b"ab", "|S2", base64.b64encode(b"ab").decode()),
        (None, "<f8", None),
        ("x", "|O", None),
    ],
)
def test_fill_value_json(value: Any, dtype: str, expected: Any) -> None:
    assert rules.fill_value_json(value, np.dtype(dtype)) == expected


def test_zarr_dtype() -> None:
    assert rules.zarr_dtype(np.dtype(">i2")) == ">i2"
    assert rules.zarr_dtype(np.dtype("bool")) == "|b1"
    assert rules.zarr_dtype(np.dtype("S7")) == "|S7"
    assert rules.zarr_dtype(np.dtype("O")) == "|O"
    assert rules.zarr_dtype(np.dtype([("x", "i4")])) == "|O"


def test_chunk_keys_and_counts() -> None:
    assert rules.chunk_key("a/b", (1, 0, 12)) == "a/b/1.0.12"
    assert rules.chunk_key("a", ()) == "a/0"
    assert rules.chunk_key("", (3,)) == "3"
    assert rules.chunk_coords((30, 80), (10, 40)) == (3, 2)
    assert rules.chunk_count((100, 7), (30, 7)) == 4
    assert rules.chunk_count((0, 7), (30, 7)) == 0
    assert rules.zarr_chunks((0, 5), None) == [1, 5]
    assert rules.zarr_chunks((10,), (0,)) == [1]


@pytest.mark.parametrize(
    ("shape", "chunks", "threshold", "expected"),
    [
        ((1000,), (1,), 1000, False),
        ((1001,), (1,), 1000, True),
        ((1001,), (1,), None, False),
        ((1001,), None, 0, False),
        ((10,), (5,), 0, True),
        ((0,), (5,), 0, False),
    ],
)
def test_needs_external_link(
    shape: tuple[int, ...], chunks: tuple[int, ...] | None, threshold: int | None, expected: bool
) -> None:
    assert rules.needs_external_link(shape, chunks, threshold) is expected


def test_inline_numeric_rule() -> None:
    assert rules.is_inline_numeric((999,), inline_max_elements=1000)
    assert not rules.is_inline_numeric((1000,), inline_max_elements=1000)
    assert not rules.is_inline_numeric((0, 3), inline_max_elements=1000)


def test_split_contiguous_literal() -> None:
    chunks, pieces = rules.split_contiguous((10, 3), 8, 1000, 240, 100)
    assert chunks == [4, 3]
    assert pieces == [
        rules.Piece((0, 0), 1000, 96),
        rules.Piece((1, 0), 1096, 96),
        rules.Piece((2, 0), 1192, 48),
    ]
    assert rules.split_contiguous((10, 3), 8, 1000, 240, None) == (
        [10, 3],
        [rules.Piece((0, 0), 1000, 240)],
    )
    assert rules.split_contiguous((10, 3), 8, 1000, 240, 240) == (
        [10, 3],
        [rules.Piece((0, 0), 1000, 240)],
    )
    # rows larger than the limit: one row per chunk
    assert rules.split_contiguous((3, 100), 8, 0, 2400, 10)[0] == [1, 100]


@given(
    rows=st.integers(2, 300),
    row_elems=st.integers(1, 20),
    itemsize=st.sampled_from([1, 2, 4, 8]),
    max_bytes=st.integers(1, 5000),
)
def test_split_contiguous_covers_the_bytes_with_whole_rows(
    rows: int, row_elems: int, itemsize: int, max_bytes: int
) -> None:
    nbytes = rows * row_elems * itemsize
    chunks, pieces = rules.split_contiguous((rows, row_elems), itemsize, 512, nbytes, max_bytes)
    assert chunks[1] == row_elems
    position = 512
    for i, piece in enumerate(pieces):
        assert piece.coords == (i, 0)
        assert piece.offset == position
        position += piece.size
        if i < len(pieces) - 1:
            assert piece.size == chunks[0] * row_elems * itemsize
        assert piece.size <= max(max_bytes, row_elems * itemsize) or len(pieces) == 1
    assert position == 512 + nbytes
    assert len(pieces) == math.ceil(rows / chunks[0]) or len(pieces) == 1


def test_object_chunk_is_numcodecs_json() -> None:
    items = rules.nest(["a", "b", "c", "d", "e", "f"], (2, 3))
    data = rules.object_chunk_bytes(items, (2, 3))
    assert data == b'[["a","b","c"],["d","e","f"],"|O",[2,3]]'
    decoded = numcodecs.get_codec(dict(rules.JSON_CODEC)).decode(data)
    assert decoded.shape == (2, 3)
    assert decoded.tolist() == [["a", "b", "c"], ["d", "e", "f"]]


def test_convert_options_are_validated() -> None:
    with pytest.raises(InvalidInput):
        rules.ConvertOptions(external_array_link_threshold=-1)
    with pytest.raises(InvalidInput):
        rules.ConvertOptions(contiguous_max_chunk_bytes=0)


# -- annotations ---------------------------------------------------------------------
def _ref(value: Any) -> dict[str, Any] | None:
    if isinstance(value, str) and value == "REF":
        return ann.reference_json("/a/b", "oid", "root")
    return None


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (np.int8(-3), -3),
        (np.uint64(2**63), 2**63),
        (7, 7),
        (np.float32(0.5), 0.5),
        (np.nan, "NaN"),
        (np.float64("inf"), "Infinity"),
        (-math.inf, "-Infinity"),
        (np.bool_(True), True),
        ("text", "text"),
        (b"bytes", "bytes"),
        (np.bytes_(b"x"), "x"),
        (np.array([[1, 2], [3, 4]], dtype="i2"), [[1, 2], [3, 4]]),
        (np.array([1.0, np.nan, -np.inf]), [1.0, "NaN", "-Infinity"]),
        (np.array([True, False]), [True, False]),
        (np.array(["a", "b"], dtype=object), ["a", "b"]),
        (np.array([b"a", b"bc"]), ["a", "bc"]),
        ([1, 2, 3], [1, 2, 3]),
        (
            "REF",
            {
                "_REFERENCE": {
                    "source": ".",
                    "path": "/a/b",
                    "object_id": "oid",
                    "source_object_id": "root",
                }
            },
        ),
    ],
)
def test_encode_attribute(value: Any, expected: Any) -> None:
    assert ann.encode_attribute(value, label="a", encode_ref=_ref) == expected


def test_encode_attribute_arrays_of_references() -> None:
    arr = np.array(["REF", "REF"], dtype=object)
    assert ann.encode_attribute(arr, label="a", encode_ref=_ref) == [_ref("REF"), _ref("REF")]


@pytest.mark.parametrize(
    ("value", "match"),
    [
        ("NaN", "cannot tell apart"),
        ("Infinity", "cannot tell apart"),
        (b"\xff\xfe", "not UTF-8"),
        (np.array([1 + 1j]), "complex"),
        (np.zeros(2, dtype=[("x", "i4")]), "compound"),
        (object(), "unsupported type"),
    ],
)
def test_encode_attribute_errors(value: Any, match: str) -> None:
    with pytest.raises(UnsupportedDatatype, match=match):
        ann.encode_attribute(value, label="'x' of /g", encode_ref=no_refs)


def test_decode_attribute_is_h5py_like() -> None:
    def dec(v: Any) -> Any:
        return ann.decode_attribute(v, lambda t: ("ref", t.path))

    assert type(dec(3)) is np.int64
    assert type(dec(2.5)) is np.float64
    assert type(dec(True)) is np.bool_
    assert math.isnan(dec("NaN"))
    assert dec("-Infinity") == -math.inf
    assert dec("text") == "text"
    assert dec([1, 2]).dtype == np.int64
    assert dec([1, 2.5]).dtype == np.float64
    assert dec([1.0, "Infinity"]).tolist() == [1.0, math.inf]
    assert dec([True, False]).dtype == bool
    strings = dec([["a", "b"], ["c", "d"]])
    assert strings.dtype == object and strings.shape == (2, 2) and strings[1, 0] == "c"
    assert dec(_ref("REF")) == ("ref", "/a/b")
    refs = dec([_ref("REF"), _ref("REF")])
    assert refs.dtype == object and refs.tolist() == [("ref", "/a/b"), ("ref", "/a/b")]
    with pytest.raises(InvalidLindiFile):
        dec([1, "x"])


@given(
    st.recursive(
        st.one_of(st.integers(-(2**62), 2**62), st.floats(allow_nan=True), st.text(max_size=5)),
        lambda c: st.lists(c, min_size=1, max_size=3),
        max_leaves=8,
    )
)
def test_scalar_attributes_survive_json(value: Any) -> None:
    if isinstance(value, list) or (
        isinstance(value, str) and value in ("NaN", "Infinity", "-Infinity")
    ):
        return
    encoded = ann.encode_attribute(value, label="a", encode_ref=no_refs)
    back = ann.decode_attribute(json.loads(json.dumps(encoded)), lambda t: t)
    if isinstance(value, float) and math.isnan(value):
        assert math.isnan(back)
    else:
        assert back == value


def test_reference_annotation_literal_and_parse() -> None:
    value = ann.reference_json("/x", None, "r")
    assert value == {
        "_REFERENCE": {"source": ".", "path": "/x", "object_id": None, "source_object_id": "r"}
    }
    assert ann.parse_reference(value) == ann.ReferenceTarget("/x", None, "r")
    assert ann.parse_reference({"other": 1}) is None
    assert ann.parse_reference("x") is None
    with pytest.raises(InvalidLindiFile):
        ann.parse_reference({"_REFERENCE": {"object_id": "x"}})
    with pytest.raises(InvalidLindiFile, match="source"):
        ann.parse_reference({"_REFERENCE": {"path": "/x", "source": "other.h5"}})


def test_link_annotations_literal() -> None:
    assert ann.soft_link_attrs("/a") == {"_SOFT_LINK": {"path": "/a"}}
    assert ann.soft_link_path({"_SOFT_LINK": {"path": "/a"}}) == "/a"
    assert ann.soft_link_path({"x": 1}) is None
    assert ann.external_array_link("http://h/f.nwb", "acq/d") == {
        "link_type": "hdf5_dataset",
        "url": "http://h/f.nwb",
        "name": "acq/d",
    }
    assert ann.parse_external_array_link(ann.external_array_link("u", "n")) == ("u", "n")
    with pytest.raises(InvalidLindiFile):
        ann.parse_external_array_link({"link_type": "zarr", "url": "u", "name": "n"})


@pytest.mark.parametrize(
    ("parent", "name", "expected"),
    [
        ("/a/b", "c", "/a/b/c"),
        ("/a/b", "/x/y", "/x/y"),
        ("/a/b", "../c", "/a/c"),
        ("/", "./x//y/", "/x/y"),
        ("/a", "../../..", "/"),
    ],
)
def test_join_path(parent: str, name: str, expected: str) -> None:
    assert ann.join_path(parent, name) == expected


def test_compound_dtype_json_and_back() -> None:
    ref = np.dtype("O", metadata={"ref": "R"})
    string = np.dtype("O", metadata={"vlen": str})
    dtype = np.dtype([("x", "<i4"), ("y", "<f8"), ("r", ref), ("s", "S3"), ("b", "?")])
    spec = ann.compound_dtype_json(
        dtype, lambda f: f.metadata is not None and "ref" in f.metadata, label="/c"
    )
    assert spec == [
        ["x", "int32"],
        ["y", "float64"],
        ["r", "<REFERENCE>"],
        ["s", "|S3"],
        ["b", "bool"],
    ]
    back = ann.parse_compound_dtype(spec, ref, string)
    assert back.names == ("x", "y", "r", "s", "b")
    assert back["r"] is ref or back["r"] == ref
    assert back["s"] == np.dtype("S3")
    with pytest.raises(UnsupportedDatatype, match="field 'z'"):
        ann.compound_dtype_json(np.dtype([("z", "c8")]), lambda f: False, label="/c")
    with pytest.raises(InvalidLindiFile):
        ann.parse_compound_dtype([["x"]], ref, string)
    with pytest.raises(InvalidLindiFile):
        ann.parse_compound_dtype([["x", "nonsense-type"]], ref, string)


def test_encode_compound_values() -> None:
    assert (
        ann.encode_compound_value(np.int16(3), np.dtype("i2"), label="/c", encode_ref=no_refs) == 3
    )
    assert (
        ann.encode_compound_value(
            np.float32(np.nan), np.dtype("f4"), label="/c", encode_ref=no_refs
        )
        == "NaN"
    )
    assert (
        ann.encode_compound_value(np.bool_(False), np.dtype("?"), label="/c", encode_ref=no_refs)
        is False
    )
    assert ann.encode_compound_value(b"ab", np.dtype("S2"), label="/c", encode_ref=no_refs) == "ab"
    assert ann.encode_compound_value("REF", np.dtype("O"), label="/c", encode_ref=_ref) == _ref(
        "REF"
    )


# -- reference file systems --------------------------------------------------------------
@pytest.mark.parametrize(
    ("data", "expected"),
    [
        (b'{"a": 1}', '{"a": 1}'),
        (b"line\nnext", "line\nnext"),
        (b"\x00\x01", "base64:AAE="),
        (b"caf\xc3\xa9", "base64:" + base64.b64encode(b"caf\xc3\xa9").decode()),
        (b"base64:abc", "base64:" + base64.b64encode(b"base64:abc").decode()),
        (b"", ""),
    ],
)
def test_inline_encoding(data: bytes, expected: str) -> None:
    assert rfs_mod.encode_inline(data) == expected
    assert rfs_mod.decode_inline(expected) == data


@given(st.binary(max_size=64))
def test_inline_round_trip(data: bytes) -> None:
    assert rfs_mod.decode_inline(rfs_mod.encode_inline(data)) == data


@pytest.mark.parametrize(
    ("rfs", "match"),
    [
        ([], "JSON object"),
        ({}, "'refs'"),
        ({"refs": {}, "version": 2}, "version"),
        ({"refs": {"/a": "x"}}, "invalid key"),
        ({"refs": {"a": ["u", 1]}}, "invalid value"),
        ({"refs": {"a": ["u", -1, 2]}}, "invalid value"),
        ({"refs": {"a": 3}}, "invalid value"),
        ({"refs": {}, "templates": {"u": 1}}, "templates"),
        ({"refs": {}, "generationMetadata": []}, "generationMetadata"),
    ],
)
def test_validate_rejects_malformed(rfs: Any, match: str) -> None:
    with pytest.raises(InvalidLindiFile, match=match):
        rfs_mod.validate(rfs)


def test_templates_expand_and_apply() -> None:
    assert rfs_mod.expand_template("{{u1}}", {"u1": "http://x/f"}) == "http://x/f"
    assert rfs_mod.expand_template("{{ u2 }}/y", {"u2": "a"}) == "a/y"
    assert rfs_mod.expand_template("plain", {}) == "plain"
    with pytest.raises(InvalidLindiFile, match="undefined template 'u9'"):
        rfs_mod.expand_template("{{u9}}", {})
    refs: dict[str, Any] = {f"a/{i}": ["http://x/f", i, 1] for i in range(5)}
    refs["b/0"] = ["other", 0, 1]
    refs[".zgroup"] = {"zarr_format": 2}
    out = rfs_mod.apply_templates({"version": 1, "refs": refs})
    assert out["templates"] == {"u1": "http://x/f"}
    assert out["refs"]["a/3"] == ["{{u1}}", 3, 1]
    assert out["refs"]["b/0"] == ["other", 0, 1]
    assert refs["a/3"] == ["http://x/f", 3, 1]  # the input is not modified
    assert "templates" not in rfs_mod.apply_templates({"version": 1, "refs": {"b/0": ["o", 0, 1]}})


def test_relative_locations() -> None:
    assert rfs_mod.resolve_location("./d.h5", "/data/x.lindi.json") == "/data/d.h5"
    assert rfs_mod.resolve_location("./d.h5", "http://h/p/x.lindi.json") == "http://h/p/d.h5"
    assert rfs_mod.resolve_location("/abs.h5", None) == "/abs.h5"
    with pytest.raises(InvalidLindiFile, match="relative"):
        rfs_mod.resolve_location("./d.h5", None)


def test_node_index() -> None:
    kinds, children = rfs_mod.node_index(
        [
            ".zgroup",
            "a/.zgroup",
            "a/x/.zarray",
            "a/x/0.0",
            "b/.zarray",
            "b/.zattrs",
            "a/l/.zgroup",
            "a/l/.zattrs",
        ]
    )
    assert kinds == {"": "group", "a": "group", "a/x": "array", "b": "array", "a/l": "group"}
    assert children == {"": ["a", "b"], "a": ["l", "x"], "a/l": []}


# -- range coalescing ------------------------------------------------------------------------
def test_coalesce_groups_nearby_ranges_of_one_file() -> None:
    from zarrchive.lindi import store

    br = rfs_mod.ByteRange
    ranges = [
        br("/a", 100, 10),
        br("/b", 0, 5),
        br("/a", 0, 50),
        br("/a", 115 + store.LOCAL_GAP + 1, 10),
        br("/a", 110, 5),
    ]
    blocks = store.coalesce(ranges, [10, 11, 12, 13, 14])
    assert [(b.url, b.offset, b.end, b.indices) for b in blocks] == [
        ("/a", 0, 115, [12, 10, 14]),
        ("/a", 115 + store.LOCAL_GAP + 1, 115 + store.LOCAL_GAP + 11, [13]),
        ("/b", 0, 5, [11]),
    ]
    huge = [br("http://h/f", 0, store.MAX_BLOCK), br("http://h/f", store.MAX_BLOCK, 10)]
    assert len(store.coalesce(huge, [0, 1])) == 2


def test_large_remote_blocks_are_fetched_in_parts() -> None:
    from zarrchive.lindi import store

    block = store.Block("http://h/f", 10, 10 + 2 * store.REMOTE_PART + 5)
    assert store._parts(block) == [
        (10, store.REMOTE_PART),
        (10 + store.REMOTE_PART, store.REMOTE_PART),
        (10 + 2 * store.REMOTE_PART, 5),
    ]
    small = store.Block("http://h/f", 0, 100)
    assert store._parts(small) == [(0, 100)]


def test_range_reader_reads_and_caches(tmp_path: Any) -> None:
    from zarrchive.lindi.store import RangeReader

    path = tmp_path / "data.bin"
    path.write_bytes(bytes(range(256)) * 4)
    reader = RangeReader(cache_bytes=4096)
    br = rfs_mod.ByteRange
    got = reader.read_many([br(str(path), 10, 3), br(str(path), 0, 2), br(str(path), 1000, 24)])
    assert got == [bytes([10, 11, 12]), bytes([0, 1]), (bytes(range(256)) * 4)[1000:1024]]
    assert reader.fetch_count == 1  # one block: [0, 1024) (the gap is under LOCAL_GAP)
    assert reader.read_many([br(str(path), 10, 3)]) == [bytes([10, 11, 12])]
    assert reader.fetch_count == 1  # from the cache
    with pytest.raises(InvalidLindiFile, match="ends before byte"):
        reader.read(str(path), 1020, 10)
    with pytest.raises(InvalidLindiFile, match="cannot open"):
        reader.read(str(tmp_path / "missing"), 0, 1)
    reader.close()


def test_reference_store_is_a_read_only_zarr_store() -> None:
    from zarr.abc.store import OffsetByteRequest, RangeByteRequest, SuffixByteRequest
    from zarr.core.buffer import default_buffer_prototype
    from zarr.core.sync import sync

    from zarrchive.lindi.store import LindiReferenceStore

    rfs = {
        "version": 1,
        "refs": {
            ".zgroup": {"zarr_format": 2},
            "a/.zarray": rules.zarray([6], [4], "<i2"),
            "a/0": rfs_mod.encode_inline(np.arange(4, dtype="<i2").tobytes()),
            "a/1": rfs_mod.encode_inline(np.arange(4, 6, dtype="<i2").tobytes()),  # short: padded
        },
    }
    store = LindiReferenceStore(rfs)
    proto = default_buffer_prototype()

    async def run() -> dict[str, Any]:
        out: dict[str, Any] = {}
        out["zgroup"] = (await store.get(".zgroup", proto)).to_bytes()  # type: ignore[union-attr]
        out["short"] = (await store.get("a/1", proto)).to_bytes()  # type: ignore[union-attr]
        out["range"] = (await store.get("a/0", proto, RangeByteRequest(2, 4))).to_bytes()  # type: ignore[union-attr]
        out["offset"] = (await store.get("a/0", proto, OffsetByteRequest(6))).to_bytes()  # type: ignore[union-attr]
        out["suffix"] = (await store.get("a/0", proto, SuffixByteRequest(2))).to_bytes()  # type: ignore[union-attr]
        out["missing"] = await store.get("nope", proto)
        out["exists"] = [await store.exists(".zgroup"), await store.exists("a/2")]
        out["list"] = sorted([k async for k in store.list()])
        out["dir"] = sorted([k async for k in store.list_dir("")])
        out["prefix"] = sorted([k async for k in store.list_prefix("a/")])
        return out

    out = sync(run())
    assert json.loads(out["zgroup"]) == {"zarr_format": 2}
    assert out["short"] == np.array([4, 5, 0, 0], dtype="<i2").tobytes()
    assert out["range"] == np.arange(4, dtype="<i2").tobytes()[2:4]
    assert out["offset"] == np.arange(4, dtype="<i2").tobytes()[6:]
    assert out["suffix"] == np.arange(4, dtype="<i2").tobytes()[-2:]
    assert out["missing"] is None
    assert out["exists"] == [True, False]
    assert out["list"] == [".zgroup", "a/.zarray", "a/0", "a/1"]
    assert out["dir"] == [".zgroup", "a"]
    assert out["prefix"] == ["a/.zarray", "a/0", "a/1"]
    assert store.read_only and not store.supports_writes
    with pytest.raises(ValueError):
        sync(store.set("x", proto.buffer.from_bytes(b"1")))


def test_summarize_codecs_like_h5py() -> None:
    from zarrchive.lindi.codecs import summarize

    pipeline: list[dict[str, Any]] = [
        {"id": "shuffle", "elementsize": 4},
        {"id": "zlib", "level": 5},
        {"id": "fletcher32"},
    ]
    assert summarize(pipeline, None) == {
        "compression": "gzip",
        "compression_opts": 5,
        "shuffle": True,
        "fletcher32": True,
    }
    assert summarize([{"id": "blosc"}], None)["compression"] == "unknown"
    assert summarize([], None) == {
        "compression": None,
        "compression_opts": None,
        "shuffle": False,
        "fletcher32": False,
    }
    # inline object data JSON-encoded and blosc-compressed (lindi's inline arrays): no HDF5 filter
    assert summarize([dict(rules.JSON_CODEC)], {"id": "blosc"})["compression"] is None
    assert summarize([], {"id": "zlib", "level": 1})["compression"] == "gzip"

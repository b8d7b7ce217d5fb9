"""HDF5 -> LINDI -> our reader, compared with h5py, with the stored annotations checked literally."""

from __future__ import annotations

import base64
import json
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import h5py
import numcodecs
import numpy as np
import pytest
import zarr
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp
from zarr.storage import LocalStore

from tests.helpers.lindi import same_tree, same_value
from tests.helpers.zarr_nodes import as_array
from zarrchive.errors import InvalidInput, InvalidLindiFile, ReferenceMismatch
from zarrchive.lindi import (
    ConvertOptions,
    Dataset,
    File,
    LindiReferenceStore,
    Reference,
    SoftLink,
    convert_to_lindi_json,
    convert_to_zarr,
    hdf5_to_rfs,
    write_lindi_json,
    write_zarr_directory,
)

JSON_CODEC = {
    "id": "json2",
    "encoding": "utf-8",
    "skipkeys": False,
    "ensure_ascii": True,
    "check_circular": True,
    "allow_nan": True,
    "indent": None,
    "separators": [",", ":"],
    "sort_keys": True,
    "strict": True,
}


def zarray(
    shape: list[int], chunks: list[int], dtype: str, fill: Any = None, filters: Any = None
) -> dict[str, Any]:
    return {
        "zarr_format": 2,
        "shape": shape,
        "chunks": chunks,
        "dtype": dtype,
        "compressor": None,
        "fill_value": fill,
        "filters": filters,
        "order": "C",
        "dimension_separator": ".",
    }


def convert(path: Path, **options: Any) -> tuple[dict[str, Any], File]:
    rfs = hdf5_to_rfs(path, options=ConvertOptions(use_templates=False, **options))
    # what is stored is plain JSON
    rfs = json.loads(json.dumps(rfs, allow_nan=False))
    return rfs, File(rfs)


# -- groups and attributes ---------------------------------------------------------
def test_groups_and_attributes(h5path: Path) -> None:
    with h5py.File(h5path, "w") as f:
        f.attrs["i"] = np.int32(-5)
        f.attrs["u"] = np.uint64(2**63)
        f.attrs["f"] = 1.25
        f.attrs["nan"] = np.nan
        f.attrs["inf"] = -np.inf
        f.attrs["s"] = "héllo"
        f.attrs["b"] = np.bytes_(b"raw")
        f.attrs["flag"] = True
        f.attrs["ints"] = np.arange(6, dtype="i2").reshape(2, 3)
        f.attrs["floats"] = [0.5, np.nan, np.inf]
        f.attrs["strs"] = ["a", "bc"]
        f.attrs["fixed"] = np.array([b"x", b"yz"])
        g = f.create_group("a/b")
        g.attrs["neurodata_type"] = "X"
        f.create_group("empty")
    rfs, ours = convert(h5path)
    refs = rfs["refs"]
    assert refs[".zgroup"] == {"zarr_format": 2}
    assert refs[".zattrs"] == {
        "i": -5,
        "u": 2**63,
        "f": 1.25,
        "nan": "NaN",
        "inf": "-Infinity",
        "s": "héllo",
        "b": "raw",
        "flag": True,
        "ints": [[0, 1, 2], [3, 4, 5]],
        "floats": [0.5, "NaN", "Infinity"],
        "strs": ["a", "bc"],
        "fixed": ["x", "yz"],
    }
    assert refs["a/.zgroup"] == {"zarr_format": 2}
    assert "a/.zattrs" not in refs  # no empty attributes
    assert refs["a/b/.zattrs"] == {"neurodata_type": "X"}
    assert sorted(k for k in refs if "empty" in k) == ["empty/.zgroup"]
    with h5py.File(h5path) as theirs:
        same_tree(ours, theirs)
        assert ours.attrs["s"] == "héllo" and isinstance(ours.attrs["s"], str)
        assert type(ours.attrs["flag"]) is np.bool_
        assert ours.attrs["b"] == "raw"  # bytes attributes are text in LINDI


# -- numeric datasets ----------------------------------------------------------------
NUMERIC = [
    "i1",
    "i2",
    "<i4",
    ">i4",
    "i8",
    "u1",
    "u2",
    "u4",
    "u8",
    "f2",
    "<f4",
    ">f8",
    "f8",
    "?",
    "c8",
    "c16",
]


@pytest.mark.parametrize("dtype", NUMERIC)
def test_numeric_types_inline_contiguous_and_chunked(h5path: Path, dtype: str) -> None:
    rng = np.random.default_rng(0)
    big = (rng.random((40, 50)) * 100).astype(dtype)
    with h5py.File(h5path, "w") as f:
        f.create_dataset("small", data=big[:3, :4])
        f.create_dataset("contiguous", data=big)
        f.create_dataset(
            "chunked", data=big, chunks=(7, 9), compression="gzip", shuffle=True, fletcher32=True
        )
    rfs, ours = convert(h5path)
    refs = rfs["refs"]
    zdtype = np.dtype(dtype).str
    assert refs["small/.zarray"] == zarray(
        [3, 4], [3, 4], zdtype, fill=refs["small/.zarray"]["fill_value"]
    )
    assert isinstance(refs["small/0.0"], str)  # inline
    assert refs["contiguous/.zarray"]["chunks"] == [40, 50]
    assert refs["contiguous/0.0"][0] == str(h5path) and refs["contiguous/0.0"][2] == big.nbytes
    itemsize = np.dtype(dtype).itemsize
    assert refs["chunked/.zarray"] == zarray(
        [40, 50],
        [7, 9],
        zdtype,
        fill=refs["chunked/.zarray"]["fill_value"],
        filters=[
            {"id": "shuffle", "elementsize": itemsize},
            {"id": "zlib", "level": 4},
            {"id": "fletcher32"},
        ],
    )
    chunk_keys = [k for k in refs if k.startswith("chunked/") and not k.endswith(".zarray")]
    assert len(chunk_keys) == 6 * 6
    assert all(isinstance(refs[k], list) for k in chunk_keys)
    with h5py.File(h5path) as theirs:
        same_tree(ours, theirs)
        for name in ("small", "contiguous", "chunked"):
            assert ours[name].dtype == np.dtype(dtype)
        assert ours["chunked"].chunks == (7, 9)
        assert ours["chunked"].compression == "gzip" and ours["chunked"].compression_opts == 4
        assert ours["chunked"].shuffle and ours["chunked"].fletcher32
        assert ours["contiguous"].compression is None and not ours["contiguous"].fletcher32
        np.testing.assert_array_equal(
            ours["chunked"][5:33:4, [0, 8, 9, 49]], theirs["chunked"][5:33:4, [0, 8, 9, 49]]
        )
    # zarr-python 3 reads the shuffle + zlib + fletcher32 chunks through our store as well
    group = zarr.open_group(LindiReferenceStore(rfs), mode="r", zarr_format=2)
    with h5py.File(h5path) as theirs:
        np.testing.assert_array_equal(as_array(group["chunked"])[:], theirs["chunked"][:])
        assert ours["chunked"][-1, -1] == theirs["chunked"][-1, -1]


ROUNDTRIP_DTYPES: list[np.dtype[Any]] = [
    np.dtype("<i2"),
    np.dtype("<f4"),
    np.dtype(">u4"),
    np.dtype("<f8"),
]
selections = st.tuples(
    st.integers(-30, 30), st.integers(-30, 30), st.integers(1, 5), st.integers(0, 29)
)


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    data=hnp.arrays(
        dtype=st.sampled_from(ROUNDTRIP_DTYPES),
        shape=hnp.array_shapes(min_dims=1, max_dims=3, min_side=1, max_side=30),
    ),
    chunk_fraction=st.lists(st.floats(0.05, 1.0), min_size=3, max_size=3),
    compression=st.sampled_from([None, "gzip"]),
    fletcher32=st.booleans(),
    sel=selections,
)
def test_random_arrays_and_chunkings_round_trip(
    tmp_path: Path,
    data: np.ndarray,
    chunk_fraction: list[float],
    compression: str | None,
    fletcher32: bool,
    sel: tuple[int, int, int, int],
) -> None:
    path = tmp_path / f"r{uuid.uuid4().hex}.h5"
    chunks = tuple(max(1, int(n * c)) for n, c in zip(data.shape, chunk_fraction, strict=False))
    with h5py.File(path, "w") as f:
        f.create_dataset(
            "d", data=data, chunks=chunks, compression=compression, fletcher32=fletcher32
        )
    _, ours = convert(path, inline_max_elements=0)
    ds = ours["d"]
    assert ds.shape == data.shape and ds.dtype == data.dtype and ds.chunks == chunks
    np.testing.assert_array_equal(ds[()], data)
    start, stop, step, index = sel
    key = (slice(start, stop, step),) + ((index % data.shape[1],) if data.ndim > 1 else ())
    np.testing.assert_array_equal(ds[key], data[key])
    np.testing.assert_array_equal(ds[..., ::2], data[..., ::2])
    picks = sorted({index % data.shape[0], 0, data.shape[0] - 1})
    np.testing.assert_array_equal(ds[picks], data[picks])


@settings(
    max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    rows=st.integers(2, 200), cols=st.integers(1, 9), max_bytes=st.integers(8, 800), sel=selections
)
def test_split_contiguous_datasets_round_trip(
    tmp_path: Path, rows: int, cols: int, max_bytes: int, sel: tuple[int, int, int, int]
) -> None:
    path = tmp_path / f"c{uuid.uuid4().hex}.h5"
    data = np.arange(rows * cols, dtype="<f8").reshape(rows, cols)
    with h5py.File(path, "w") as f:
        f.create_dataset("d", data=data)
    rfs, ours = convert(path, inline_max_elements=0, contiguous_max_chunk_bytes=max_bytes)
    pieces = [v for k, v in rfs["refs"].items() if k.startswith("d/") and isinstance(v, list)]
    assert sum(p[2] for p in pieces) == data.nbytes
    start, stop, step, _ = sel
    np.testing.assert_array_equal(ours["d"][start:stop:step], data[start:stop:step])
    np.testing.assert_array_equal(ours["d"][-1], data[-1])


def test_contiguous_split_literal_and_short_last_piece(h5path: Path) -> None:
    data = np.arange(10 * 3, dtype="<i8").reshape(10, 3)
    with h5py.File(h5path, "w") as f:
        f.create_dataset("d", data=data)
        offset = f["d"].id.get_offset()
    rfs, ours = convert(h5path, inline_max_elements=0, contiguous_max_chunk_bytes=100)
    refs = rfs["refs"]
    assert refs["d/.zarray"]["chunks"] == [4, 3]
    assert refs["d/0.0"] == [str(h5path), offset, 96]
    assert refs["d/1.0"] == [str(h5path), offset + 96, 96]
    assert refs["d/2.0"] == [str(h5path), offset + 192, 48]  # short: 2 rows of 4
    np.testing.assert_array_equal(ours["d"][:], data)
    np.testing.assert_array_equal(ours["d"][8:], data[8:])
    # zarr-python 3 reads it too through our store (short raw chunks padded)
    group = zarr.open_group(LindiReferenceStore(rfs), mode="r", zarr_format=2)
    np.testing.assert_array_equal(as_array(group["d"])[:], data)


def test_unwritten_chunks_have_no_key_and_read_as_fill_value(h5path: Path) -> None:
    with h5py.File(h5path, "w") as f:
        d = f.create_dataset("d", shape=(40, 40), chunks=(10, 10), dtype="f4", fillvalue=-1.5)
        d[12:14, 25] = 7
        f.create_dataset("never", shape=(2000,), dtype="i4", fillvalue=3)
        f.create_dataset("nan", shape=(2000,), chunks=(100,), dtype="f8", fillvalue=np.nan)
    rfs, ours = convert(h5path)
    refs = rfs["refs"]
    assert [k for k in refs if k.startswith("d/") and k[2].isdigit()] == ["d/1.2"]
    assert refs["d/.zarray"]["fill_value"] == -1.5
    assert [k for k in refs if k.startswith("never/")] == ["never/.zarray"]
    assert refs["never/.zarray"]["fill_value"] == 3
    assert refs["nan/.zarray"]["fill_value"] == "NaN"
    with h5py.File(h5path) as theirs:
        same_tree(ours, theirs)
    assert ours["d"].fillvalue == np.float32(-1.5)
    assert np.isnan(ours["nan"].fillvalue)


def test_empty_datasets(h5path: Path) -> None:
    with h5py.File(h5path, "w") as f:
        f.create_dataset("e", shape=(0,), dtype="f8")
        f.create_dataset("e2", shape=(0, 5), chunks=(4, 5), maxshape=(None, 5), dtype="i4")
        f.create_dataset("es", shape=(0,), dtype=h5py.string_dtype())
    rfs, ours = convert(h5path)
    assert rfs["refs"]["e2/.zarray"]["shape"] == [0, 5]
    assert rfs["refs"]["e2/.zarray"]["chunks"] == [4, 5]
    assert rfs["refs"]["e/.zarray"]["chunks"] == [1]
    with h5py.File(h5path) as theirs:
        same_tree(ours, theirs)
    assert ours["e2"][:].shape == (0, 5)


def test_filter_mask_chunks_are_reencoded_inline(h5path: Path) -> None:
    """A chunk stored with its compression skipped (HDF5 filter mask) is decoded right."""
    with h5py.File(h5path, "w") as f:
        d = f.create_dataset("d", shape=(2000,), chunks=(1000,), dtype="<i4", compression="gzip")
        d[:1000] = np.arange(1000)
        d.id.write_direct_chunk(
            (1000,), np.arange(1000, 2000, dtype="<i4").tobytes(), filter_mask=1
        )
    rfs, ours = convert(h5path)
    assert isinstance(rfs["refs"]["d/0"], list)
    assert isinstance(rfs["refs"]["d/1"], str)
    np.testing.assert_array_equal(ours["d"][:], np.arange(2000))


@pytest.mark.parametrize(
    ("filter_id", "client_data", "codec", "expected"),
    [
        (
            32001,
            (2, 2, 4, 0, 5, 1, 1),
            numcodecs.Blosc(cname="lz4", clevel=5, shuffle=1),
            {"id": "blosc", "cname": "lz4", "clevel": 5, "shuffle": 1, "blocksize": 0},
        ),
        (32015, (3,), numcodecs.Zstd(level=3), {"id": "zstd", "level": 3}),
    ],
)
def test_plugin_filters_blosc_and_zstd(
    h5path: Path, filter_id: int, client_data: tuple[int, ...], codec: Any, expected: dict[str, Any]
) -> None:
    """Chunks written as the HDF5 blosc/zstd plugins write them (no plugin needed to convert or read)."""
    data = np.arange(25, dtype="<i4") * 3
    with h5py.File(h5path, "w") as f:
        dcpl = h5py.h5p.create(h5py.h5p.DATASET_CREATE)
        dcpl.set_chunk((10,))
        dcpl.set_filter(filter_id, h5py.h5z.FLAG_OPTIONAL, client_data)
        space = h5py.h5s.create_simple((25,))
        dsid = h5py.h5d.create(f.id, b"d", h5py.h5t.STD_I32LE, space, dcpl=dcpl)
        for i in range(3):
            chunk = np.zeros(10, "<i4")
            part = data[i * 10 : (i + 1) * 10]
            chunk[: len(part)] = part
            dsid.write_direct_chunk((i * 10,), codec.encode(chunk.tobytes()))
    rfs, ours = convert(h5path)
    assert rfs["refs"]["d/.zarray"]["filters"] == [expected]
    assert ours["d"].compression == "unknown"  # as h5py reports plugin filters
    np.testing.assert_array_equal(ours["d"][:], data)
    np.testing.assert_array_equal(ours["d"][7:23:3], data[7:23:3])


# -- scalars and strings --------------------------------------------------------------------
def test_scalars(h5path: Path) -> None:
    with h5py.File(h5path, "w") as f:
        f.create_dataset("f", data=2.5)
        f.create_dataset("i", data=np.int16(-4))
        f.create_dataset("s", data="héllo")
        f.create_dataset("fixed", data=np.bytes_(b"abc"))
        f.create_dataset("b", data=True)
    rfs, ours = convert(h5path)
    refs = rfs["refs"]
    assert refs["f/.zattrs"] == {"_SCALAR": True}
    assert refs["f/.zarray"] == zarray([1], [1], "<f8", fill=0.0)
    assert refs["s/.zattrs"] == {"_SCALAR": True}
    assert refs["s/.zarray"] == zarray([1], [1], "|O", filters=[JSON_CODEC])
    assert refs["s/0"] == '["h\\u00e9llo","|O",[1]]'
    assert refs["fixed/.zarray"] == zarray([1], [1], "|S3")
    assert refs["fixed/0"] == "abc"
    with h5py.File(h5path) as theirs:
        same_tree(ours, theirs)
        for name in ("f", "i", "s", "fixed", "b"):
            assert ours[name].shape == () and ours[name].ndim == 0
            assert ours[name].chunks is None
            same_value(ours[name][()], theirs[name][()], ours, theirs)
            assert ours[name][...].shape == ()
    assert ours["s"][()] == "héllo".encode()
    assert ours["s"].asstr()[()] == "héllo"
    with pytest.raises(ValueError, match="scalar"):
        ours["f"][0]
    with pytest.raises(TypeError):
        len(ours["f"])


def test_strings(h5path: Path) -> None:
    with h5py.File(h5path, "w") as f:
        f.create_dataset("v", data=["a", "héllo", ""], dtype=h5py.string_dtype())
        f.create_dataset(
            "v2", data=np.array([["a", "b"], ["c", "d"]], dtype=object), dtype=h5py.string_dtype()
        )
        f.create_dataset("fixed", data=np.array([b"ab", b"c", b"\xff\x00"]))
        f.create_dataset(
            "many",
            data=[f"s{i}" for i in range(3000)],
            dtype=h5py.string_dtype(),
            chunks=(100,),
            compression="gzip",
        )
    rfs, ours = convert(h5path)
    refs = rfs["refs"]
    assert refs["v/0"] == '["a","h\\u00e9llo","","|O",[3]]'
    assert refs["v2/0.0"] == '[["a","b"],["c","d"],"|O",[2,2]]'
    assert refs["fixed/.zarray"] == zarray([3], [3], "|S2")
    assert refs["fixed/0"].startswith("base64:")
    assert refs["many/.zarray"]["chunks"] == [3000]  # all strings inline, one chunk
    with h5py.File(h5path) as theirs:
        same_tree(ours, theirs)
    assert ours["v"].asstr()[1] == "héllo"
    assert ours["v2"][1, 0] == b"c"
    assert list(ours["many"].asstr()[2998:]) == ["s2998", "s2999"]


# -- links ----------------------------------------------------------------------------------
def test_soft_and_hard_links(h5path: Path) -> None:
    with h5py.File(h5path, "w") as f:
        g = f.create_group("g")
        d = g.create_dataset("d", data=np.arange(3000.0), chunks=(1000,))
        f["to_group"] = h5py.SoftLink("/g")
        f["to_dataset"] = h5py.SoftLink("/g/d")
        g["relative"] = h5py.SoftLink("d")
        f["dangling"] = h5py.SoftLink("/nowhere")
        f["hard"] = d
    rfs, ours = convert(h5path)
    refs = rfs["refs"]
    assert refs["to_group/.zgroup"] == {"zarr_format": 2}
    assert refs["to_group/.zattrs"] == {"_SOFT_LINK": {"path": "/g"}}
    assert refs["to_dataset/.zattrs"] == {"_SOFT_LINK": {"path": "/g/d"}}
    assert refs["g/relative/.zattrs"] == {"_SOFT_LINK": {"path": "/g/d"}}
    assert refs["dangling/.zattrs"] == {"_SOFT_LINK": {"path": "/nowhere"}}
    assert not [k for k in refs if k.startswith("to_group/") and k.count("/") > 1]
    assert [refs[f"hard/{i}"] for i in range(3)] == [refs[f"g/d/{i}"] for i in range(3)]
    with h5py.File(h5path) as theirs:
        same_tree(ours, theirs)
    link = ours.get("to_dataset", getlink=True)
    assert isinstance(link, SoftLink) and link.path == "/g/d"
    assert isinstance(ours.get("hard", getlink=True), h5py.HardLink)
    assert ours.get("to_group", getclass=True, getlink=True) is SoftLink
    assert ours["to_dataset"].name == "/g/d"
    assert ours["to_group/d"][2999] == 2999.0
    assert ours["g"]["relative"][1] == 1.0
    assert "dangling" not in ours and ours.get("dangling") is None
    with pytest.raises(KeyError):
        ours["dangling"]
    assert ours.get("missing", "default") == "default"
    assert ours.get("missing", getlink=True) is None


def test_visititems_matches_h5py_without_links(h5path: Path) -> None:
    with h5py.File(h5path, "w") as f:
        f.create_dataset("a/b/c", data=[1])
        f.create_dataset("a/x", data=[2])
        f.create_group("z")
        f["a/link"] = h5py.SoftLink("/z")
    _, ours = convert(h5path)
    seen: list[str] = []
    theirs_seen: list[str] = []

    def see(into: list[str]) -> Callable[[str, object], None]:
        def visitor(name: str, obj: object) -> None:
            into.append(f"{name}:{type(obj).__name__}")  # None: the visit goes on

        return visitor

    ours.visititems(see(seen))
    with h5py.File(h5path) as theirs:
        theirs.visititems(see(theirs_seen))
    assert seen == theirs_seen
    assert ours["a"].visit(lambda name: name if name.endswith("c") else None) == "b/c"


# -- references ------------------------------------------------------------------------------
def _with_references(path: Path) -> None:
    with h5py.File(path, "w") as f:
        f.attrs["object_id"] = "root-0"
        g = f.create_group("g")
        g.attrs["object_id"] = "group-1"
        d = g.create_dataset("d", data=np.arange(10))
        d.attrs["object_id"] = "dataset-2"
        d.attrs["self"] = d.ref
        f.attrs["to_group"] = g.ref
        f.attrs["many"] = np.array([g.ref, d.ref], dtype=h5py.ref_dtype)
        f.create_dataset("refs", data=[d.ref, g.ref, d.ref], dtype=h5py.ref_dtype)
        f.create_dataset("scalar_ref", data=g.ref, dtype=h5py.ref_dtype)
        nid = f.create_group("no_id")
        f.create_dataset("to_no_id", data=[nid.ref], dtype=h5py.ref_dtype)


def test_references(h5path: Path) -> None:
    _with_references(h5path)
    rfs, ours = convert(h5path)
    refs = rfs["refs"]
    to_d = {
        "_REFERENCE": {
            "source": ".",
            "path": "/g/d",
            "object_id": "dataset-2",
            "source_object_id": "root-0",
        }
    }
    to_g = {
        "_REFERENCE": {
            "source": ".",
            "path": "/g",
            "object_id": "group-1",
            "source_object_id": "root-0",
        }
    }
    assert refs[".zattrs"]["to_group"] == to_g
    assert refs[".zattrs"]["many"] == [to_g, to_d]
    assert refs["g/d/.zattrs"] == {"object_id": "dataset-2", "self": to_d}
    assert json.loads(refs["refs/0"]) == [to_d, to_g, to_d, "|O", [3]]
    assert refs["refs/.zarray"] == zarray([3], [3], "|O", filters=[JSON_CODEC])
    assert json.loads(refs["scalar_ref/0"]) == [to_g, "|O", [1]]
    assert json.loads(refs["to_no_id/0"])[0]["_REFERENCE"]["object_id"] is None
    with h5py.File(h5path) as theirs:
        same_tree(ours, theirs)
    assert ours["refs"].dtype == h5py.ref_dtype
    ref = ours["refs"][1]
    assert isinstance(ref, Reference) and isinstance(ref, h5py.Reference)
    assert ours[ref].name == "/g"
    assert ours[ours["scalar_ref"][()]].name == "/g"
    assert ours[ours["g/d"].attrs["self"]][4] == 4
    assert ours[ours["to_no_id"][0]].name == "/no_id"
    # a reference made by our reader resolves back
    assert ours[ours["g/d"].ref].name == "/g/d"
    assert ours["g/d"].ref.object_id == "dataset-2"


def test_reference_object_ids_are_checked(h5path: Path) -> None:
    _with_references(h5path)
    rfs, _ = convert(h5path)
    rfs["refs"]["g/.zattrs"] = {"object_id": "someone-else"}
    ours = File(rfs)
    with pytest.raises(ReferenceMismatch, match="expects object_id group-1"):
        ours[ours.attrs["to_group"]]
    rfs2, _ = convert(h5path)
    rfs2["refs"][".zattrs"]["object_id"] = "other-file"
    ours2 = File(rfs2)
    with pytest.raises(ReferenceMismatch, match="comes from the file"):
        ours2[ours2["refs"][0]]
    del rfs2["refs"]["g/d/.zarray"]
    ours3 = File(rfs2)
    with pytest.raises(ReferenceMismatch):
        ours3[Reference(ours3["refs"][0].target)]


# -- compound ---------------------------------------------------------------------------------
def test_compound_datasets(h5path: Path) -> None:
    with h5py.File(h5path, "w") as f:
        f.attrs["object_id"] = "root"
        g = f.create_group("g")
        g.attrs["object_id"] = "gid"
        dt = np.dtype([("x", "<i4"), ("y", "<f8"), ("name", "S4"), ("r", h5py.ref_dtype)])
        data = np.array(
            [(1, 0.5, b"ab", g.ref), (2, np.nan, b"cdef", g.ref), (3, -1.0, b"", f.ref)], dtype=dt
        )
        f.create_dataset("c", data=data)
    rfs, ours = convert(h5path)
    refs = rfs["refs"]
    assert refs["c/.zattrs"] == {
        "_COMPOUND_DTYPE": [["x", "int32"], ["y", "float64"], ["name", "|S4"], ["r", "<REFERENCE>"]]
    }
    assert refs["c/.zarray"] == zarray([3], [3], "|O", filters=[JSON_CODEC])
    to_g = {
        "_REFERENCE": {"source": ".", "path": "/g", "object_id": "gid", "source_object_id": "root"}
    }
    to_root = {
        "_REFERENCE": {"source": ".", "path": "/", "object_id": "root", "source_object_id": "root"}
    }
    assert json.loads(refs["c/0"]) == [
        [1, 0.5, "ab", to_g],
        [2, "NaN", "cdef", to_g],
        [3, -1.0, "", to_root],
        "|O",
        [3],
    ]
    ds = ours["c"]
    assert isinstance(ds, Dataset)
    with h5py.File(h5path) as theirs:
        same_tree(ours, theirs)
        h = theirs["c"]
        assert ds.dtype.names == h.dtype.names
        same_value(ds[:], h[:], ours, theirs)
        same_value(ds[1], h[1], ours, theirs)
        same_value(ds[1:], h[1:], ours, theirs)
        np.testing.assert_array_equal(ds["x"], h["x"])
        np.testing.assert_array_equal(ds["name"], h["name"])
        np.testing.assert_array_equal(ds["x", 1:], h["x", 1:])
        np.testing.assert_array_equal(ds[[0, 2]]["y"], h[[0, 2]]["y"])
        assert ds[0]["x"] == 1 and ds[2]["name"] == b""
        assert ours[ds[0]["r"]].name == "/g"
        assert ours[ds["r"][2]].name == "/"
        np.testing.assert_array_equal(ds.fields(["x", "y"])[:2]["x"], [1, 2])
        assert len(ds) == 3 and [row["x"] for row in ds] == [1, 2, 3]


# -- external array links -----------------------------------------------------------------------
def test_external_array_links(h5path: Path) -> None:
    data = np.arange(60 * 40, dtype="<i2").reshape(60, 40)
    with h5py.File(h5path, "w") as f:
        d = f.create_dataset("acq/many", data=data, chunks=(6, 4), compression="gzip")
        d.attrs["unit"] = "mV"
        f.create_dataset("few", data=data, chunks=(30, 40))
    rfs, ours = convert(h5path, external_array_link_threshold=50)
    refs = rfs["refs"]
    assert refs["acq/many/.zattrs"] == {
        "unit": "mV",
        "_EXTERNAL_ARRAY_LINK": {
            "link_type": "hdf5_dataset",
            "url": str(h5path),
            "name": "acq/many",
        },
    }
    assert refs["acq/many/.zarray"]["chunks"] == [6, 4]
    assert [k for k in refs if k.startswith("acq/many/")] == [
        "acq/many/.zarray",
        "acq/many/.zattrs",
    ]
    assert len([k for k in refs if k.startswith("few/")]) == 3
    ds = ours["acq/many"]
    assert ds.external_array_link == (str(h5path), "acq/many")
    assert ds.shape == (60, 40) and ds.dtype == np.dtype("<i2") and ds.attrs["unit"] == "mV"
    np.testing.assert_array_equal(ds[:], data)
    np.testing.assert_array_equal(ds[3:50:7, 5], data[3:50:7, 5])
    # default threshold 1000: the 100 chunks are referenced; None disables links
    rfs_default, _ = convert(h5path)
    assert len([k for k in rfs_default["refs"] if k.startswith("acq/many/")]) == 2 + 100
    rfs_never, _ = convert(h5path, external_array_link_threshold=None)
    assert "_EXTERNAL_ARRAY_LINK" not in json.dumps(rfs_never)
    rfs_zero, _ = convert(h5path, external_array_link_threshold=0)
    assert "_EXTERNAL_ARRAY_LINK" in rfs_zero["refs"]["few/.zattrs"]


# -- files, templates, generation metadata, writers ------------------------------------------------
def test_lindi_json_file_templates_and_generation_metadata(h5path: Path, tmp_path: Path) -> None:
    data = np.arange(10000, dtype="<f4")
    with h5py.File(h5path, "w") as f:
        f.create_dataset("d", data=data, chunks=(1000,))
    out = convert_to_lindi_json(
        h5path, tmp_path / "f.lindi.json", generation_metadata={"tool": "t"}
    )
    stored = json.loads(out.read_text())
    assert stored["version"] == 1
    assert stored["generationMetadata"] == {"tool": "t"}
    assert stored["templates"] == {"u1": str(h5path)}
    assert stored["refs"]["d/3"][0] == "{{u1}}"
    with File(out) as ours:
        np.testing.assert_array_equal(ours["d"][:], data)
        assert ours.filename == str(out)
    assert not ours
    with pytest.raises(InvalidInput, match=r"\.lindi\.json"):
        write_lindi_json(stored, tmp_path / "f.json")


def test_relative_locations_in_lindi_files(h5path: Path, tmp_path: Path) -> None:
    with h5py.File(h5path, "w") as f:
        f.create_dataset("d", data=np.arange(2000), chunks=(500,))
    rfs = hdf5_to_rfs(h5path, url="./f.h5")
    write_lindi_json(rfs, tmp_path / "x.lindi.json")
    with File(tmp_path / "x.lindi.json") as ours:
        np.testing.assert_array_equal(ours["d"][:], np.arange(2000))
    with pytest.raises(InvalidLindiFile, match="relative"):
        File(rfs)["d"][:]


def test_zarr_directory_is_self_contained(h5path: Path, tmp_path: Path) -> None:
    _with_references(h5path)
    with h5py.File(h5path, "a") as f:
        f.create_dataset(
            "big",
            data=np.arange(50000, dtype="<i8").reshape(500, 100),
            chunks=(10, 10),
            compression="gzip",
            fletcher32=True,
        )
        f["link"] = h5py.SoftLink("/g")
    out = convert_to_zarr(h5path, tmp_path / "out.zarr")
    assert (out / ".zgroup").exists() and (out / "big" / "49.9").exists()
    moved = tmp_path / "moved.h5"
    h5path.rename(moved)  # the directory no longer needs the HDF5 file
    with h5py.File(moved) as theirs:
        same_tree(File(out), theirs)
        same_tree(File(LocalStore(out, read_only=True)), theirs)
    meta = json.loads((out / "link" / ".zattrs").read_text())
    assert meta == {"_SOFT_LINK": {"path": "/g"}}
    with pytest.raises(InvalidInput, match="not empty"):
        convert_to_zarr(moved, out)
    rfs = hdf5_to_rfs(moved, options=ConvertOptions(external_array_link_threshold=10))
    with pytest.raises(InvalidLindiFile, match="external array link"):
        write_zarr_directory(rfs, tmp_path / "other.zarr")


def test_file_opens_hdf5_directly_and_any_zarr_store(h5path: Path) -> None:
    _with_references(h5path)
    with File(h5path) as ours, h5py.File(h5path) as theirs:
        same_tree(ours, theirs)
    rfs = hdf5_to_rfs(h5path)
    store = LindiReferenceStore(rfs)
    with h5py.File(h5path) as theirs:
        same_tree(File(store), theirs)
    # zarr-python 3 itself opens the store
    group = zarr.open_group(store, mode="r", zarr_format=2)
    np.testing.assert_array_equal(as_array(group["g/d"])[:], np.arange(10))
    assert group["g/d"].attrs["object_id"] == "dataset-2"


def test_reader_is_read_only_and_reports_bad_input(h5path: Path, tmp_path: Path) -> None:
    with h5py.File(h5path, "w") as f:
        f.create_dataset("d", data=[1, 2])
    _, ours = convert(h5path)
    with pytest.raises(InvalidInput):
        ours.create_group("x")
    with pytest.raises(InvalidInput):
        ours["d"][0] = 5
    with pytest.raises(InvalidInput):
        File(h5path, mode="r+")
    with pytest.raises(InvalidInput, match="no such file"):
        File(tmp_path / "missing.lindi.json")
    bad = tmp_path / "bad.lindi.json"
    bad.write_text("{not json")
    with pytest.raises(InvalidLindiFile, match="not valid JSON"):
        File(bad)
    with pytest.raises(InvalidLindiFile, match="no root group"):
        File({"version": 1, "refs": {}})
    with pytest.raises(IndexError):
        ours["d"][5]
    with pytest.raises(ValueError, match="Step"):
        ours["d"][::-1]


@settings(
    max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    texts=st.lists(
        st.text(
            st.characters(blacklist_categories=["Cs"], blacklist_characters="\x00"), max_size=8
        ),
        min_size=1,
        max_size=12,
    ),
    attr=st.one_of(
        st.integers(-(2**63), 2**63 - 1),
        st.floats(allow_nan=True),
        st.text(max_size=6).filter(
            lambda t: t not in ("NaN", "Infinity", "-Infinity") and "\x00" not in t
        ),
    ),
)
def test_random_strings_and_attributes_round_trip(
    tmp_path: Path, texts: list[str], attr: Any
) -> None:
    path = tmp_path / f"s{uuid.uuid4().hex}.h5"
    with h5py.File(path, "w") as f:
        d = f.create_dataset("s", data=texts, dtype=h5py.string_dtype())
        d.attrs["a"] = attr
    _, ours = convert(path)
    with h5py.File(path) as theirs:
        same_tree(ours, theirs)
    assert list(ours["s"].asstr()[:]) == texts


def test_zero_dimensional_zarr_arrays_read_their_chunk(tmp_path: Path) -> None:
    """A 0-d Zarr array (not a LINDI scalar, which is shape [1]) keeps its one value in
    chunk ``0``, as zarr-python writes it; the reader must not answer the fill value."""
    root = zarr.open_group(LocalStore(tmp_path / "z.zarr"), mode="w", zarr_format=2)
    root.create_array("x", shape=(), dtype="<f8", fill_value=0.0, compressors=None)
    as_array(root["x"])[()] = 7.25
    files = sorted(p for p in (tmp_path / "z.zarr").rglob("*") if p.is_file())
    refs: dict[str, Any] = {".zgroup": {"zarr_format": 2}}
    for path in files:
        key = path.relative_to(tmp_path / "z.zarr").as_posix()
        if key.endswith((".zarray", ".zattrs", ".zgroup")):
            refs[key] = json.loads(path.read_bytes())
        else:
            refs[key] = "base64:" + base64.b64encode(path.read_bytes()).decode()
    assert "x/0" in refs
    ours = File({"refs": refs, "version": 1})
    assert ours["x"].shape == ()
    assert ours["x"][()] == 7.25
    assert ours["x"][...].shape == ()

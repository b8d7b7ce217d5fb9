"""Conversion by URL and reading over HTTP range requests (a loopback server)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import h5py
import numpy as np

from tests.helpers.lindi import RangeServer, same_tree
from zarrchive.lindi import ConvertOptions, File, RangeReader, hdf5_to_rfs, write_lindi_json


def _sample(path: Path) -> None:
    with h5py.File(path, "w") as f:
        f.attrs["object_id"] = "root"
        g = f.create_group("acq")
        g.attrs["object_id"] = "acq-id"
        d = g.create_dataset(
            "data",
            data=np.arange(40000, dtype="<f4").reshape(400, 100),
            chunks=(40, 25),
            compression="gzip",
            fletcher32=True,
        )
        d.attrs["object_id"] = "data-id"
        g.create_dataset("many", data=np.arange(5000, dtype="<i4"), chunks=(2,))
        f.create_dataset("contiguous", data=np.arange(30000, dtype="<i8"))
        f.create_dataset("refs", data=[d.ref, g.ref], dtype=h5py.ref_dtype)
        f.create_dataset("text", data="remote")
        f["link"] = h5py.SoftLink("/acq/data")


def test_convert_by_url_and_read_over_http(tmp_path: Path, range_server: RangeServer) -> None:
    local = range_server.root / "s.h5"
    _sample(local)
    url = range_server.url("s.h5")
    rfs = hdf5_to_rfs(
        url, options=ConvertOptions(external_array_link_threshold=1000, use_templates=False)
    )
    assert range_server.ranged("s.h5") > 0  # conversion read the file with range requests
    assert rfs["refs"]["acq/data/0.0"][0] == url
    assert rfs["refs"]["acq/many/.zattrs"]["_EXTERNAL_ARRAY_LINK"] == {
        "link_type": "hdf5_dataset",
        "url": url,
        "name": "acq/many",
    }
    reader = RangeReader()
    before = range_server.ranged("s.h5")
    with File(rfs, reader=reader) as ours, h5py.File(local) as theirs:
        block = ours["acq/data"][35:125, 10:60]
        np.testing.assert_array_equal(block, theirs["acq/data"][35:125, 10:60])
        fetched = reader.fetch_count
        # the 4 x 3 chunks overlapping the block lie together in the file: one coalesced request
        assert fetched == 1
        assert range_server.ranged("s.h5") - before == fetched
        np.testing.assert_array_equal(ours["acq/data"][35:125, 10:60], block)
        assert reader.fetch_count == fetched  # cached
        # references resolve, and their targets are read over HTTP
        target = ours[ours["refs"][0]]
        assert target.name == "/acq/data"
        assert target[399, 99] == theirs["acq/data"][399, 99]
        # the external array link is read from the URL through h5py + range requests
        before_link = range_server.ranged("s.h5")
        np.testing.assert_array_equal(ours["acq/many"][100:200], np.arange(100, 200))
        assert range_server.ranged("s.h5") > before_link
        same_tree(ours, theirs)


def test_lindi_json_and_hdf5_opened_by_url(tmp_path: Path, range_server: RangeServer) -> None:
    local = range_server.root / "s.h5"
    _sample(local)
    url = range_server.url("s.h5")
    write_lindi_json(hdf5_to_rfs(url), range_server.root / "s.lindi.json")
    assert json.loads((range_server.root / "s.lindi.json").read_text())["templates"] == {"u1": url}
    with File(range_server.url("s.lindi.json")) as ours, h5py.File(local) as theirs:
        same_tree(ours, theirs)
        assert ours.filename == range_server.url("s.lindi.json")
    with File(url) as ours, h5py.File(local) as theirs:
        same_tree(ours, theirs)


def test_relative_references_resolve_against_the_url(
    tmp_path: Path, range_server: RangeServer
) -> None:
    local = tmp_path / "s.h5"
    _sample(local)
    rfs = hdf5_to_rfs(
        local, url="./data/s.h5", options=ConvertOptions(external_array_link_threshold=None)
    )
    (range_server.root / "data").mkdir()
    shutil.copy(local, range_server.root / "data" / "s.h5")
    write_lindi_json(rfs, range_server.root / "x.lindi.json")
    with File(range_server.url("x.lindi.json")) as ours, h5py.File(local) as theirs:
        np.testing.assert_array_equal(ours["contiguous"][:], theirs["contiguous"][:])
    assert range_server.ranged("data/s.h5") > 0


def test_missing_remote_file_is_a_clear_error(range_server: RangeServer) -> None:
    import pytest

    from zarrchive.errors import InvalidInput, RemoteReadError

    with pytest.raises(InvalidInput, match="HTTP 404"):
        File(range_server.url("missing.lindi.json"))
    rfs = {
        "version": 1,
        "refs": {
            ".zgroup": {"zarr_format": 2},
            "d/.zarray": {
                "zarr_format": 2,
                "shape": [2],
                "chunks": [2],
                "dtype": "<i4",
                "compressor": None,
                "fill_value": 0,
                "filters": None,
                "order": "C",
            },
            "d/0": [range_server.url("gone.h5"), 0, 8],
        },
    }
    with pytest.raises(RemoteReadError, match="HTTP 404"):
        File(rfs)["d"][:]

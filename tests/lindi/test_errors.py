"""What LINDI cannot represent is a clear exception, never a wrong file."""

from __future__ import annotations

from pathlib import Path

import h5py
import numpy as np
import pytest
from typer.testing import CliRunner

from zarrchive.cli.lindi import app
from zarrchive.errors import (
    InvalidInput,
    LindiError,
    PointsOutsideFile,
    UnsupportedDatatype,
    UnsupportedFilter,
    UnsupportedLink,
    UnsupportedReference,
)
from zarrchive.lindi import hdf5_to_rfs


@pytest.mark.parametrize(
    ("kwargs", "name"),
    [({"compression": "lzf"}, "lzf"), ({"scaleoffset": 2}, "scaleoffset")],
)
def test_unsupported_filter_names_filter_and_dataset(
    h5path: Path, kwargs: dict[str, object], name: str
) -> None:
    with h5py.File(h5path, "w") as f:
        f.create_dataset("acq/data", data=np.arange(5000, dtype="i4"), chunks=(100,), **kwargs)
    with pytest.raises(UnsupportedFilter) as info:
        hdf5_to_rfs(h5path)
    assert f"'{name}'" in info.value.message
    assert "/acq/data" in info.value.message
    assert isinstance(info.value, LindiError) and isinstance(info.value, InvalidInput)


def test_small_dataset_with_unsupported_filter_is_inline(h5path: Path) -> None:
    """Inline data are read through HDF5 and re-encoded: their filters do not matter."""
    with h5py.File(h5path, "w") as f:
        f.create_dataset("small", data=np.arange(10, dtype="i4"), chunks=(5,), compression="lzf")
    rfs = hdf5_to_rfs(h5path)
    assert isinstance(rfs["refs"]["small/0"], str)


def test_external_link(h5path: Path, tmp_path: Path) -> None:
    other = tmp_path / "other.h5"
    with h5py.File(other, "w") as f:
        f.create_dataset("x", data=[1])
    with h5py.File(h5path, "w") as f:
        f["ext"] = h5py.ExternalLink(str(other), "/x")
    with pytest.raises(UnsupportedLink, match=r"/ext is an external link to /x in .*other\.h5"):
        hdf5_to_rfs(h5path)


def test_hard_link_cycle(h5path: Path) -> None:
    with h5py.File(h5path, "w") as f:
        g = f.create_group("a/b")
        g["up"] = f["a"]
    with pytest.raises(UnsupportedLink, match="ancestors"):
        hdf5_to_rfs(h5path)


def test_region_reference_in_dataset(h5path: Path) -> None:
    with h5py.File(h5path, "w") as f:
        d = f.create_dataset("d", data=np.arange(10))
        f.create_dataset("regions", data=[d.regionref[2:5]], dtype=h5py.regionref_dtype)
    with pytest.raises(UnsupportedReference, match="dataset /regions holds region references"):
        hdf5_to_rfs(h5path)


def test_region_reference_in_attribute(h5path: Path) -> None:
    with h5py.File(h5path, "w") as f:
        d = f.create_dataset("d", data=np.arange(10))
        d.attrs["region"] = d.regionref[1:3]
    with pytest.raises(UnsupportedReference, match="region reference"):
        hdf5_to_rfs(h5path)


def test_region_reference_in_compound(h5path: Path) -> None:
    with h5py.File(h5path, "w") as f:
        d = f.create_dataset("d", data=np.arange(10))
        dt = np.dtype([("x", "i4"), ("r", h5py.regionref_dtype)])
        f.create_dataset("c", data=np.array([(1, d.regionref[0:2])], dtype=dt))
    with pytest.raises(UnsupportedReference, match="compound dataset /c"):
        hdf5_to_rfs(h5path)


@pytest.mark.parametrize(
    ("setup", "match"),
    [
        (lambda f: f.attrs.__setitem__("x", "NaN"), "cannot tell apart"),
        (lambda f: f.attrs.__setitem__("_SCALAR", 1), "reserves"),
        (lambda f: f.create_dataset("e", data=h5py.Empty("f")), "null dataspace"),
        (lambda f: f.create_dataset("o", data=np.void(b"\x00\x01")), "opaque"),
        (
            lambda f: f.create_dataset(
                "vl",
                data=np.array([np.arange(2), np.arange(3)], dtype=object),
                dtype=h5py.vlen_dtype("i4"),
            ),
            "variable-length",
        ),
    ],
)
def test_unsupported_types(h5path: Path, setup: object, match: str) -> None:
    with h5py.File(h5path, "w") as f:
        setup(f)  # type: ignore[operator]
    with pytest.raises(UnsupportedDatatype, match=match):
        hdf5_to_rfs(h5path)


def test_cli_errors_are_one_line_with_exit_code_2(h5path: Path, tmp_path: Path) -> None:
    with h5py.File(h5path, "w") as f:
        d = f.create_dataset("d", data=np.arange(10))
        f.create_dataset("regions", data=[d.regionref[2:5]], dtype=h5py.regionref_dtype)
    result = CliRunner().invoke(app, ["convert", str(h5path), str(tmp_path / "o.lindi.json")])
    assert result.exit_code == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1
    assert lines[0].startswith("zarrchive lindi: dataset /regions holds region references")
    assert "Traceback" not in result.output
    missing = CliRunner().invoke(app, ["show", str(tmp_path / "missing.lindi.json")])
    assert missing.exit_code == 2
    assert missing.stderr.strip().endswith("no such file or directory")


def test_zarr_directory_refuses_names_the_archive_cannot_hold(h5path: Path, tmp_path: Path) -> None:
    from zarrchive.errors import InvalidLindiFile
    from zarrchive.lindi import convert_to_zarr

    with h5py.File(h5path, "w") as f:
        f.create_dataset("back\\slash", data=[1])
    with pytest.raises(InvalidLindiFile, match=r"back\\\\slash.*rename the HDF5 object"):
        convert_to_zarr(h5path, tmp_path / "z")


def test_virtual_and_external_storage_datasets(h5path: Path, tmp_path: Path) -> None:
    source = tmp_path / "source.h5"
    with h5py.File(source, "w") as f:
        f.create_dataset("x", data=np.arange(2000.0))
    with h5py.File(h5path, "w") as f:
        layout = h5py.VirtualLayout(shape=(2000,), dtype="f8")
        layout[:] = h5py.VirtualSource(str(source), "x", shape=(2000,))
        f.create_virtual_dataset("virtual", layout)
    with pytest.raises(PointsOutsideFile, match="/virtual is a virtual dataset"):
        hdf5_to_rfs(h5path)
    raw = tmp_path / "raw.bin"
    raw.write_bytes(np.arange(2000.0).tobytes())
    with h5py.File(h5path, "w") as f:
        f.create_dataset(
            "ext", shape=(2000,), dtype="<f8", external=[(str(raw), 0, h5py.h5f.UNLIMITED)]
        )
    with pytest.raises(PointsOutsideFile, match="/ext keeps its data in external files"):
        hdf5_to_rfs(h5path)

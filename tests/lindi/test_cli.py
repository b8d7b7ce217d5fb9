"""``zarrchive lindi convert | to-zarr | show``."""

from __future__ import annotations

import json
from pathlib import Path

import h5py
import numpy as np
from typer.testing import CliRunner

from zarrchive.cli.lindi import app
from zarrchive.lindi import File


def _sample(path: Path) -> None:
    with h5py.File(path, "w") as f:
        f.attrs["object_id"] = "root"
        g = f.create_group("acquisition")
        d = g.create_dataset(
            "data", data=np.arange(2000, dtype="<f4").reshape(100, 20), chunks=(10, 10)
        )
        f.create_dataset("name", data="session")
        f["link"] = h5py.SoftLink("/acquisition/data")
        f.create_dataset("refs", data=[d.ref], dtype=h5py.ref_dtype)
        dt = np.dtype([("x", "<i4"), ("y", "<f8")])
        f.create_dataset("table", data=np.zeros(2, dtype=dt))


def test_convert_with_threshold_and_show(tmp_path: Path) -> None:
    h5 = tmp_path / "s.h5"
    _sample(h5)
    out = tmp_path / "s.lindi.json"
    runner = CliRunner()
    result = runner.invoke(
        app, ["convert", str(h5), str(out), "--external-array-link-threshold", "5"]
    )
    assert result.exit_code == 0, result.output
    assert result.stdout.strip() == str(out)
    rfs = json.loads(out.read_text())
    assert rfs["refs"]["acquisition/data/.zattrs"] == {
        "_EXTERNAL_ARRAY_LINK": {
            "link_type": "hdf5_dataset",
            "url": str(h5),
            "name": "acquisition/data",
        }
    }
    assert rfs["generationMetadata"]["generatedBy"] == "zarrchive"
    assert rfs["generationMetadata"]["externalArrayLinkThreshold"] == 5
    show = runner.invoke(app, ["show", str(out)])
    assert show.exit_code == 0, show.output
    assert show.stdout.splitlines() == [
        "/",
        "  acquisition/",
        f"    data  (100, 20)  float32  [_EXTERNAL_ARRAY_LINK {h5}:acquisition/data]",
        "  link -> /acquisition/data  [_SOFT_LINK]",
        "  name  scalar  string  [_SCALAR]",
        "  refs  (1,)  reference",
        "  table  (2,)  compound(x, y)  [_COMPOUND_DTYPE]",
    ]
    # -1 disables external array links
    result = runner.invoke(
        app, ["convert", str(h5), str(out), "--external-array-link-threshold", "-1"]
    )
    assert result.exit_code == 0
    assert "_EXTERNAL_ARRAY_LINK" not in out.read_text()


def test_to_zarr_then_show(tmp_path: Path) -> None:
    h5 = tmp_path / "s.h5"
    _sample(h5)
    runner = CliRunner()
    result = runner.invoke(app, ["to-zarr", str(h5), str(tmp_path / "z")])
    assert result.exit_code == 0, result.output
    assert (tmp_path / "z" / "acquisition" / "data" / "9.1").is_file()
    assert json.loads((tmp_path / "z" / "name" / ".zattrs").read_text()) == {"_SCALAR": True}
    with File(tmp_path / "z") as f:
        np.testing.assert_array_equal(f["link"][:], np.arange(2000, dtype="<f4").reshape(100, 20))
    show = runner.invoke(app, ["show", str(tmp_path / "z")])
    assert "    data  (100, 20)  float32" in show.stdout.splitlines()
    again = runner.invoke(app, ["to-zarr", str(h5), str(tmp_path / "z")])
    assert again.exit_code == 2 and "not empty" in again.stderr


def test_to_zarr_from_a_lindi_json_file(tmp_path: Path) -> None:
    h5 = tmp_path / "s.h5"
    _sample(h5)
    runner = CliRunner()
    out = tmp_path / "s.lindi.json"
    assert (
        runner.invoke(
            app, ["convert", str(h5), str(out), "--external-array-link-threshold", "-1"]
        ).exit_code
        == 0
    )
    result = runner.invoke(app, ["to-zarr", str(out), str(tmp_path / "z")])
    assert result.exit_code == 0, result.output
    with File(tmp_path / "z") as f, h5py.File(h5) as h:
        np.testing.assert_array_equal(f["acquisition/data"][:], h["acquisition/data"][:])
    linked = tmp_path / "linked.lindi.json"
    assert (
        runner.invoke(
            app, ["convert", str(h5), str(linked), "--external-array-link-threshold", "5"]
        ).exit_code
        == 0
    )
    refused = runner.invoke(app, ["to-zarr", str(linked), str(tmp_path / "z2")])
    assert refused.exit_code == 2
    assert "external array link" in refused.stderr

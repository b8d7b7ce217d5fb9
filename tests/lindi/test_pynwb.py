"""pynwb reads an NWB file through our reader as it does through h5py."""

from __future__ import annotations

import warnings
from datetime import UTC, datetime
from pathlib import Path

import h5py
import numpy as np
import pytest

from zarrchive.lindi import File, convert_to_lindi_json

pynwb = pytest.importorskip("pynwb")


def _write_nwb(path: Path) -> None:
    from pynwb import NWBHDF5IO, NWBFile, TimeSeries
    from pynwb.ecephys import ElectricalSeries

    nwb = NWBFile(
        session_description="a test session",
        identifier="id-123",
        session_start_time=datetime(2024, 1, 2, 3, 4, 5, tzinfo=UTC),
    )
    device = nwb.create_device(name="probe", description="a probe")
    group = nwb.create_electrode_group(
        name="shank0", description="shank", location="CA1", device=device
    )
    for i in range(4):
        nwb.add_electrode(
            x=float(i), y=0.0, z=0.0, imp=1.0, location="CA1", filtering="none", group=group
        )
    region = nwb.create_electrode_table_region(region=[0, 2, 3], description="some electrodes")
    data = np.arange(3000, dtype="<i2").reshape(1000, 3)
    nwb.add_acquisition(
        ElectricalSeries(name="ephys", data=data, electrodes=region, rate=1000.0, starting_time=0.5)
    )
    ts = TimeSeries(
        name="speed", data=np.linspace(0, 1, 50), unit="m/s", timestamps=np.arange(50) / 10.0
    )
    nwb.add_acquisition(ts)
    # a soft link: the second series shares the timestamps of the first
    nwb.add_acquisition(TimeSeries(name="accel", data=np.ones(50), unit="m/s2", timestamps=ts))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with NWBHDF5IO(str(path), "w") as io:
            io.write(nwb)


def _summary(nwb: object) -> dict[str, object]:
    acq = nwb.acquisition  # type: ignore[attr-defined]
    electrodes = nwb.electrodes  # type: ignore[attr-defined]
    ephys = acq["ephys"]
    return {
        "description": nwb.session_description,  # type: ignore[attr-defined]
        "identifier": nwb.identifier,  # type: ignore[attr-defined]
        "start": nwb.session_start_time,  # type: ignore[attr-defined]
        "ephys": ephys.data[:].tolist(),
        "ephys_slice": ephys.data[10:20, 1].tolist(),
        "rate": ephys.rate,
        "starting_time": ephys.starting_time,
        "region": ephys.electrodes.data[:].tolist(),
        "region_table": ephys.electrodes.table.name,
        "x": electrodes["x"][:].tolist(),
        "locations": list(electrodes["location"][:]),
        "groups": [g.name for g in electrodes["group"][:]],
        "group_device": electrodes["group"][0].device.name,
        "speed": acq["speed"].data[:].tolist(),
        "speed_ts": acq["speed"].timestamps[:].tolist(),
        "accel_ts": acq["accel"].timestamps[:].tolist(),
        "df": electrodes.to_dataframe()[["x", "location"]].to_dict(),
    }


def test_pynwb_reads_through_our_reader(tmp_path: Path) -> None:
    from pynwb import NWBHDF5IO

    path = tmp_path / "f.nwb"
    _write_nwb(path)
    lindi_path = convert_to_lindi_json(path, tmp_path / "f.lindi.json")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with NWBHDF5IO(str(path), "r") as io:
            expected = _summary(io.read())
        with File(lindi_path) as f:
            # the file has what the issue asks for: references, a scalar string, a soft link
            assert (
                f["general/extracellular_ephys/shank0"].get("device", getlink=True).path
                == "/general/devices/probe"
            )
            assert f["general/extracellular_ephys/electrodes/group"].dtype == h5py.ref_dtype
            assert f["session_description"].shape == ()
            assert (
                f["acquisition/accel"].get("timestamps", getlink=True).path
                == "/acquisition/speed/timestamps"
            )
            with NWBHDF5IO(file=f, mode="r") as io:
                got = _summary(io.read())
    assert got == expected
    assert got["groups"] == ["shank0"] * 4
    assert got["description"] == "a test session"
    assert np.array(got["ephys"]).shape == (1000, 3)


def test_pynwb_reads_a_file_lindi_wrote_through_our_reader(
    tmp_path: Path, lindi_python: str
) -> None:
    from pynwb import NWBHDF5IO

    from tests.helpers.lindi import run_oracle

    path = tmp_path / "f.nwb"
    _write_nwb(path)
    theirs = tmp_path / "theirs.lindi.json"
    script = r"""
import sys, lindi
f = lindi.LindiH5pyFile.from_hdf5_file(sys.argv[1], url=sys.argv[1])
f.write_lindi_file(sys.argv[2])
print("{}")
"""
    run_oracle(lindi_python, script, path, theirs, cwd=tmp_path)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with NWBHDF5IO(str(path), "r") as io:
            expected = _summary(io.read())
        with File(theirs) as f, NWBHDF5IO(file=f, mode="r") as io:
            assert _summary(io.read()) == expected

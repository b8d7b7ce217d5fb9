"""NWB files with the shapes a lab writes, made with pynwb in the test's own environment:
an electrical series with chunked, gzip-compressed data, a units table with ragged columns,
object references (the electrodes' groups), a processing module, soft links (shared
timestamps), scalars, and a trials table whose ``timeseries`` column is a compound dataset
holding object references."""

from __future__ import annotations

import warnings
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import h5py
import numpy as np


def write_lab_nwb(path: Path, *, seed: int = 0, samples: int = 2000) -> Path:
    """An NWB file at *path*, its data from *seed* (a different file per seed)."""
    from hdmf.backends.hdf5.h5_utils import H5DataIO
    from pynwb import NWBHDF5IO, NWBFile, ProcessingModule, TimeSeries
    from pynwb.ecephys import ElectricalSeries

    rng = np.random.default_rng(seed)
    nwb = NWBFile(
        session_description=f"a lab session {seed}",
        identifier=f"lab-{seed}",
        session_start_time=datetime(2024, 1, 2, 3, 4, 5, tzinfo=UTC),
    )
    device = nwb.create_device(name="probe", description="a probe")
    group = nwb.create_electrode_group(
        name="shank0", description="shank", location="CA1", device=device
    )
    for i in range(8):
        nwb.add_electrode(
            x=float(i), y=0.0, z=0.0, imp=1.0, location="CA1", filtering="none", group=group
        )
    region = nwb.create_electrode_table_region(region=list(range(8)), description="all")
    data = rng.integers(-1000, 1000, size=(samples, 8), dtype="<i2")
    nwb.add_acquisition(
        ElectricalSeries(
            name="ephys",
            data=H5DataIO(data, chunks=(250, 8), compression="gzip", compression_opts=4),
            electrodes=region,
            rate=1000.0,
            starting_time=0.5,
        )
    )
    nwb.add_unit_column(name="quality", description="sorting quality")
    for unit in range(5):
        spikes = np.sort(rng.uniform(0, 2, size=int(rng.integers(1, 40))))
        nwb.add_unit(spike_times=spikes, quality=float(unit) / 5, electrodes=[unit])
    behavior = ProcessingModule(name="behavior", description="behaviour")
    nwb.add_processing_module(behavior)
    position = TimeSeries(
        name="position",
        data=rng.normal(size=(400, 2)),
        unit="cm",
        timestamps=np.arange(400) / 100.0,
    )
    behavior.add(position)
    # a soft link: this series shares the timestamps of the position
    behavior.add(
        TimeSeries(name="speed", data=rng.normal(size=400), unit="cm/s", timestamps=position)
    )
    # trials: the timeseries column is compound (idx_start, count, an object reference)
    for trial in range(3):
        nwb.add_trial(start_time=trial * 1.0, stop_time=trial + 0.5, timeseries=[position])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with NWBHDF5IO(str(path), "w") as io:
            io.write(nwb)
    return path


def datasets(f: Any) -> dict[str, Any]:
    """Every dataset of an h5py-like file by path (soft links followed), read whole."""
    out: dict[str, Any] = {}

    def walk(group: Any, prefix: str) -> None:
        for name in sorted(group.keys()):
            obj = group[name]
            path = f"{prefix}/{name}"
            if isinstance(obj, h5py.Dataset) or hasattr(obj, "dtype"):
                out[path] = obj[()]
            else:
                walk(obj, path)

    walk(f, "")
    return out


#: What a reader gets from an NWB file through pynwb (values as JSON-able lists), as source
#: text: the same code runs here and in an oracle's environment (lindi 0.4.6 + pynwb).
NWB_SUMMARY = r"""
def nwb_summary(nwb, compound=True):
    units = nwb.units
    ephys = nwb.acquisition["ephys"]
    behavior = nwb.processing["behavior"]
    summary = {
        "id": nwb.identifier,
        "ephys": ephys.data[:].tolist(),
        "slice": ephys.data[100:120, 3].tolist(),
        "rate": ephys.rate,
        "electrodes": ephys.electrodes.data[:].tolist(),
        "groups": [g.name for g in nwb.electrodes["group"][:]],
        "spikes": [[float(t) for t in units["spike_times"][i]] for i in range(len(units))],
        "quality": units["quality"][:].tolist(),
        "unit_electrodes": [[int(e) for e in units["electrodes"][i].index] for i in range(len(units))],
        "position": behavior["position"].data[:].tolist(),
        "speed_ts": behavior["speed"].timestamps[:].tolist(),
        "trials": {
            column: [float(x) for x in nwb.trials[column][:]] for column in ("start_time", "stop_time")
        },
    }
    if compound:  # a compound column (lindi 0.4.6 selects compound datasets by field only)
        summary["trial_series"] = [
            [[int(r.idx_start), int(r.count), r.timeseries.name] for r in row]
            for row in nwb.trials["timeseries"][:]
        ]
    return summary
"""

_namespace: dict[str, Any] = {}
exec(NWB_SUMMARY, _namespace)
nwb_summary = _namespace["nwb_summary"]

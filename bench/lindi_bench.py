"""LINDI benchmark: conversion time (ours vs lindi 0.4.6) and slice reads (ours vs h5py).

(The archive's LINDI files, opened with pynwb through the API vs h5py over range reads of
the blob, are measured by ``bench/lindi_archive_bench.py``.)

The NWB file is generated in a temporary directory: a few hundred datasets
(TimeSeries with data, timestamps and attributes, an electrodes table) and a
chunked 2-D ElectricalSeries of about 10^4 chunks.  Run from the repository root:

    .venv/bin/python bench/lindi_bench.py [--lindi-python .venv-lindi/bin/python] [--repeat 5] [--read-repeat 25]

Reads (500 chunks of the 2-D array) are timed local and over a loopback HTTP
server with range requests, the cases of a group taking turns; every run opens a
new file (empty caches, not timed) as h5py's file is opened before timing.
"linked" is the default conversion (the 10^4-chunk array is an
``_EXTERNAL_ARRAY_LINK``, read through h5py), "refs" the conversion with
``external_array_link_threshold=None`` (our chunk reader).  The figures are
medians, in milliseconds.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import warnings
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from functools import partial
from pathlib import Path
from typing import Any

import h5py
import numpy as np

ROWS, COLS, CHUNK_ROWS = 200_000, 50, 1000  # 200 x 50 = 10^4 chunks
SLICE = (slice(50_000, 60_000), slice(0, 50))  # 10 x 50 = 500 chunks


def make_nwb(path: Path, n_series: int = 150) -> None:
    from hdmf.backends.hdf5.h5_utils import H5DataIO
    from pynwb import NWBHDF5IO, NWBFile, TimeSeries
    from pynwb.ecephys import ElectricalSeries

    nwb = NWBFile(
        session_description="LINDI benchmark",
        identifier="bench",
        session_start_time=datetime(2024, 1, 1, tzinfo=UTC),
    )
    device = nwb.create_device(name="probe")
    group = nwb.create_electrode_group(name="shank", description="s", location="CA1", device=device)
    for i in range(COLS):
        nwb.add_electrode(
            x=float(i), y=0.0, z=0.0, imp=1.0, location="CA1", filtering="none", group=group
        )
    rng = np.random.default_rng(0)
    data = (rng.normal(size=(ROWS, COLS)) * 100).astype("<i2")
    region = nwb.create_electrode_table_region(region=list(range(COLS)), description="all")
    nwb.add_acquisition(
        ElectricalSeries(
            name="ephys",
            data=H5DataIO(data, chunks=(CHUNK_ROWS, 1), compression="gzip"),
            electrodes=region,
            rate=30000.0,
        )
    )
    for i in range(n_series):
        nwb.add_acquisition(
            TimeSeries(
                name=f"series{i:03d}",
                data=rng.normal(size=2000),
                unit="a.u.",
                timestamps=np.arange(2000) / 100.0,
                description=f"series {i}",
            )
        )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with NWBHDF5IO(str(path), "w") as io:
            io.write(nwb)


def interleaved_ms(
    cases: dict[str, Callable[[], tuple[Any, bool]]], fn: Callable[[Any], Any], repeat: int
) -> dict[str, float]:
    """Median wall time of ``fn(obj)`` per case, the cases taking turns.

    Each case makes ``(obj, close_after)`` (not timed).
    """
    times: dict[str, list[float]] = {name: [] for name in cases}
    for _ in range(repeat):
        for name, setup in cases.items():
            obj, close = setup()
            start = time.perf_counter()
            fn(obj)
            times[name].append((time.perf_counter() - start) * 1000)
            if close:
                obj.close()
    return {name: statistics.median(values) for name, values in times.items()}


def median_ms(fn: Callable[..., Any], repeat: int, setup: Callable[[], Any] | None = None) -> float:
    """Median wall time of ``fn(setup())`` (setup not timed) over *repeat* runs."""
    times = []
    for _ in range(repeat):
        arg = setup() if setup is not None else None
        start = time.perf_counter()
        fn() if setup is None else fn(arg)
        times.append((time.perf_counter() - start) * 1000)
        if hasattr(arg, "close"):
            arg.close()
    return statistics.median(times)


_LINDI_CONVERT = r"""
import sys, time, json
import lindi
times = []
for _ in range(int(sys.argv[3])):
    start = time.perf_counter()
    f = lindi.LindiH5pyFile.from_hdf5_file(sys.argv[1], url=sys.argv[1])
    f.write_lindi_file(sys.argv[2])
    f.close()
    times.append((time.perf_counter() - start) * 1000)
times.sort()
print(json.dumps(times[len(times) // 2]))
"""


SERVER_SCRIPT = Path(__file__).resolve().parents[1] / "tests" / "lindi" / "range_server.py"


@contextlib.contextmanager
def http_server(root: Path) -> Iterator[str]:
    """A loopback HTTP server with ranges, in its own process (no GIL sharing with the reader)."""
    proc = subprocess.Popen(
        [sys.executable, str(SERVER_SCRIPT), str(root), str(root / "requests.log")],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        yield f"http://127.0.0.1:{int(proc.stdout.readline())}"
    finally:
        proc.terminate()
        proc.wait(10)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--lindi-python", default=os.environ.get("ZARRCHIVE_LINDI_PYTHON", ".venv-lindi/bin/python")
    )
    parser.add_argument("--repeat", type=int, default=5, help="runs of each conversion")
    parser.add_argument("--read-repeat", type=int, default=25, help="runs of each slice read")
    args = parser.parse_args()

    import remfile

    from zarrchive.lindi import ConvertOptions, File, hdf5_to_rfs, write_lindi_json

    results: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="lindi-bench-") as tmp:
        root = Path(tmp)
        nwb = root / "bench.nwb"
        make_nwb(nwb)
        with h5py.File(nwb) as f:
            datasets: list[str] = []
            f.visititems(lambda n, o: datasets.append(n) if isinstance(o, h5py.Dataset) else None)
            ds = f["acquisition/ephys/data"]
            n_chunks = int(np.prod([-(-s // c) for s, c in zip(ds.shape, ds.chunks, strict=True)]))
        results["file"] = {
            "bytes": nwb.stat().st_size,
            "datasets": len(datasets),
            "ephys_chunks": n_chunks,
        }

        # -- conversion ----------------------------------------------------------------
        def ours_convert() -> None:
            write_lindi_json(hdf5_to_rfs(nwb), root / "ours.lindi.json")

        results["convert_ours_ms"] = median_ms(ours_convert, args.repeat)
        if Path(args.lindi_python).exists():
            proc = subprocess.run(
                [
                    args.lindi_python,
                    "-c",
                    _LINDI_CONVERT,
                    str(nwb),
                    str(root / "lindi.lindi.json"),
                    str(args.repeat),
                ],
                capture_output=True,
                text=True,
                check=True,
            )
            results["convert_lindi_ms"] = json.loads(proc.stdout.strip().splitlines()[-1])
        rfs_linked = hdf5_to_rfs(nwb)  # default: the 10^4-chunk array is an external array link
        rfs_refs = hdf5_to_rfs(nwb, options=ConvertOptions(external_array_link_threshold=None))
        results["convert_ours_all_refs_ms"] = median_ms(
            lambda: hdf5_to_rfs(nwb, options=ConvertOptions(external_array_link_threshold=None)),
            args.repeat,
        )

        # -- slice reads: the cases of a group run interleaved, so that the load of the
        # shared machine weighs on each alike; a new File (or remfile) per run: caches start
        # empty (the OS page cache is warm for all)
        def read(f: Any) -> np.ndarray:
            return f["acquisition/ephys/data"][SLICE]  # type: ignore[no-any-return]

        def opened(rfs: dict[str, Any]) -> tuple[Any, bool]:
            """A new File; an external array link's HDF5 file is opened (not timed), as h5py's is."""
            f = File(rfs)
            link = f["acquisition/ephys/data"].external_array_link
            if link is not None:
                f.external_dataset(*link)
            return f, True

        with h5py.File(nwb) as h:
            expected = read(h)
            for rfs in (rfs_linked, rfs_refs):
                with File(rfs) as f:
                    assert np.array_equal(read(f), expected)
            results.update(
                interleaved_ms(
                    {
                        "read_local_h5py_ms": lambda: (h, False),
                        "read_local_ours_linked_ms": partial(opened, rfs_linked),
                        "read_local_ours_refs_ms": partial(opened, rfs_refs),
                    },
                    read,
                    args.read_repeat,
                )
            )

        # -- over HTTP ----------------------------------------------------------------------------
        with http_server(root) as base:
            url = f"{base}/bench.nwb"
            remote_linked = hdf5_to_rfs(url)
            remote_refs = hdf5_to_rfs(
                url, options=ConvertOptions(external_array_link_threshold=None)
            )

            def open_remote() -> tuple[Any, bool]:
                return h5py.File(remfile.File(url, verbose=False), "r"), True

            for opener in (
                open_remote,
                lambda: (File(remote_linked), True),
                lambda: (File(remote_refs), True),
            ):
                f, _ = opener()
                assert np.array_equal(read(f), expected)
                f.close()
            results.update(
                interleaved_ms(
                    {
                        "read_http_h5py_remfile_ms": open_remote,
                        "read_http_ours_linked_ms": partial(opened, remote_linked),
                        "read_http_ours_refs_ms": partial(opened, remote_refs),
                    },
                    read,
                    args.read_repeat,
                )
            )

    conv_ratio = (
        results.get("convert_lindi_ms") and results["convert_ours_ms"] / results["convert_lindi_ms"]
    )
    results["ratio_convert_ours_over_lindi"] = conv_ratio
    results["ratio_read_local_ours_linked_over_h5py"] = (
        results["read_local_ours_linked_ms"] / results["read_local_h5py_ms"]
    )
    results["ratio_read_local_ours_refs_over_h5py"] = (
        results["read_local_ours_refs_ms"] / results["read_local_h5py_ms"]
    )
    results["ratio_read_http_ours_refs_over_h5py_remfile"] = (
        results["read_http_ours_refs_ms"] / results["read_http_h5py_remfile_ms"]
    )
    json.dump(results, sys.stdout, indent=2)
    print()


if __name__ == "__main__":
    main()

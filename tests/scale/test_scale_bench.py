"""``bench/scale_bench.py`` at 1,000 files (``make test``'s version of the scale run;
``ZARRCHIVE_SCALE_FILES`` sets another size): every figure is produced, for a Zarr that really
holds the files.  The full run is in
``bench/RESULTS.md``; this only proves the script measures what it says."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]
FILES = int(os.environ.get("ZARRCHIVE_SCALE_FILES", "1000"))
PHASES = [
    "write (open, PUT, complete)",
    "applied (from the last complete until at rest)",
    "manifest (from the last complete until listed)",
    "ListObjectVersions alone (one paginator)",
    "ListObjectVersions, prefixes in parallel",
    "listing at the root (cold)",
    "listing at the root (warm)",
    "listing at the leaf (cold)",
    "listing at the leaf (warm)",
    "zarrchive admin fsck",
    "zarrchive upload --no-cache (no-op)",
    "zarrchive upload (no-op, first run: empty cache)",
    "zarrchive upload (no-op, cached)",
    "zarrchive verify --no-cache",
    "zarrchive verify (cached)",
    "500-file batch: applied",
    "500-file batch: its manifest after at rest",
    "another 500-file batch: applied",
    "zarrchive publish (snapshot mode, its manifest included)",
]


def test_the_scale_bench_produces_every_figure(tmp_path: Path) -> None:
    out = tmp_path / "figures.json"
    env = {k: v for k, v in os.environ.items() if not k.startswith("ZARRCHIVE_")}
    result = subprocess.run(
        [
            sys.executable,
            str(REPO / "bench" / "scale_bench.py"),
            "--files",
            str(FILES),
            "--file-size",
            "64",
            "--floor-files",
            "100",
            "--json",
            str(out),
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    figures = json.loads(out.read_text())
    assert figures["files"] == FILES
    phases = {p["name"]: p for p in figures["phases"]}
    for name in PHASES:
        assert name in phases, (name, sorted(phases))
    assert any(name.startswith("zarrchive download (subtree arr/0") for name in phases)
    for phase in figures["phases"]:
        assert phase["seconds"] > 0, phase
        assert phase["server_peak_mib"] > 20, phase  # a real process's resident memory
        assert phase["client_peak_mib"] > 10, phase
    assert f"{FILES} entries" in phases["manifest (from the last complete until listed)"]["detail"]
    assert phases["zarrchive admin fsck"]["detail"].startswith("ok ")
    assert (
        "matches the archive"
        in phases[next(n for n in phases if n.startswith("zarrchive download"))]["detail"]
    )
    publish = phases["zarrchive publish (snapshot mode, its manifest included)"]
    assert "published dandiset" in publish["detail"]
    assert (
        f"{FILES + 250} entries" in phases["500-file batch: its manifest after at rest"]["detail"]
    )
    # the write's segments, each beside a floor sample taken right after it
    segments = figures["segments"]
    assert sum(s["files"] for s in segments) == FILES
    assert all(s["files_per_s"] > 0 and s["floor_files_per_s"] > 0 for s in segments)
    # complete's latency by decade of the Zarr's size: every batch counted once
    rows = figures["complete"]
    batches = -(-FILES // figures["batch_files"])
    assert sum(r["batches"] for r in rows) == batches
    assert all(0 < r["p50"] <= r["p99"] <= r["max"] for r in rows)

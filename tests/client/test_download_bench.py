"""``bench/download_bench.py --smoke`` (``make test``'s version of the download bench, for
correctness only: no figure is judged): every copy it makes (the boto3 floor's, the
Downloader's, ``zarrchive download``'s) equals the source, for small files and for a file
read in ranged parts, and a no-op download downloads nothing.  The figures are in
``bench/RESULTS.md``."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]


def test_the_download_bench_runs_and_its_copies_are_exact() -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ZARRCHIVE_")}
    result = subprocess.run(
        [sys.executable, str(REPO / "bench" / "download_bench.py"), "--smoke"],
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    for row in (
        "boto3 floor",
        "zarrchive Downloader.download",
        "zarrchive download (process)",
        "again, settled (stat only)",
    ):
        assert result.stdout.count(row) >= 1, (row, result.stdout)
    assert result.stdout.count("zarrchive download (process)") == 2  # both shapes

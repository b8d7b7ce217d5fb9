"""NWB files made with pynwb (in the dandi venv): valid for ``dandi upload``'s checks
(subject with species, sex and age; session id; experimenter), of a chosen size."""

from __future__ import annotations

from pathlib import Path

from tests.helpers.dandi import run_python

MAKE_NWB = """
import sys
from datetime import datetime, timezone
import numpy as np
from pynwb import NWBFile, NWBHDF5IO, TimeSeries
from pynwb.file import Subject
path, nbytes, seed = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
nwb = NWBFile(
    session_description="a test session", identifier=f"zarrchive-test-{seed}",
    session_start_time=datetime(2024, 1, 2, 3, 4, 5, tzinfo=timezone.utc),
    session_id=f"ses{seed}", institution="zarrchive tests", lab="tests",
    experimenter=["Doe, Jane"],
)
nwb.subject = Subject(
    subject_id="mouse1", species="Mus musculus", sex="F", age="P60D", description="a mouse"
)
data = np.random.default_rng(seed).integers(0, 255, size=nbytes, dtype=np.uint8)
nwb.add_acquisition(
    TimeSeries(name="noise", data=data, unit="V", rate=1000.0, description="random bytes")
)
with NWBHDF5IO(path, "w") as io:
    io.write(nwb)
"""


def make_nwb(path: Path, data_bytes: int, seed: int) -> Path:
    """An NWB file at *path* holding *data_bytes* random bytes (the file is a little larger)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    run_python(MAKE_NWB, str(path), str(data_bytes), str(seed))
    return path

"""Write an NWB file of random data with pynwb: ``python make_nwb.py PATH DATA_BYTES SEED``.

Run by the dandi venv's Python (pynwb lives there), from ``tests/helpers/nwb.py`` and
``bench/dandi_bench.py``; valid for ``dandi upload``'s checks (subject with species, sex and
age; session id; experimenter).
"""

import sys
from datetime import UTC, datetime

import numpy as np
from pynwb import NWBHDF5IO, NWBFile, TimeSeries
from pynwb.file import Subject

path, nbytes, seed = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
nwb = NWBFile(
    session_description="a test session",
    identifier=f"zarrchive-test-{seed}",
    session_start_time=datetime(2024, 1, 2, 3, 4, 5, tzinfo=UTC),
    session_id=f"ses{seed}",
    institution="zarrchive tests",
    lab="tests",
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

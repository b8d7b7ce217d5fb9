"""Write a small NWB file of random data with pynwb, valid for ``dandi upload``'s checks
(a subject with species, sex and age; a session id; an experimenter):

    .venv-dandi/bin/python examples/make_nwb.py PATH [DATA_BYTES [SEED]]

pynwb is in the dandi venv (``make .venv-dandi``), not in the archive's own.  DATA_BYTES
(default 1000) random bytes make the file's one time series, so the file is a little
larger; SEED (default 0) chooses them and the file's identifier.  Also used by the tests
(``tests/helpers/nwb.py``) and ``bench/dandi_bench.py``.
"""

import sys
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
from pynwb import NWBHDF5IO, NWBFile, TimeSeries
from pynwb.file import Subject


def main(argv: list[str]) -> None:
    if not 1 <= len(argv) <= 3:
        sys.exit(f"usage: {Path(__file__).name} PATH [DATA_BYTES [SEED]]")
    path = Path(argv[0])
    nbytes = int(argv[1]) if len(argv) > 1 else 1000
    seed = int(argv[2]) if len(argv) > 2 else 0
    nwb = NWBFile(
        session_description="an example session",
        identifier=f"zarrchive-example-{seed}",
        session_start_time=datetime(2024, 1, 2, 3, 4, 5, tzinfo=UTC),
        session_id=f"ses{seed}",
        institution="zarrchive examples",
        lab="examples",
        experimenter=["Doe, Jane"],
    )
    nwb.subject = Subject(
        subject_id="mouse1", species="Mus musculus", sex="F", age="P60D", description="a mouse"
    )
    data = np.random.default_rng(seed).integers(0, 255, size=nbytes, dtype=np.uint8)
    nwb.add_acquisition(
        TimeSeries(name="noise", data=data, unit="V", rate=1000.0, description="random bytes")
    )
    path.parent.mkdir(parents=True, exist_ok=True)
    with NWBHDF5IO(str(path), "w") as io:
        io.write(nwb)
    print(path)


if __name__ == "__main__":
    main(sys.argv[1:])

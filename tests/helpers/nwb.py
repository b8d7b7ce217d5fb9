"""NWB files made with pynwb (in the dandi venv): valid for ``dandi upload``'s checks
(subject with species, sex and age; session id; experimenter), of a chosen size."""

from __future__ import annotations

from pathlib import Path

from tests.helpers.dandi import run_python

#: The example script a user runs too (see README, "DANDI's client").
SCRIPT = Path(__file__).resolve().parents[2] / "examples" / "make_nwb.py"


def make_nwb(path: Path, data_bytes: int, seed: int) -> Path:
    """An NWB file at *path* holding *data_bytes* random bytes (the file is a little larger)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    run_python(SCRIPT.read_text(), str(path), str(data_bytes), str(seed))
    return path

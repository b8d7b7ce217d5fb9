"""Job functions that make an apply job and a manifest job of one Zarr overlap at a chosen
point, for RQ workers in other processes (``tests.helpers.overlap_jobs:NAME``).

They run the archive's real jobs, pausing where a test says: the test and the jobs meet
through marker files in a directory (*signals*).
"""

from __future__ import annotations

import time
from pathlib import Path

#: How long a job waits for a marker before it goes on anyway (the test then fails on its own):
#: longer than the test's own waits on a loaded machine (it writes the last marker at its end).
MARKER_WAIT = 600.0


def wait_for(path: Path, timeout: float = MARKER_WAIT) -> bool:
    """Wait until *path* exists; False on timeout."""
    deadline = time.monotonic() + timeout
    while not path.exists():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


def apply_pausing_after_claim(zarr_id: str, signals: str, until: str) -> None:
    """The apply job, pausing once it has claimed the batch (before copying it into place):
    it writes ``apply-claimed`` and waits for the marker *until*; at the end ``apply-done``."""
    from zarrchive.services.zarr_engine.uploads import apply as engine

    copy = engine._copy_into_place

    def paused(*args: object, **kwargs: object) -> None:
        (Path(signals) / "apply-claimed").touch()
        wait_for(Path(signals) / until)
        copy(*args, **kwargs)  # type: ignore[arg-type]

    engine._copy_into_place = paused  # this process is a work horse: gone after the job
    try:
        engine.apply_pending_job(zarr_id)
    finally:
        (Path(signals) / "apply-done").touch()


def manifest_outliving_the_apply(zarr_id: str, signals: str) -> None:
    """The manifest job (while the apply holds its claim, it finds the Zarr busy), then
    holding its key until the test writes ``release-manifest`` (a slow listing, say): the
    apply ends and queues the next manifest job of the Zarr meanwhile."""
    from zarrchive.services.zarr_engine.manifests import generate_manifest_job

    try:
        generate_manifest_job(zarr_id)
    finally:
        (Path(signals) / "manifest-checked").touch()
    wait_for(Path(signals) / "release-manifest")

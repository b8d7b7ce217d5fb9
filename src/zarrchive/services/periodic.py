"""The archive's periodic jobs, and the ticker of a process that runs jobs in-process.

``zarrchive worker`` ticks them on Redis (:func:`zarrchive.jobs.run_worker`'s ``periodic``);
the API process ticks them when its job queue is in-process (``zarrchive serve`` without
Redis).  An API process on Redis does not: its workers do.
"""

from __future__ import annotations

from zarrchive.jobs import InProcessJobQueue, PeriodicJob, Ticker
from zarrchive.jobs.periodic import Clock, utc_now
from zarrchive.services.dandi import embargo
from zarrchive.services.runtime import Archive

#: Every periodic job of the archive.
PERIODIC_JOBS: tuple[PeriodicJob, ...] = (embargo.END_CHECK,)


def start_in_process(archive: Archive | None, *, clock: Clock = utc_now) -> Ticker | None:
    """The started ticker of *archive*'s periodic jobs if its jobs run in this process."""
    if archive is None or not isinstance(archive.jobs, InProcessJobQueue):
        return None
    return Ticker(archive.jobs, PERIODIC_JOBS, clock=clock).start()

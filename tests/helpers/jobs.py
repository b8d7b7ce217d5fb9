"""A job queue that holds jobs until the test runs them: background work at a chosen moment
(the real interface, :class:`zarrchive.jobs.JobQueue`; jobs run through ``run_job``)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from zarrchive.errors import StorageUnavailable
from zarrchive.jobs import JobFunc, JobLane, JobQueue, run_job
from zarrchive.jobs.queue import prepare

#: Times a held job runs again when S3 did not answer in time, as the archive's queues retry
#: a failed job: on a loaded machine one request of a job may outlast the store's read
#: timeout (issue #41).  Other failures (a test's injected ones) are raised at once.
RETRIES = 3


class HeldJobQueue(JobQueue):
    """Queues jobs (coalescing by key, as every queue does) and runs them only when told."""

    def __init__(self) -> None:
        self.jobs: list[tuple[str, dict[str, Any], str | None]] = []

    def enqueue(
        self,
        func: JobFunc,
        kwargs: Mapping[str, Any] | None = None,
        *,
        key: str | None = None,
        lane: JobLane = JobLane.ZARR,
    ) -> str:
        name, arguments = prepare(func, kwargs)  # one list, whatever the lane
        if key is not None:
            self.jobs = [j for j in self.jobs if j[2] != key]
        self.jobs.append((name, arguments, key))
        return f"held-{len(self.jobs)}"

    def queued(self, prefix: str = "") -> list[str]:
        """The keys of the queued jobs (those starting with *prefix*)."""
        return [key or name for name, _, key in self.jobs if (key or name).startswith(prefix)]

    def run(self, prefix: str = "") -> int:
        """Run (and remove) the queued jobs whose key starts with *prefix*, in queue order
        (a job that fails with :class:`StorageUnavailable` again, up to :data:`RETRIES`
        times)."""
        ran = 0
        while True:
            todo = [j for j in self.jobs if (j[2] or j[0]).startswith(prefix)]
            if not todo:
                return ran
            job = todo[0]
            self.jobs.remove(job)
            for attempt in range(RETRIES + 1):
                try:
                    run_job(job[0], job[1])
                    break
                except StorageUnavailable:
                    if attempt == RETRIES:
                        raise
            ran += 1

    def drop(self) -> None:
        """Forget every queued job (the process that held them died)."""
        self.jobs.clear()

    def close(self, *, wait: bool = True, timeout: float | None = None) -> None:
        self.jobs.clear()

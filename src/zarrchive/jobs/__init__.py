"""Background jobs behind one small interface (knows nothing about what the jobs do).

A job is a module-level function named by an import string
(``"zarrchive.services.zarr_engine.manifests:generate_manifest_job"``) called with
JSON-serialisable keyword arguments.  Jobs must be idempotent: they are retried
when they raise and may run again after a crash.  Each job goes to a lane
(:class:`JobLane`: a Zarr's jobs, or content work) with consumers of its own, so a
conversion or validation never holds up a Zarr's apply, manifest or unembargo.

- :class:`InProcessJobQueue`: background threads in this process (``make serve``), each
  lane on threads of its own.
- :class:`RedisJobQueue`: RQ on Redis, an RQ queue per lane, consumed by ``zarrchive worker``
  (``--queue LANE`` for workers of one lane).
- :class:`PeriodicJob`, :class:`Ticker`: jobs queued every so often by a thread of each process
  that runs jobs (``zarrchive serve`` in-process, each ``zarrchive worker``).
- :func:`job_queue_from_settings`: Redis when ``ZARRCHIVE_REDIS_URL`` is set, else in-process.
"""

from __future__ import annotations

from zarrchive.config import Settings
from zarrchive.jobs.inprocess import InProcessJobQueue
from zarrchive.jobs.lanes import JobLane, lane_for_name
from zarrchive.jobs.periodic import PeriodicJob, Ticker
from zarrchive.jobs.queue import JobFunc, JobQueue, import_string, resolve, run_job
from zarrchive.jobs.rq_queue import DEFAULT_QUEUE, RedisJobQueue, lane_queue_names, run_worker


def job_queue_from_settings(settings: Settings, *, queue_name: str | None = None) -> JobQueue:
    """The archive's job queue: on Redis when ``settings.redis_url`` is set (the queues of
    ``settings.redis_queue`` unless *queue_name* is given), else in-process (the threads of
    ``settings.zarr_job_threads`` and ``settings.content_job_threads``)."""
    if settings.redis_url:
        return RedisJobQueue(settings.redis_url, queue_name=queue_name or settings.redis_queue)
    # two threads per lane by default: a Zarr's manifest job (key ``manifest:``) is made
    # while its apply job (key ``apply:``) still drops the applied batches' staging objects,
    # and one Zarr's long job does not hold up every other; jobs of one key never run at
    # once; and content work (a conversion of a hostile file) never holds the Zarr lane
    return InProcessJobQueue(
        threads={
            JobLane.ZARR: settings.zarr_job_threads,
            JobLane.CONTENT: settings.content_job_threads,
        }
    )


__all__ = [
    "DEFAULT_QUEUE",
    "InProcessJobQueue",
    "JobFunc",
    "JobLane",
    "JobQueue",
    "PeriodicJob",
    "RedisJobQueue",
    "Ticker",
    "import_string",
    "job_queue_from_settings",
    "lane_for_name",
    "lane_queue_names",
    "resolve",
    "run_job",
    "run_worker",
]

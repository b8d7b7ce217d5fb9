"""Background jobs behind one small interface (knows nothing about what the jobs do).

A job is a module-level function named by an import string
(``"zarrchive.services.manifests:generate_manifest_job"``) called with
JSON-serialisable keyword arguments.  Jobs must be idempotent: they are retried
when they raise and may run again after a crash.

- :class:`InProcessJobQueue`: background threads in this process (``make serve``).
- :class:`RedisJobQueue`: RQ on Redis, consumed by ``zarrchive worker``.
- :func:`job_queue_from_settings`: Redis when ``ZARRCHIVE_REDIS_URL`` is set, else in-process.
"""

from __future__ import annotations

from zarrchive.config import Settings
from zarrchive.jobs.inprocess import InProcessJobQueue
from zarrchive.jobs.queue import JobFunc, JobQueue, import_string, resolve, run_job
from zarrchive.jobs.rq_queue import DEFAULT_QUEUE, RedisJobQueue, run_worker


def job_queue_from_settings(settings: Settings, *, queue_name: str | None = None) -> JobQueue:
    """The archive's job queue: on Redis when ``settings.redis_url`` is set (the queue
    ``settings.redis_queue`` unless *queue_name* is given), else in-process."""
    if settings.redis_url:
        return RedisJobQueue(settings.redis_url, queue_name=queue_name or settings.redis_queue)
    # two threads: a Zarr's manifest job (key ``manifest:``) is made while its apply job
    # (key ``apply:``) still drops the applied batches' staging objects, and one Zarr's long
    # job does not hold up every other; jobs of one key never run at once
    return InProcessJobQueue(threads=2)


__all__ = [
    "DEFAULT_QUEUE",
    "InProcessJobQueue",
    "JobFunc",
    "JobQueue",
    "RedisJobQueue",
    "import_string",
    "job_queue_from_settings",
    "resolve",
    "run_job",
    "run_worker",
]

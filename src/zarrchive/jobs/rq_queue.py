"""Jobs on Redis through RQ, for more than one machine (``zarrchive worker`` consumes them).

Every RQ job calls :func:`zarrchive.jobs.queue.run_job` with the job's import
string and JSON arguments, stored with RQ's JSON serializer (no pickle: jobs
stay readable and safe to decode).  Retries use RQ's :class:`~rq.Retry` (the
worker runs RQ's scheduler, which re-queues retries after their interval).
Coalescing by key: a Redis string maps the key to its latest job ID; under a
per-key lock, a new enqueue removes the previous job from the queue list
(``LREM``, atomic against a worker's pop) when it has not started yet.

Jobs with the same key never run at the same time, on any number of workers: a keyed job
runs under a Redis lock named by its key (:func:`run_keyed_job`), so a newer job waits for
the one that started before it (jobs of one Zarr run one after the other, in order).
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Mapping, Sequence
from typing import Any

from redis import Redis
from redis.exceptions import LockError
from rq import Queue, Retry, Worker, get_current_job
from rq.exceptions import NoSuchJobError
from rq.job import Job
from rq.serializers import JSONSerializer

from zarrchive.errors import ConfigurationError, JobLockTimeout, JobQueueClosed
from zarrchive.jobs.queue import JobFunc, JobQueue, log, prepare, run_job

#: The RQ function every job without a key runs.
RUNNER = "zarrchive.jobs.queue.run_job"
#: The RQ function every job with a key runs: one at a time per key.
KEYED_RUNNER = "zarrchive.jobs.rq_queue.run_keyed_job"
#: The default queue name (``zarrchive worker --queue`` changes it).
DEFAULT_QUEUE = "zarrchive"
_KEY_TTL = 7 * 24 * 3600


def redis_connection(url: str) -> Redis:
    """A Redis client for *url* (``redis://host:port/db``), checked with a PING."""
    try:
        connection = Redis.from_url(url)
        connection.ping()
    except Exception as exc:
        raise ConfigurationError(
            f"cannot reach Redis at {url!r}: {exc}. Check ZARRCHIVE_REDIS_URL (or --redis-url) "
            "and that the Redis server runs"
        ) from exc
    return connection


class RedisJobQueue(JobQueue):
    """Enqueue jobs on an RQ queue in Redis."""

    def __init__(
        self,
        connection: Redis | str,
        *,
        queue_name: str = DEFAULT_QUEUE,
        max_retries: int = 3,
        retry_intervals: Sequence[int] = (10, 60, 300),
        job_timeout: int = 3600,
        result_ttl: int = 24 * 3600,
        failure_ttl: int = 7 * 24 * 3600,
    ) -> None:
        self.connection = (
            redis_connection(connection) if isinstance(connection, str) else connection
        )
        self.queue = Queue(
            queue_name,
            connection=self.connection,
            serializer=JSONSerializer,
            default_timeout=job_timeout,
        )
        self.max_retries = max_retries
        self.retry_intervals = list(retry_intervals)
        self.result_ttl = result_ttl
        self.failure_ttl = failure_ttl
        self._closed = False
        self._owns_connection = isinstance(connection, str)

    def _key_name(self, key: str) -> str:
        return f"zarrchive:jobs:{self.queue.name}:key:{key}"

    def _running_lock_name(self, key: str) -> str:
        return f"zarrchive:jobs:{self.queue.name}:running:{key}"

    def enqueue(
        self, func: JobFunc, kwargs: Mapping[str, Any] | None = None, *, key: str | None = None
    ) -> str:
        name, arguments = prepare(func, kwargs)
        if self._closed:
            raise JobQueueClosed(f"cannot queue {name}: this job queue is closed")
        if key is None:
            job = self._enqueue(name, arguments, key)
        else:
            key_name = self._key_name(key)
            with self.connection.lock(key_name + ":lock", timeout=30, blocking_timeout=30):
                previous: bytes | None = self.connection.get(key_name)  # type: ignore[assignment]
                if previous is not None:
                    self._drop_if_queued(previous.decode(), key)
                job = self._enqueue(name, arguments, key)
                self.connection.set(key_name, job.id, ex=_KEY_TTL)
        log.info("queued job %s %s key=%s on RQ queue %s", job.id, name, key, self.queue.name)
        return str(job.id)

    def _enqueue(self, name: str, arguments: dict[str, Any], key: str | None) -> Job:
        retry = (
            Retry(max=self.max_retries, interval=self.retry_intervals) if self.max_retries else None
        )
        runner_kwargs: dict[str, Any] = {"func": name, "kwargs": arguments}
        if key is not None:
            runner_kwargs.update(key=key, lock_name=self._running_lock_name(key))
        return self.queue.enqueue_call(
            KEYED_RUNNER if key is not None else RUNNER,
            kwargs=runner_kwargs,
            retry=retry,
            result_ttl=self.result_ttl,
            failure_ttl=self.failure_ttl,
            description=f"{name} key={key}" if key else name,
            meta={"zarrchive_key": key},
        )

    def _drop_if_queued(self, job_id: str, key: str) -> None:
        if self.queue.remove(job_id):
            # LREM removed it: no worker had popped it, so it will never run
            with contextlib.suppress(NoSuchJobError):
                Job.fetch(job_id, connection=self.connection, serializer=JSONSerializer).delete(
                    remove_from_queue=False
                )
            log.info("job %s (key %s) replaced by a newer job before it started", job_id, key)

    def close(self, *, wait: bool = True, timeout: float | None = None) -> None:
        """Refuse new jobs from this object; queued jobs stay in Redis for the workers."""
        self._closed = True
        if self._owns_connection:
            self.connection.close()


def run_keyed_job(func: str, kwargs: dict[str, Any], key: str, lock_name: str) -> None:
    """Run a keyed job under the Redis lock *lock_name*: one job per key at a time.

    The lock expires after the job's timeout (a worker killed mid-job cannot hold it for
    ever); waiting for it counts against the waiting job's timeout.
    """
    job = get_current_job()
    if job is None:  # called outside a worker (tests): nothing to coordinate with
        run_job(func, kwargs)
        return
    timeout = job.timeout if job.timeout and job.timeout > 0 else 3600
    lock = job.connection.lock(lock_name, timeout=timeout, blocking_timeout=timeout)
    if not lock.acquire():
        raise JobLockTimeout(
            f"job {job.id} {func} (key {key}) waited {timeout} s for the job of the same key "
            "that runs elsewhere: retried later"
        )
    try:
        run_job(func, kwargs)
    finally:
        with contextlib.suppress(LockError):
            lock.release()


def run_worker(
    redis_url: str,
    *,
    queue_name: str = DEFAULT_QUEUE,
    burst: bool = False,
    with_scheduler: bool = True,
    logging_level: str = "INFO",
) -> bool:
    """Consume jobs from *queue_name* (what ``zarrchive worker`` runs).

    With *burst*, return once the queue is empty.  Each job runs in a forked
    work horse (RQ's default worker), so a crashing job cannot take the worker down.
    """
    connection = redis_connection(redis_url)
    queue = Queue(queue_name, connection=connection, serializer=JSONSerializer)
    worker = Worker([queue], connection=connection, serializer=JSONSerializer)
    logging.getLogger("zarrchive").setLevel(logging_level)
    return bool(
        worker.work(burst=burst, with_scheduler=with_scheduler, logging_level=logging_level)
    )

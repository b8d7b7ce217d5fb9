"""Jobs on Redis through RQ, for more than one machine (``zarrchive worker`` consumes them).

Each lane (:class:`~zarrchive.jobs.lanes.JobLane`) is an RQ queue of its own: for the
archive's queue name ``zarrchive`` (``ZARRCHIVE_REDIS_QUEUE``), ``zarrchive`` holds a Zarr's
jobs and ``zarrchive-content`` the content work.  ``zarrchive worker`` consumes every lane
(the Zarr lane first) unless ``--queue LANE`` names the ones it serves: workers of their own
on the Zarr lane keep a Zarr's jobs from waiting behind a long conversion.

Every RQ job calls :func:`zarrchive.jobs.queue.run_job` with the job's import
string and JSON arguments, stored with RQ's JSON serializer (no pickle: jobs
stay readable and safe to decode).  Retries use RQ's :class:`~rq.Retry` (the
worker runs RQ's scheduler, which re-queues retries after their interval).

Keys, in Redis strings under ``zarrchive:jobs:{queue}:`` (``{queue}``: the lane's RQ queue,
so keys coalesce and serialize per lane):

- ``key:{key}``: the key's latest job ID.  Coalescing: under a per-key lock, a new
  enqueue removes the previous job from the queue list (``LREM``, atomic against a
  worker's pop) when it has not started yet.
- ``running:{key}``: the ID of the job of the key that runs now, a **lease** of
  :data:`KEY_LEASE` seconds that the running job renews (a thread, every third of it).
  Taking it and giving it up are Lua scripts, atomic with the next item.
- ``rerun:{key}``: a job of the key popped while another one ran: its function and
  arguments (the newest such job's).  It does not wait (no worker is held by a job that
  cannot run yet): it leaves this record and ends.  The running job, when it ends,
  takes the record and queues the job again, so it runs **after** it and sees what it
  did.  If the running job's worker dies, its lease expires and a watchdog (a job RQ's
  scheduler runs :data:`KEY_LEASE` seconds after the deferral) queues it instead.

So jobs with the same key never run at the same time, on any number of workers, and a job
queued while another of its key runs is never lost: it runs after it (once, with the
newest arguments).
"""

from __future__ import annotations

import contextlib
import json
import logging
import threading
from collections.abc import Mapping, Sequence
from datetime import timedelta
from typing import Any

from redis import Redis
from rq import Queue, Retry, Worker, get_current_job
from rq.exceptions import NoSuchJobError
from rq.job import Job
from rq.serializers import JSONSerializer

from zarrchive.errors import ConfigurationError, JobQueueClosed
from zarrchive.jobs.lanes import JobLane
from zarrchive.jobs.periodic import PeriodicJob, Ticker
from zarrchive.jobs.queue import JobFunc, JobQueue, log, prepare, run_job

#: The RQ function every job without a key runs.
RUNNER = "zarrchive.jobs.queue.run_job"
#: The RQ function every job with a key runs: one at a time per key.
KEYED_RUNNER = "zarrchive.jobs.rq_queue.run_keyed_job"
#: The RQ function that queues a deferred job whose running job's worker died.
WATCHDOG = "zarrchive.jobs.rq_queue.watch_deferred_job"
#: The default queue name (``ZARRCHIVE_REDIS_QUEUE``): the Zarr lane's RQ queue; the other
#: lanes' are named after it (:meth:`JobLane.queue_name`).
DEFAULT_QUEUE = "zarrchive"
#: How long a running keyed job holds its key without renewing it (seconds): after a
#: worker dies, the next job of its key waits at most about this long.
KEY_LEASE = 60
_KEY_TTL = 7 * 24 * 3600

# KEYS: running, rerun; ARGV: job id, lease (ms), the job (JSON), the record's TTL (s).
# 1: the key is this job's now; 0: another job runs: the job is recorded to run after it.
_TAKE_KEY = """
local holder = redis.call('GET', KEYS[1])
if holder and holder ~= ARGV[1] then
    redis.call('SET', KEYS[2], ARGV[3], 'EX', tonumber(ARGV[4]))
    return 0
end
redis.call('SET', KEYS[1], ARGV[1], 'PX', tonumber(ARGV[2]))
return 1
"""
# KEYS: running; ARGV: job id, lease (ms).  1 if renewed, 0 if the lease was lost.
_RENEW_KEY = """
if redis.call('GET', KEYS[1]) == ARGV[1] then
    redis.call('PEXPIRE', KEYS[1], tonumber(ARGV[2]))
    return 1
end
return 0
"""
# KEYS: running, rerun; ARGV: job id.  Give the key up; the job recorded meanwhile, if any.
_GIVE_UP_KEY = """
if redis.call('GET', KEYS[1]) ~= ARGV[1] then
    return false
end
redis.call('DEL', KEYS[1])
local deferred = redis.call('GET', KEYS[2])
if deferred then
    redis.call('DEL', KEYS[2])
end
return deferred
"""
# KEYS: running, rerun.  While a job runs: 1 (it will take the record); else the record.
_CLAIM_ORPHAN = """
if redis.call('EXISTS', KEYS[1]) == 1 then
    return 1
end
local deferred = redis.call('GET', KEYS[2])
if deferred then
    redis.call('DEL', KEYS[2])
end
return deferred
"""


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


def _names(queue_name: str, key: str) -> tuple[str, str, str]:
    """The Redis keys of a job key: its latest job, its running job, its deferred job."""
    prefix = f"zarrchive:jobs:{queue_name}"
    return f"{prefix}:key:{key}", f"{prefix}:running:{key}", f"{prefix}:rerun:{key}"


def lane_queue_names(queue_name: str, lanes: Sequence[JobLane] = tuple(JobLane)) -> list[str]:
    """The RQ queues of *lanes* for the archive's queue name *queue_name*."""
    return [lane.queue_name(queue_name) for lane in lanes]


class RedisJobQueue(JobQueue):
    """Enqueue jobs on RQ queues in Redis, one per lane, named after *queue_name*."""

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
        key_lease: int = KEY_LEASE,
    ) -> None:
        self.connection = (
            redis_connection(connection) if isinstance(connection, str) else connection
        )
        #: The RQ queue of each lane.
        self.queues = {
            lane: Queue(
                lane.queue_name(queue_name),
                connection=self.connection,
                serializer=JSONSerializer,
                default_timeout=job_timeout,
            )
            for lane in JobLane
        }
        #: The default lane's (:attr:`JobLane.ZARR`) RQ queue, named *queue_name*.
        self.queue = self.queues[JobLane.ZARR]
        self.max_retries = max_retries
        self.retry_intervals = list(retry_intervals)
        self.result_ttl = result_ttl
        self.failure_ttl = failure_ttl
        self.job_timeout = job_timeout
        self.key_lease = key_lease
        self._closed = False
        self._owns_connection = isinstance(connection, str)

    def __str__(self) -> str:
        lanes = ", ".join(f"{queue.name} ({lane.value})" for lane, queue in self.queues.items())
        return f"RQ queues {lanes}"

    def _settings(self) -> dict[str, Any]:
        """What a keyed job needs to queue a job again as this queue would."""
        return {
            "max_retries": self.max_retries,
            "retry_intervals": self.retry_intervals,
            "job_timeout": self.job_timeout,
            "result_ttl": self.result_ttl,
            "failure_ttl": self.failure_ttl,
            "key_lease": self.key_lease,
        }

    def enqueue(
        self,
        func: JobFunc,
        kwargs: Mapping[str, Any] | None = None,
        *,
        key: str | None = None,
        lane: JobLane = JobLane.ZARR,
    ) -> str:
        name, arguments = prepare(func, kwargs)
        if self._closed:
            raise JobQueueClosed(f"cannot queue {name}: this job queue is closed")
        queue = self.queues[JobLane(lane)]
        if key is None:
            job = self._enqueue(queue, name, arguments, key)
        else:
            keyed = self._enqueue_keyed(queue, name, arguments, key, replace=True)
            assert keyed is not None  # replacing, a keyed job is always queued
            job = keyed
        log.info("queued job %s %s key=%s on RQ queue %s", job.id, name, key, queue.name)
        return str(job.id)

    def _enqueue_keyed(
        self, queue: Queue, name: str, arguments: dict[str, Any], key: str, *, replace: bool
    ) -> Job | None:
        """Queue a keyed job on *queue*.  With *replace*, a job of the key still queued is
        replaced; without (a deferred job queued again), this one is dropped instead: the
        queued job was queued after it (it runs with newer arguments).  None when dropped."""
        key_name = _names(queue.name, key)[0]
        with self.connection.lock(key_name + ":lock", timeout=30, blocking_timeout=30):
            previous: bytes | None = self.connection.get(key_name)  # type: ignore[assignment]
            if previous is not None:
                if not replace and self._is_queued(queue, previous.decode()):
                    return None
                self._drop_if_queued(queue, previous.decode(), key)
            job = self._enqueue(queue, name, arguments, key)
            self.connection.set(key_name, job.id, ex=_KEY_TTL)
        return job

    def _enqueue(self, queue: Queue, name: str, arguments: dict[str, Any], key: str | None) -> Job:
        retry = (
            Retry(max=self.max_retries, interval=self.retry_intervals) if self.max_retries else None
        )
        runner_kwargs: dict[str, Any] = {"func": name, "kwargs": arguments}
        if key is not None:
            runner_kwargs.update(
                key=key, lock_name=_names(queue.name, key)[1], settings=self._settings()
            )
        return queue.enqueue_call(
            KEYED_RUNNER if key is not None else RUNNER,
            kwargs=runner_kwargs,
            retry=retry,
            result_ttl=self.result_ttl,
            failure_ttl=self.failure_ttl,
            description=f"{name} key={key}" if key else name,
            meta={"zarrchive_key": key},
        )

    def _is_queued(self, queue: Queue, job_id: str) -> bool:
        return self.connection.lpos(queue.key, job_id) is not None

    def _drop_if_queued(self, queue: Queue, job_id: str, key: str) -> None:
        if queue.remove(job_id):
            # LREM removed it: no worker had popped it, so it will never run
            with contextlib.suppress(NoSuchJobError):
                Job.fetch(job_id, connection=self.connection, serializer=JSONSerializer).delete(
                    remove_from_queue=False
                )
            log.info("job %s (key %s) replaced by a newer job before it started", job_id, key)

    def claim_period(self, job: PeriodicJob) -> bool:
        """Whether this process queues *job* for the period now starting: the first of the
        workers ticking to ask (a ``SET NX`` that lasts most of the period) is told yes."""
        name = f"zarrchive:jobs:{self.queue.name}:every:{job.func}"
        return bool(self.connection.set(name, "1", nx=True, px=max(1, int(job.every * 900))))

    def close(self, *, wait: bool = True, timeout: float | None = None) -> None:
        """Refuse new jobs from this object; queued jobs stay in Redis for the workers."""
        self._closed = True
        if self._owns_connection:
            self.connection.close()


class _KeyLease:
    """The running job's hold on its key, renewed by a thread until :meth:`end`."""

    def __init__(self, connection: Redis, name: str, job_id: str, lease: int) -> None:
        self.connection = connection
        self.name = name
        self.job_id = job_id
        self.lease_ms = lease * 1000
        self._stop = threading.Event()
        self._thread = threading.Thread(
            target=self._renew, args=(max(lease / 3, 0.1),), name="zarrchive-key-lease", daemon=True
        )
        self._thread.start()

    def _renew(self, every: float) -> None:
        while not self._stop.wait(every):
            try:
                held = self.connection.eval(_RENEW_KEY, 1, self.name, self.job_id, self.lease_ms)
            except Exception:  # Redis unreachable for a moment: try again next time
                log.warning("could not renew the lease of %s", self.name, exc_info=True)
                continue
            if not held:
                log.error(
                    "job %s lost its key %s (its lease expired): another job of the key may "
                    "run meanwhile",
                    self.job_id,
                    self.name,
                )
                return

    def end(self) -> None:
        self._stop.set()
        self._thread.join()


def _job_record(func: str, kwargs: dict[str, Any], settings: Mapping[str, Any]) -> str:
    return json.dumps({"func": func, "kwargs": kwargs, "settings": dict(settings)})


def _queue_again(job: Job, key: str, record: bytes | str) -> None:
    """Queue the deferred job *record* of *key* on *job*'s queue (its lane's; unless a newer
    one is)."""
    deferred = json.loads(record)
    settings = deferred.get("settings") or {}
    # queued as the queue that queued it would, back on the RQ queue it ran from (its lane)
    queues = RedisJobQueue(
        job.connection,
        max_retries=settings.get("max_retries", 3),
        retry_intervals=settings.get("retry_intervals", (10, 60, 300)),
        job_timeout=settings.get("job_timeout", 3600),
        result_ttl=settings.get("result_ttl", 24 * 3600),
        failure_ttl=settings.get("failure_ttl", 7 * 24 * 3600),
        key_lease=settings.get("key_lease", KEY_LEASE),
    )
    origin = Queue(
        job.origin,
        connection=job.connection,
        serializer=JSONSerializer,
        default_timeout=queues.job_timeout,
    )
    queued = queues._enqueue_keyed(origin, deferred["func"], deferred["kwargs"], key, replace=False)
    if queued is None:
        log.info("deferred job of key %s: a newer job of the key is queued already", key)
    else:
        log.info("deferred job of key %s queued again as %s", key, queued.id)


def run_keyed_job(
    func: str,
    kwargs: dict[str, Any],
    key: str,
    lock_name: str,
    settings: Mapping[str, Any] | None = None,
) -> None:
    """Run a keyed job unless another job of its key runs; then record it to run after that
    one (see the module's description).  *lock_name* is the key's ``running`` record."""
    job = get_current_job()
    if job is None:  # called outside a worker (tests): nothing to coordinate with
        run_job(func, kwargs)
        return
    settings = dict(settings or {})
    lease = int(settings.get("key_lease", KEY_LEASE))
    rerun_name = lock_name.removesuffix(f":running:{key}") + f":rerun:{key}"
    record = _job_record(func, kwargs, settings)
    connection = job.connection
    taken = connection.eval(
        _TAKE_KEY, 2, lock_name, rerun_name, job.id, lease * 1000, record, _KEY_TTL
    )
    if not taken:
        log.info(
            "job %s %s (key %s): a job of its key runs; it runs again after that one",
            job.id,
            func,
            key,
        )
        Queue(job.origin, connection=connection, serializer=JSONSerializer).enqueue_in(
            timedelta(seconds=lease),
            WATCHDOG,
            kwargs={"key": key, "lock_name": lock_name, "lease": lease},
            result_ttl=settings.get("result_ttl", 24 * 3600),
            description=f"watch the deferred job of key={key}",
        )
        return
    holder = _KeyLease(connection, lock_name, job.id, lease)
    try:
        run_job(func, kwargs)
    finally:
        holder.end()
        deferred: bytes | None = connection.eval(  # type: ignore[assignment]
            _GIVE_UP_KEY, 2, lock_name, rerun_name, job.id
        )
        if deferred:
            _queue_again(job, key, deferred)


def watch_deferred_job(key: str, lock_name: str, lease: int = KEY_LEASE) -> None:
    """Queue the deferred job of *key* if no job of the key runs any more (the one that ran
    died without queueing it); while one runs, look again a lease later."""
    job = get_current_job()
    if job is None:
        return
    rerun_name = lock_name.removesuffix(f":running:{key}") + f":rerun:{key}"
    found: int | bytes | None = job.connection.eval(  # type: ignore[assignment]
        _CLAIM_ORPHAN, 2, lock_name, rerun_name
    )
    if isinstance(
        found, int
    ):  # still running (renewing its lease): it takes the record when it ends
        Queue(job.origin, connection=job.connection, serializer=JSONSerializer).enqueue_in(
            timedelta(seconds=lease),
            WATCHDOG,
            kwargs={"key": key, "lock_name": lock_name, "lease": lease},
            result_ttl=job.result_ttl,
            description=f"watch the deferred job of key={key}",
        )
    elif found:
        log.warning("key %s: the job that ran stopped without ending; queueing the next", key)
        _queue_again(job, key, found)


def run_worker(
    redis_url: str,
    *,
    queue_name: str = DEFAULT_QUEUE,
    lanes: Sequence[JobLane] = tuple(JobLane),
    burst: bool = False,
    with_scheduler: bool = True,
    logging_level: str = "INFO",
    periodic: Sequence[PeriodicJob] = (),
) -> bool:
    """Consume the jobs of *lanes* (every lane by default, in :class:`JobLane`'s order: a
    free worker takes a Zarr's job before content work) from the RQ queues of the archive's
    queue name *queue_name* (what ``zarrchive worker`` runs).

    With *burst*, return once the queues are empty.  Each job runs in a forked
    work horse (RQ's default worker), so a crashing job cannot take the worker down.
    *periodic* jobs are queued by a ticker thread of this process (one worker of all those
    running queues each period's, :meth:`RedisJobQueue.claim_period`), unless *burst*.
    """
    if not lanes:
        raise ConfigurationError("a worker needs at least one lane to consume")
    connection = redis_connection(redis_url)
    ordered = [lane for lane in JobLane if lane in lanes]
    queues = [
        Queue(name, connection=connection, serializer=JSONSerializer)
        for name in lane_queue_names(queue_name, ordered)
    ]
    worker = Worker(queues, connection=connection, serializer=JSONSerializer)
    logging.getLogger("zarrchive").setLevel(logging_level)
    log.info("consuming the RQ queue(s) %s", ", ".join(q.name for q in queues))
    ticking = RedisJobQueue(connection, queue_name=queue_name)
    # a burst worker drains the queues and exits: it queues no periodic work
    ticker = Ticker(ticking, () if burst else periodic, claim=ticking.claim_period).start()
    try:
        return bool(
            worker.work(burst=burst, with_scheduler=with_scheduler, logging_level=logging_level)
        )
    finally:
        ticker.stop()

"""The embedded job queue: jobs run in background daemon threads of this process, each
lane (:class:`~zarrchive.jobs.lanes.JobLane`) on threads of its own."""

from __future__ import annotations

import heapq
import itertools
import threading
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from zarrchive.errors import ConfigurationError, JobQueueClosed
from zarrchive.jobs.lanes import JobLane
from zarrchive.jobs.queue import JobFunc, JobQueue, backoff_delay, log, prepare, run_job


@dataclass(eq=False)
class _Job:
    id: str
    func: str
    kwargs: dict[str, Any]
    key: str | None
    lane: JobLane
    attempts: int = 0
    cancelled: bool = field(default=False)


@dataclass
class _Lane:
    """One lane's jobs (a heap by ready time) and keys; guarded by the queue's condition."""

    heap: list[tuple[float, int, _Job]] = field(default_factory=list)
    pending_by_key: dict[str, _Job] = field(default_factory=dict)
    #: keys of the jobs running now; the job of such a key popped meanwhile, parked
    running_keys: set[str] = field(default_factory=set)
    parked: dict[str, _Job] = field(default_factory=dict)


def thread_counts(threads: int | Mapping[JobLane, int]) -> dict[JobLane, int]:
    """The threads of each lane: *threads* for every lane, or per lane (each at least 1)."""
    counts = dict.fromkeys(JobLane, threads) if isinstance(threads, int) else dict(threads)
    missing = [lane.value for lane in JobLane if counts.get(lane, 0) < 1]
    if missing:
        raise ConfigurationError(
            f"the in-process job queue needs at least one thread per lane; none for "
            f"{', '.join(missing)}"
        )
    return counts


class InProcessJobQueue(JobQueue):
    """Runs jobs in background daemon threads, for ``make serve``: *threads* per lane (an
    int for every lane, or a mapping per lane), so a lane's jobs never wait for another's.

    A job that raises is retried up to *max_retries* times after an exponential
    backoff (*backoff*, doubled each time, capped at *max_backoff* seconds); a
    newer job with the same key supersedes a pending retry.  Jobs with the same key (in a
    lane) never run at once: a job whose key runs in another thread is parked (still
    pending, so a newer enqueue replaces it) and runs when that one ends.  Coalescing is
    per process: use :class:`~zarrchive.jobs.RedisJobQueue` for more than one.
    """

    def __init__(
        self,
        *,
        max_retries: int = 3,
        backoff: float = 1.0,
        max_backoff: float = 60.0,
        threads: int | Mapping[JobLane, int] = 1,
        name: str = "zarrchive-jobs",
    ) -> None:
        self.max_retries = max_retries
        self.backoff = backoff
        self.max_backoff = max_backoff
        #: The threads of each lane.
        self.threads = thread_counts(threads)
        # one condition for every lane: waiters re-check their own lane (notify_all)
        self._cond = threading.Condition()
        self._seq = itertools.count()
        self._lanes = {lane: _Lane() for lane in JobLane}
        self._live = 0  # queued jobs not cancelled
        self._running = 0
        self._closing = False
        self._stopped = False
        #: Jobs that succeeded / failed for good, since the queue started.
        self.succeeded = 0
        self.failed = 0
        self._threads = [
            threading.Thread(
                target=self._work, args=(lane,), name=f"{name}-{lane.value}-{i}", daemon=True
            )
            for lane, count in self.threads.items()
            for i in range(count)
        ]
        for thread in self._threads:
            thread.start()

    def __str__(self) -> str:
        lanes = ", ".join(f"{lane.value}: {count}" for lane, count in self.threads.items())
        return f"in-process (threads per lane: {lanes})"

    # -- producer ----------------------------------------------------------------
    def enqueue(
        self,
        func: JobFunc,
        kwargs: Mapping[str, Any] | None = None,
        *,
        key: str | None = None,
        lane: JobLane = JobLane.ZARR,
    ) -> str:
        name, arguments = prepare(func, kwargs)
        job = _Job(uuid.uuid4().hex, name, arguments, key, JobLane(lane))
        with self._cond:
            if self._closing:
                raise JobQueueClosed(
                    f"cannot queue {name}: the job queue is closed (the server is shutting down)"
                )
            if key is not None:
                state = self._lanes[job.lane]
                self._cancel_pending(state, key, job.id)
                state.pending_by_key[key] = job
            self._push(job, time.monotonic())
        log.info("queued job %s %s key=%s lane=%s", job.id, name, key, job.lane.value)
        return job.id

    def _push(self, job: _Job, ready_at: float, *, new: bool = True) -> None:
        heapq.heappush(self._lanes[job.lane].heap, (ready_at, next(self._seq), job))
        if new:
            self._live += 1
        # the threads of every lane wait on this condition: wake them all, each re-checks
        # its own lane (notify() could wake another lane's thread and lose the wake-up)
        self._cond.notify_all()

    def _cancel_pending(self, state: _Lane, key: str, new_id: str) -> None:
        old = state.pending_by_key.pop(key, None)
        if old is not None:
            old.cancelled = True
            self._live -= 1
            log.info(
                "job %s (key %s) replaced by the newer job %s before it started",
                old.id,
                key,
                new_id,
            )

    # -- consumer ----------------------------------------------------------------
    def _next(self, lane: JobLane) -> _Job | None:
        """Wait for the next ready job of *lane*; None when the thread must exit."""
        state = self._lanes[lane]
        with self._cond:
            while True:
                if self._stopped:
                    return None
                while state.heap and state.heap[0][2].cancelled:
                    heapq.heappop(state.heap)
                if not state.heap:
                    if self._closing:
                        return None
                    self._cond.wait()
                    continue
                ready_at = state.heap[0][0]
                delay = ready_at - time.monotonic()
                if delay > 0:
                    self._cond.wait(delay)
                    continue
                job = heapq.heappop(state.heap)[2]
                if job.key is not None and job.key in state.running_keys:
                    # its key runs: it runs after that job (still pending meanwhile)
                    state.parked[job.key] = job
                    continue
                self._live -= 1
                if job.key is not None:
                    if state.pending_by_key.get(job.key) is job:
                        del state.pending_by_key[job.key]
                    state.running_keys.add(job.key)
                self._running += 1
                return job

    def _work(self, lane: JobLane) -> None:
        state = self._lanes[lane]
        while (job := self._next(lane)) is not None:
            try:
                run_job(job.func, job.kwargs)
            except BaseException:  # SystemExit from a job must not kill the worker thread
                self._failed(job)
            else:
                log.info("job %s %s done", job.id, job.func)
                with self._cond:
                    self.succeeded += 1
            finally:
                with self._cond:
                    self._running -= 1
                    if job.key is not None:
                        state.running_keys.discard(job.key)
                        parked = state.parked.pop(job.key, None)
                        if parked is not None and not parked.cancelled and not self._stopped:
                            self._push(parked, time.monotonic(), new=False)
                    self._cond.notify_all()

    def _failed(self, job: _Job) -> None:
        job.attempts += 1
        with self._cond:
            state = self._lanes[job.lane]
            superseded = job.key is not None and job.key in state.pending_by_key
            if job.attempts <= self.max_retries and not superseded and not self._stopped:
                delay = backoff_delay(job.attempts, self.backoff, self.max_backoff)
                log.warning(
                    "job %s %s failed (attempt %d of %d), retrying in %.3g s",
                    job.id,
                    job.func,
                    job.attempts,
                    self.max_retries + 1,
                    delay,
                    exc_info=True,
                )
                if job.key is not None:
                    state.pending_by_key[job.key] = job
                self._push(job, time.monotonic() + delay)
                return
            self.failed += 1
        if superseded:
            log.warning(
                "job %s %s failed; not retried: a newer job with key %s is queued",
                job.id,
                job.func,
                job.key,
                exc_info=True,
            )
        else:
            log.error(
                "job %s %s failed after %d attempts: giving up",
                job.id,
                job.func,
                job.attempts,
                exc_info=True,
            )

    # -- control -----------------------------------------------------------------
    def join(self, timeout: float | None = None) -> bool:
        """Wait until no job is queued (including retries) or running; False on timeout."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._cond:
            while self._live > 0 or self._running > 0:
                remaining = None if deadline is None else deadline - time.monotonic()
                if remaining is not None and remaining <= 0:
                    return False
                self._cond.wait(remaining)
            return True

    @property
    def pending(self) -> int:
        """Jobs queued and not started, in every lane (including retries waiting for their
        backoff)."""
        with self._cond:
            return self._live

    def close(self, *, wait: bool = True, timeout: float | None = None) -> None:
        """Refuse new jobs; with *wait*, run what is queued first (up to *timeout*), else
        drop it.  A running job always finishes (threads cannot be interrupted)."""
        with self._cond:
            self._closing = True
            if not wait:
                self._stop()
            self._cond.notify_all()
        deadline = None if timeout is None else time.monotonic() + timeout
        for thread in self._threads:
            remaining = None if deadline is None else max(0.0, deadline - time.monotonic())
            thread.join(remaining)
        with self._cond:
            if any(thread.is_alive() for thread in self._threads):
                self._stop()
                self._cond.notify_all()
                log.warning("job queue closed with a job still running after %s s", timeout)

    def _stop(self) -> None:
        if self._live:
            log.warning("job queue closing: dropping %d queued job(s)", self._live)
        self._stopped = True
        for state in self._lanes.values():
            state.heap.clear()
            state.pending_by_key.clear()
            state.parked.clear()
        self._live = 0

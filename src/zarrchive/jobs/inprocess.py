"""The embedded job queue: jobs run in a background daemon thread of this process."""

from __future__ import annotations

import heapq
import itertools
import threading
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from zarrchive.errors import JobQueueClosed
from zarrchive.jobs.queue import JobFunc, JobQueue, backoff_delay, log, prepare, run_job


@dataclass(eq=False)
class _Job:
    id: str
    func: str
    kwargs: dict[str, Any]
    key: str | None
    attempts: int = 0
    cancelled: bool = field(default=False)


class InProcessJobQueue(JobQueue):
    """Runs jobs in background daemon threads (one by default), for ``make serve``.

    A job that raises is retried up to *max_retries* times after an exponential
    backoff (*backoff*, doubled each time, capped at *max_backoff* seconds); a
    newer job with the same key supersedes a pending retry.  Jobs with the same key
    never run at once: a job whose key runs in another thread is parked (still pending,
    so a newer enqueue replaces it) and runs when that one ends.  Coalescing is per
    process: use :class:`~zarrchive.jobs.RedisJobQueue` for more than one.
    """

    def __init__(
        self,
        *,
        max_retries: int = 3,
        backoff: float = 1.0,
        max_backoff: float = 60.0,
        threads: int = 1,
        name: str = "zarrchive-jobs",
    ) -> None:
        self.max_retries = max_retries
        self.backoff = backoff
        self.max_backoff = max_backoff
        self._cond = threading.Condition()
        self._heap: list[tuple[float, int, _Job]] = []
        self._seq = itertools.count()
        self._pending_by_key: dict[str, _Job] = {}
        #: keys of the jobs running now; the job of such a key popped meanwhile, parked
        self._running_keys: set[str] = set()
        self._parked: dict[str, _Job] = {}
        self._live = 0  # queued jobs not cancelled
        self._running = 0
        self._closing = False
        self._stopped = False
        #: Jobs that succeeded / failed for good, since the queue started.
        self.succeeded = 0
        self.failed = 0
        self._threads = [
            threading.Thread(target=self._work, name=f"{name}-{i}", daemon=True)
            for i in range(threads)
        ]
        for thread in self._threads:
            thread.start()

    # -- producer ----------------------------------------------------------------
    def enqueue(
        self, func: JobFunc, kwargs: Mapping[str, Any] | None = None, *, key: str | None = None
    ) -> str:
        name, arguments = prepare(func, kwargs)
        job = _Job(uuid.uuid4().hex, name, arguments, key)
        with self._cond:
            if self._closing:
                raise JobQueueClosed(
                    f"cannot queue {name}: the job queue is closed (the server is shutting down)"
                )
            if key is not None:
                self._cancel_pending(key, job.id)
                self._pending_by_key[key] = job
            self._push(job, time.monotonic())
        log.info("queued job %s %s key=%s", job.id, name, key)
        return job.id

    def _push(self, job: _Job, ready_at: float, *, new: bool = True) -> None:
        heapq.heappush(self._heap, (ready_at, next(self._seq), job))
        if new:
            self._live += 1
        self._cond.notify()

    def _cancel_pending(self, key: str, new_id: str) -> None:
        old = self._pending_by_key.pop(key, None)
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
    def _next(self) -> _Job | None:
        """Wait for the next ready job; None when the thread must exit."""
        with self._cond:
            while True:
                if self._stopped:
                    return None
                while self._heap and self._heap[0][2].cancelled:
                    heapq.heappop(self._heap)
                if not self._heap:
                    if self._closing:
                        return None
                    self._cond.wait()
                    continue
                ready_at = self._heap[0][0]
                delay = ready_at - time.monotonic()
                if delay > 0:
                    self._cond.wait(delay)
                    continue
                job = heapq.heappop(self._heap)[2]
                if job.key is not None and job.key in self._running_keys:
                    # its key runs: it runs after that job (still pending meanwhile)
                    self._parked[job.key] = job
                    continue
                self._live -= 1
                if job.key is not None:
                    if self._pending_by_key.get(job.key) is job:
                        del self._pending_by_key[job.key]
                    self._running_keys.add(job.key)
                self._running += 1
                return job

    def _work(self) -> None:
        while (job := self._next()) is not None:
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
                        self._running_keys.discard(job.key)
                        parked = self._parked.pop(job.key, None)
                        if parked is not None and not parked.cancelled and not self._stopped:
                            self._push(parked, time.monotonic(), new=False)
                    self._cond.notify_all()

    def _failed(self, job: _Job) -> None:
        job.attempts += 1
        with self._cond:
            superseded = job.key is not None and job.key in self._pending_by_key
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
                    self._pending_by_key[job.key] = job
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
        """Jobs queued and not started (including retries waiting for their backoff)."""
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
        self._heap.clear()
        self._pending_by_key.clear()
        self._parked.clear()
        self._live = 0

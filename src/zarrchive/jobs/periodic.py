"""Periodic jobs: a ticker thread queues each one every so often (knows nothing about what
the jobs do).

A :class:`PeriodicJob` is a job (an import string) queued every :attr:`~PeriodicJob.every`
seconds, on its lane, with its own key (so ticks coalesce while one waits) and one argument:
``now``, the ticker's clock as ISO 8601 (an injectable clock: tests give a later day instead
of waiting for it).  A :class:`Ticker` runs in each process that runs jobs: the in-process
queue's (``zarrchive serve`` without Redis) and each ``zarrchive worker``.  Several workers
tick at once: a *claim* (on Redis, a ``SET NX`` lease of the period,
:meth:`~zarrchive.jobs.RedisJobQueue.claim_period`) lets one of them queue each period's job.
The jobs themselves must stay safe when two run at once (the database decides).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

from zarrchive.jobs.lanes import JobLane
from zarrchive.jobs.queue import JobQueue

log = logging.getLogger("zarrchive.jobs")

#: The ticker's clock: the current time (aware, UTC).
Clock = Callable[[], datetime]
#: May this process queue *job* for this period? (Several processes tick.)
Claim = Callable[["PeriodicJob"], bool]


def utc_now() -> datetime:
    return datetime.now(UTC)


def always(_job: PeriodicJob) -> bool:
    return True


@dataclass(frozen=True)
class PeriodicJob:
    """A job (``"package.module:function"`` taking ``now: str``) queued every *every* s."""

    func: str
    every: float
    lane: JobLane = JobLane.ZARR

    @property
    def key(self) -> str:
        return f"every:{self.func}"


class Ticker:
    """Queues each of *jobs* on *queue* at once, then every period of its own, until
    :meth:`stop`; with *claim*, only when it says so.  A failure to queue (the queue closed,
    Redis away) is logged and tried again next period."""

    def __init__(
        self,
        queue: JobQueue,
        jobs: Sequence[PeriodicJob],
        *,
        clock: Clock = utc_now,
        claim: Claim = always,
        name: str = "zarrchive-ticker",
    ) -> None:
        self.queue, self.jobs, self.clock, self.claim = queue, list(jobs), clock, claim
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        #: Jobs queued since the ticker started.
        self.queued = 0

    def start(self) -> Ticker:
        if self.jobs:
            self._thread.start()
        return self

    def tick(self, job: PeriodicJob) -> bool:
        """Queue *job* now (if claimed); True if queued."""
        try:
            if not self.claim(job):
                return False
            self.queue.enqueue(
                job.func, {"now": self.clock().isoformat()}, key=job.key, lane=job.lane
            )
        except Exception:  # the queue closed or Redis is away: next period
            log.warning("could not queue the periodic job %s", job.func, exc_info=True)
            return False
        self.queued += 1
        return True

    def _run(self) -> None:
        due = dict.fromkeys(range(len(self.jobs)), time.monotonic())
        while not self._stop.is_set():
            now = time.monotonic()
            for index, at in due.items():
                if at <= now:
                    self.tick(self.jobs[index])
                    due[index] = now + self.jobs[index].every
            self._stop.wait(max(0.0, min(due.values()) - time.monotonic()))

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(10)

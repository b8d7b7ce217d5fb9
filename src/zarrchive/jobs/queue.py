"""The job interface: a job is a module-level function named by an import string.

``enqueue("package.module:function", {"json": "kwargs"}, key=...)`` queues a
call ``function(**kwargs)``.  Jobs must be idempotent: every queue retries a
job that raises, and a job may run again after a crash.  A *key* coalesces:
while a job with the same key is still queued (not started), a new enqueue
replaces it, so only the latest arguments run.  A key also serializes: jobs with
the same key never run at the same time, and a job queued while another of its key
runs is never dropped: it runs after that one ends (so it sees what that one did),
without holding a worker meanwhile.  ``lane=`` picks the consumers
(:class:`~zarrchive.jobs.lanes.JobLane`: a Zarr's jobs or content work); keys coalesce and
serialize within a lane (a key's jobs always go to one lane).
"""

from __future__ import annotations

import importlib
import json
import logging
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from types import TracebackType
from typing import Any

from zarrchive.errors import InvalidJob
from zarrchive.jobs.lanes import JobLane
from zarrchive.jobs.renamed import current_module

log = logging.getLogger("zarrchive.jobs")

#: What a job is given as: ``"package.module:function"`` or the function itself.
JobFunc = str | Callable[..., object]


def import_string(func: JobFunc) -> str:
    """The import string ``"package.module:function"`` of *func* (checked, not imported)."""
    if callable(func) and not isinstance(func, str):
        module = getattr(func, "__module__", None)
        qualname = getattr(func, "__qualname__", "")
        if not module or not qualname or "." in qualname or "<" in qualname:
            raise InvalidJob(
                f"{func!r} is not a module-level function: jobs must be importable by name, "
                "define the job at module level"
            )
        func = f"{module}:{qualname}"
    if not isinstance(func, str):
        raise InvalidJob(f"{func!r} is not a job: give 'package.module:function'")
    module, sep, name = func.partition(":")
    if (
        not sep
        or not module
        or not name.isidentifier()
        or not all(part.isidentifier() for part in module.split("."))
    ):
        raise InvalidJob(f"{func!r} is not an import string: give 'package.module:function'")
    return func


def resolve(func: str) -> Callable[..., object]:
    """Import the function named by the import string *func*."""
    module_name, _, name = import_string(func).partition(":")
    # a job queued by an earlier release may name a module that has moved since
    module_name = current_module(module_name)
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise InvalidJob(f"job {func!r}: cannot import module {module_name!r}: {exc}") from exc
    target = getattr(module, name, None)
    if not callable(target):
        raise InvalidJob(f"job {func!r}: module {module_name!r} has no function {name!r}")
    return target  # type: ignore[no-any-return]


def check_kwargs(kwargs: Mapping[str, Any] | None) -> dict[str, Any]:
    """A JSON round-tripped copy of *kwargs*: what the job will actually receive."""
    if kwargs is None:
        return {}
    if not isinstance(kwargs, Mapping) or not all(isinstance(k, str) for k in kwargs):
        raise InvalidJob(f"job arguments must be a mapping with string keys, got {kwargs!r}")
    try:
        copied = json.loads(json.dumps(dict(kwargs), allow_nan=False))
    except (TypeError, ValueError) as exc:
        raise InvalidJob(
            f"job arguments must be JSON-serialisable (str, int, float, bool, None, lists, "
            f"dicts): {exc}"
        ) from exc
    assert isinstance(copied, dict)
    return copied


def run_job(func: str, kwargs: dict[str, Any]) -> None:
    """Run one job: import *func* and call it with *kwargs* (what every worker executes)."""
    target = resolve(func)
    log.debug("running job %s(%s)", func, kwargs)
    target(**kwargs)


class JobQueue(ABC):
    """Where the archive sends background work."""

    @abstractmethod
    def enqueue(
        self,
        func: JobFunc,
        kwargs: Mapping[str, Any] | None = None,
        *,
        key: str | None = None,
        lane: JobLane = JobLane.ZARR,
    ) -> str:
        """Queue ``func(**kwargs)`` on *lane*; return the job's ID.

        *func* is ``"package.module:function"`` (or a module-level function);
        *kwargs* must be JSON-serialisable.  With *key*, a job with the same key
        that has not started yet is replaced by this one, and while a job with the same
        key runs, this one runs after it.  Work that reads or decodes uploaded content goes
        on :attr:`JobLane.CONTENT`, so that it never holds up a Zarr's jobs.
        """

    @abstractmethod
    def close(self, *, wait: bool = True, timeout: float | None = None) -> None:
        """Stop accepting jobs; with *wait*, let queued jobs run first (up to *timeout*)."""

    def __enter__(self) -> JobQueue:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


def prepare(func: JobFunc, kwargs: Mapping[str, Any] | None) -> tuple[str, dict[str, Any]]:
    """Validate a job before queueing it: importable function, JSON arguments."""
    name = import_string(func)
    resolve(name)
    return name, check_kwargs(kwargs)


def backoff_delay(attempt: int, base: float, maximum: float) -> float:
    """The delay before retry number *attempt* (1-based): exponential, capped."""
    return float(min(base * (2 ** (attempt - 1)), maximum))

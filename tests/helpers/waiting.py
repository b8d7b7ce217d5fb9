"""Waiting for an event in a test: its condition polled until it holds, within a generous
deadline that fails fast and says what it waited for (issue #41).

No test may depend on when another thread or process gets the CPU: the machine running the
suite may be shared and loaded (load average 15 on 2 cores), so a test never sleeps "long
enough" for something to happen, nor bounds how soon it happens (speed belongs in bench/).
It waits for the event itself: a file, a row, a queued job, an answer, a line of output.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")

#: The default deadline of a wait for an event (seconds): minutes on a loaded machine are
#: fine, an hour is not (pytest-timeout stops any test after 600 s, see pyproject.toml).
EVENT_TIMEOUT = 120.0


def wait_until(
    condition: Callable[[], T | None],
    what: str | Callable[[], str],
    timeout: float = EVENT_TIMEOUT,
    poll: float = 0.05,
) -> T:
    """The first true value of *condition*, polled every *poll* seconds; after *timeout*
    seconds an :class:`AssertionError` saying "waited N s for *what*" (*what* may be a
    function, called then: the state or logs that explain the failure)."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            said = what() if callable(what) else what
            raise AssertionError(f"waited {timeout:.0f} s for {said}")
        time.sleep(poll)

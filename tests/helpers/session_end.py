"""The end of a test run, as a newcomer reads it: one line naming the browser tests that
were skipped and why (they need Debian's chromium), and no stray traceback after the last
line (hypothesis's garbage-collector callback outliving the session).

Registered by ``tests/conftest.py`` (:func:`register`)."""

from __future__ import annotations

import gc
from collections.abc import Generator, Iterable
from typing import Any

import pytest

#: The module of the tests that drive a real browser.
BROWSER_TESTS = "tests/web/test_browser.py"


def skip_reason(report: Any) -> str:
    """Why a skipped test was skipped (pytest's ``Skipped: `` prefix removed)."""
    longrepr = report.longrepr
    reason = longrepr[2] if isinstance(longrepr, tuple) and len(longrepr) == 3 else str(longrepr)
    return str(reason).removeprefix("Skipped: ")


def browser_skip_line(skipped: Iterable[Any]) -> str | None:
    """One line naming the skipped browser tests and why, or None if none was skipped."""
    reports = [r for r in skipped if str(getattr(r, "nodeid", "")).startswith(BROWSER_TESTS)]
    if not reports:
        return None
    reasons = "; ".join(sorted({skip_reason(r) for r in reports}))
    return f"SKIPPED {len(reports)} browser tests ({BROWSER_TESTS}): {reasons}"


def drop_hypothesis_gc_callback() -> int:
    """Remove the callback hypothesis adds to :data:`gc.callbacks` (it times garbage
    collections for its health checks) once no test runs any more: left in place, a
    collection while the interpreter tears its modules down calls it with its globals
    already gone, and Python prints "Exception ignored in: ... gc_callback" after the run's
    last line.  Returns how many were removed."""
    mine = [
        cb
        for cb in gc.callbacks
        if getattr(cb, "__module__", "").startswith("hypothesis.")
        and getattr(cb, "__name__", "") == "gc_callback"
    ]
    for cb in mine:
        gc.callbacks.remove(cb)
    return len(mine)


class SessionEnd:
    """The pytest plugin of this module."""

    # the outermost wrapper: the line comes after pytest's own summaries (-ra's list of
    # skips among them), just before the closing "N passed" line
    @pytest.hookimpl(wrapper=True, tryfirst=True)
    def pytest_terminal_summary(self, terminalreporter: Any) -> Generator[None, None, None]:
        yield
        line = browser_skip_line(terminalreporter.stats.get("skipped", []))
        if line:
            terminalreporter.write_line(line, yellow=True, bold=True)

    def pytest_unconfigure(self, config: pytest.Config) -> None:
        drop_hypothesis_gc_callback()


def register(config: pytest.Config) -> None:
    config.pluginmanager.register(SessionEnd(), "zarrchive-session-end")

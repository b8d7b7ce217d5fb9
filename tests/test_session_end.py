"""The end of a run: skipped browser tests in one line; hypothesis's gc callback removed."""

from __future__ import annotations

import gc
from types import SimpleNamespace

from hypothesis.internal.conjecture.junkdrawer import gc_cumulative_time

from tests.helpers.session_end import browser_skip_line, drop_hypothesis_gc_callback


def skipped(nodeid: str, reason: str) -> SimpleNamespace:
    return SimpleNamespace(nodeid=nodeid, longrepr=(nodeid, 1, f"Skipped: {reason}"))


def test_browser_skip_line() -> None:
    assert browser_skip_line([]) is None
    assert browser_skip_line([skipped("tests/api/test_x.py::t", "no redis")]) is None
    line = browser_skip_line(
        [
            skipped("tests/web/test_browser.py::a", "no browser at /usr/bin/chromium"),
            skipped("tests/web/test_browser.py::b", "no browser at /usr/bin/chromium"),
            skipped("tests/api/test_x.py::t", "no redis"),
        ]
    )
    assert line == (
        "SKIPPED 2 browser tests (tests/web/test_browser.py): no browser at /usr/bin/chromium"
    )


def test_drop_hypothesis_gc_callback() -> None:
    gc_cumulative_time()  # what a hypothesis test does first: installs its callback
    ours = [cb for cb in gc.callbacks if cb.__module__.startswith("hypothesis.")]
    assert len(ours) == 1
    try:
        assert drop_hypothesis_gc_callback() == 1
        assert not [cb for cb in gc.callbacks if cb.__module__.startswith("hypothesis.")]
        assert drop_hypothesis_gc_callback() == 0
    finally:
        gc.callbacks[:0] = ours  # the rest of this process's tests keep hypothesis's timing

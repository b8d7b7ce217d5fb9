"""Job functions for the job-queue tests (imported by name, ``tests.helpers.job_functions:NAME``, also
by RQ workers)."""

from __future__ import annotations

import time
from pathlib import Path


def append_line(path: str, text: str) -> None:
    """Append *text* and a newline to the file *path*."""
    with Path(path).open("a") as f:
        f.write(text + "\n")


def fail_then_append(path: str, text: str, failures: int) -> None:
    """Fail the first *failures* calls (counted in ``{path}.attempts``), then append."""
    counter = Path(path + ".attempts")
    attempts = int(counter.read_text()) + 1 if counter.exists() else 1
    counter.write_text(str(attempts))
    if attempts <= failures:
        raise RuntimeError(f"planned failure {attempts} of {failures}")
    append_line(path, text)


def slow_append(path: str, text: str, seconds: float) -> None:
    """Sleep, then append (to keep the worker busy)."""
    time.sleep(seconds)
    append_line(path, text)


def span(path: str, text: str, seconds: float) -> None:
    """Append ``start TEXT``, sleep, append ``end TEXT`` (to see whether jobs overlap)."""
    append_line(path, f"start {text}")
    time.sleep(seconds)
    append_line(path, f"end {text}")

"""Job functions for the job-queue tests (imported by name, ``tests.helpers.job_functions:NAME``, also
by RQ workers)."""

from __future__ import annotations

import os
import sys
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


def gated_span(path: str, text: str, gate: str, timeout: float = 600.0) -> None:
    """Append ``start TEXT``, wait until the file *gate* exists (up to *timeout* s: longer
    than any test's steps on a loaded machine), append ``end TEXT``: a job that runs until
    the test lets it end (its process ID in ``{path}.pid``, for a test that kills it)."""
    Path(path + ".pid").write_text(str(os.getpid()))
    append_line(path, f"start {text}")
    deadline = time.monotonic() + timeout
    while not Path(gate).exists() and time.monotonic() < deadline:
        time.sleep(0.02)
    append_line(path, f"end {text}")


#: The directory where :func:`held_conversion` and the test meet (set in the environment of
#: the test process and of its workers).
GATES_ENV = "ZARRCHIVE_TEST_JOB_GATES"


def held_conversion(blob_id: str) -> None:
    """The archive's LINDI conversion job, holding its thread (or worker) until the test lets
    it go, as a hostile file's conversion would for minutes: it writes ``{blob_id}.started``
    in the directory ``$ZARRCHIVE_TEST_JOB_GATES``, waits until ``open`` exists there (at
    most 10 minutes), runs the real conversion and writes ``{blob_id}.converted``."""
    from zarrchive.services.dandi.lindi_files import convert_blob_job

    gates = Path(os.environ[GATES_ENV])
    (gates / f"{blob_id}.started").touch()
    deadline = time.monotonic() + 600
    while not (gates / "open").exists() and time.monotonic() < deadline:
        time.sleep(0.02)
    try:
        convert_blob_job(blob_id)
    finally:
        (gates / f"{blob_id}.converted").touch()


def record_dandischema_imported(path: str) -> None:
    """Append whether dandischema was already imported when the job started (by its worker,
    before forking the job's process), then use it as a validation job does."""
    imported = "dandischema.models" in sys.modules
    from zarrchive.services.dandi.validation import schema

    append_line(path, f"imported={imported} version={schema().version}")

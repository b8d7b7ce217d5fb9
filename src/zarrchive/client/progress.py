"""Progress reporting for the sync engine: a small protocol, a silent and a Rich implementation.

The engine calls :meth:`Progress.start` for each phase (hashing, uploading,
downloading), :meth:`Progress.advance` from worker threads as files complete
(negative values take back work that must be redone), and :meth:`Progress.note`
for one-line messages (a stale batch cancelled, URLs re-requested).
"""

from __future__ import annotations

import sys
import threading
from typing import Protocol

from rich.console import Console
from rich.progress import (
    BarColumn,
    DownloadColumn,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
    TransferSpeedColumn,
)
from rich.progress import Progress as RichProgressBar


class Progress(Protocol):
    def start(self, label: str, files: int | None = None, nbytes: int | None = None) -> None:
        """A new phase with its totals (None when unknown)."""

    def advance(self, files: int = 0, nbytes: int = 0) -> None:
        """Work done since the last call (thread-safe)."""

    def note(self, message: str) -> None:
        """A one-line message for the user."""

    def stop(self) -> None:
        """The end of the last phase."""


class NullProgress:
    """Reports nothing; collects the notes (for tests and library users)."""

    def __init__(self) -> None:
        self.notes: list[str] = []

    def start(self, label: str, files: int | None = None, nbytes: int | None = None) -> None:
        return None

    def advance(self, files: int = 0, nbytes: int = 0) -> None:
        return None

    def note(self, message: str) -> None:
        self.notes.append(message)

    def stop(self) -> None:
        return None


class PlainProgress(NullProgress):
    """Prints notes on stderr, no bars (for logs and non-terminals)."""

    def note(self, message: str) -> None:
        super().note(message)
        print(f"zarrchive: {message}", file=sys.stderr, flush=True)


class RichProgress:
    """Bars on stderr: files and bytes done of the total, byte rate, elapsed time and ETA.

    The Rich task counts bytes (so rate and ETA are in bytes); files are a task field.
    """

    def __init__(self, console: Console | None = None) -> None:
        self.console = console or Console(stderr=True)
        self.bar = RichProgressBar(
            TextColumn("{task.description:<10}"),
            BarColumn(bar_width=30),
            TextColumn("{task.fields[files]}{task.fields[of_files]} files"),
            DownloadColumn(),
            TransferSpeedColumn(),
            TimeElapsedColumn(),
            TextColumn("ETA"),
            TimeRemainingColumn(),
            console=self.console,
            transient=False,
            refresh_per_second=5,
        )
        self._lock = threading.Lock()
        self._task: TaskID | None = None
        self._files = 0
        self._started = False
        self.notes: list[str] = []

    def start(self, label: str, files: int | None = None, nbytes: int | None = None) -> None:
        with self._lock:
            if not self._started:
                self.bar.start()
                self._started = True
            self._finish_current()
            self._files = 0
            of_files = f"/{files}" if files is not None else ""
            self._task = self.bar.add_task(label, total=nbytes, files=0, of_files=of_files)

    def _finish_current(self) -> None:
        if self._task is not None:
            task = self.bar.tasks[self._task]
            if task.total is None:
                self.bar.update(self._task, total=task.completed)
            self.bar.stop_task(self._task)
            self._task = None

    def advance(self, files: int = 0, nbytes: int = 0) -> None:
        with self._lock:
            if self._task is None:
                return
            self._files += files
            self.bar.update(self._task, advance=nbytes, files=self._files)

    def note(self, message: str) -> None:
        self.notes.append(message)
        self.console.print(f"zarrchive: {message}", highlight=False, markup=False)

    def stop(self) -> None:
        with self._lock:
            self._finish_current()
            if self._started:
                self.bar.stop()
                self._started = False


__all__ = ["NullProgress", "PlainProgress", "Progress", "RichProgress"]

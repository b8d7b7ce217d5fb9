"""Helpers shared by the CLI commands: errors as one-line messages, the archive runtime."""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Callable, Iterator
from functools import wraps
from typing import TYPE_CHECKING, ParamSpec, TypeVar

import typer

from zarrchive.config import Settings
from zarrchive.errors import ZarrchiveError

if TYPE_CHECKING:  # imported when used: `zarrchive --help` and `checksum` stay quick
    from zarrchive.services.runtime import Archive

P = ParamSpec("P")
R = TypeVar("R")


def fail(message: str, code: int = 2) -> typer.Exit:
    """Print *message* on stderr; return the Exit to raise."""
    print(f"zarrchive: {message}", file=sys.stderr)
    return typer.Exit(code)


def one_line_errors(prefix: str = "zarrchive") -> Callable[[Callable[P, R]], Callable[P, R]]:
    """Turn zarrchive errors (and unreadable files) into one line on stderr, exit code 2."""

    def decorate(fn: Callable[P, R]) -> Callable[P, R]:
        @wraps(fn)
        def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
            try:
                return fn(*args, **kwargs)
            except ZarrchiveError as exc:
                message = exc.message
            except OSError as exc:
                message = f"{exc.filename or ''}: {exc.strerror or exc}".lstrip(": ")
            print(f"{prefix}: {message}", file=sys.stderr)
            raise typer.Exit(2)

        return wrapper

    return decorate


#: The decorator of most commands: ``zarrchive: <message>``.
friendly_errors = one_line_errors()


def human_size(n: int) -> str:
    """``12 B``, ``3.4 MiB``..."""
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if value < 1024 or unit == "TiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{n} B"  # pragma: no cover


@contextlib.contextmanager
def open_archive(settings: Settings | None = None) -> Iterator[Archive]:
    """The archive runtime for admin commands (embedded S3 started if needed)."""
    from zarrchive.services.runtime import Archive
    from zarrchive.storage.embedded import embedded_s3

    settings = settings or Settings.from_env()
    with embedded_s3(settings) as resolved:
        archive = Archive.from_settings(resolved)
        try:
            yield archive
        finally:
            archive.close()

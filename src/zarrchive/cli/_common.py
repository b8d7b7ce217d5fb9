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


def friendly_errors(fn: Callable[P, R]) -> Callable[P, R]:
    """Turn zarrchive errors into one line on stderr and exit code 2."""

    @wraps(fn)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return fn(*args, **kwargs)
        except ZarrchiveError as exc:
            raise fail(exc.message) from None

    return wrapper


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

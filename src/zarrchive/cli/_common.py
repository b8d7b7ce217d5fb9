"""Helpers shared by the CLI commands: common options, errors as one-line messages, progress,
the archive runtime."""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Callable, Iterator
from functools import wraps
from pathlib import Path
from typing import TYPE_CHECKING, ParamSpec, TypeVar

import typer

from zarrchive.config import Settings
from zarrchive.errors import ConfigurationError, ZarrchiveError

if TYPE_CHECKING:  # imported when used: `zarrchive --help` and `checksum` stay quick
    from zarrchive.client.progress import Progress
    from zarrchive.services.runtime import Archive

P = ParamSpec("P")
R = TypeVar("R")
T = TypeVar("T")

API_URL_OPTION = typer.Option(
    None,
    "--api-url",
    envvar="ZARRCHIVE_URL",
    help="The archive's URL (or ZARRCHIVE_URL).",
    show_default=False,
)
TOKEN_OPTION = typer.Option(
    None,
    "--token",
    envvar="ZARRCHIVE_TOKEN",
    help="Your API token (or ZARRCHIVE_TOKEN).",
    show_default=False,
)
JOBS_OPTION = typer.Option(
    None, "--jobs", "-j", help="Parallel transfers (default: 8 or more).", show_default=False
)


def say(message: str) -> None:
    """Print *message* on stderr as ``zarrchive: <message>`` (a note, not an error)."""
    print(f"zarrchive: {message}", file=sys.stderr, flush=True)


def run_client_command(command: str, fn: Callable[[], T]) -> T:
    """Run *fn*; zarrchive errors, OS errors and Ctrl-C become one line and an exit code.

    The wrapper of the client commands (upload, download, verify): ``zarrchive <command>:
    <message>``, exit 2, and 130 on Ctrl-C with the advice to rerun.
    """
    try:
        return fn()
    except ZarrchiveError as exc:
        print(f"zarrchive {command}: {exc.message}", file=sys.stderr)
        raise typer.Exit(2) from None
    except OSError as exc:
        where = f" {exc.filename!r}" if exc.filename else ""
        print(f"zarrchive {command}:{where} {exc.strerror or exc}", file=sys.stderr)
        raise typer.Exit(2) from None
    except KeyboardInterrupt:
        print(
            f"zarrchive {command}: interrupted; run the same command again to finish",
            file=sys.stderr,
        )
        raise typer.Exit(130) from None


@contextlib.contextmanager
def make_progress(quiet: bool = False) -> Iterator[Progress]:
    """A progress display on stderr: rich on a terminal, plain lines otherwise."""
    from zarrchive.client.progress import PlainProgress, RichProgress

    progress: Progress = RichProgress() if sys.stderr.isatty() and not quiet else PlainProgress()
    try:
        yield progress
    finally:
        progress.stop()


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


def sqlite_path(database_url: str) -> Path | None:
    """The file of a SQLite database URL (``sqlite:///PATH``); None for a database server or
    an in-memory SQLite."""
    scheme, sep, rest = database_url.partition(":///")
    if not sep or not scheme.startswith("sqlite"):
        return None
    path = rest.split("?", 1)[0]
    return Path(path) if path and path != ":memory:" else None


def archive_exists(settings: Settings) -> bool:
    """Whether *settings* point at an archive that exists: a database server (whose state
    the server itself knows), or a SQLite file that is there."""
    path = sqlite_path(settings.database_url)
    if path is None:
        return not settings.database_url.startswith("sqlite")
    return path.is_file()


def require_archive(settings: Settings) -> None:
    """Refuse (:class:`ConfigurationError`) when no archive exists where *settings* point,
    instead of creating an empty one that no running server uses: what the admin and
    maintenance commands check first.  ``zarrchive serve`` alone creates archives."""
    if archive_exists(settings):
        return
    database = sqlite_path(settings.database_url)
    where = (
        f"{settings.data_dir} (ZARRCHIVE_DATA_DIR)"
        if database is not None and database.parent == settings.data_dir
        else f"the SQLite file {database} (ZARRCHIVE_DATABASE_URL)"
    )
    raise ConfigurationError(
        f"no archive in {where}, and this command does not create one. `zarrchive serve` "
        "(and `make serve`) keeps its archive in ZARRCHIVE_DATA_DIR, by default .zarrchive in "
        "the directory it was started from: run this command from that directory, or set "
        "ZARRCHIVE_DATA_DIR to the archive's data directory"
    )


def admin_settings() -> Settings:
    """The settings of ``zarrchive serve`` (``ZARRCHIVE_*``), refused when no archive is there."""
    settings = Settings.from_env()
    require_archive(settings)
    return settings


@contextlib.contextmanager
def open_archive(settings: Settings | None = None) -> Iterator[Archive]:
    """The archive runtime for admin commands (embedded S3 started if needed); refused when
    no archive exists where the settings point (:func:`require_archive`)."""
    from zarrchive.services.runtime import Archive
    from zarrchive.storage.embedded import embedded_s3

    settings = settings or admin_settings()
    require_archive(settings)
    with embedded_s3(settings) as resolved:
        archive = Archive.from_settings(resolved)
        try:
            yield archive
        finally:
            archive.close()

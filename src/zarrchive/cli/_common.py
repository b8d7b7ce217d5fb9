"""Helpers shared by the CLI commands: common options, errors as one-line messages, progress,
the archive runtime."""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Callable, Iterator
from functools import wraps
from pathlib import Path
from typing import TYPE_CHECKING, Any, ParamSpec, TypeVar

import typer
from typer._click.core import Command, Context
from typer._click.exceptions import UsageError
from typer.core import TyperArgument, TyperCommand, TyperGroup, TyperOption

from zarrchive.config import Settings
from zarrchive.errors import ConfigurationError, ZarrchiveError

if TYPE_CHECKING:  # imported when used: `zarrchive --help` and `checksum` stay quick
    from zarrchive.client.progress import Progress
    from zarrchive.services.runtime import Archive
    from zarrchive.transport import RetryEvent

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


def say_retry(event: RetryEvent) -> None:
    """A retry, said as it happens (``zarrchive: GET /api/...: ...; retrying in 0.4 s
    (attempt 2 of 6)``): the client commands' retry hook, so a wait is never silent."""
    say(str(event))


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


# -- help and usage in the user's words ---------------------------------------------------
#: Typer's type labels (``<str>``) as click's placeholders (``TEXT``).
_PLACEHOLDERS = {
    "str": "TEXT",
    "int": "INTEGER",
    "int range": "INTEGER",
    "float": "FLOAT",
    "float range": "FLOAT",
    "bool": "BOOLEAN",
}


def _type_placeholder(param: TyperOption | TyperArgument, ctx: Context) -> str:
    """Click's placeholder of a value: ``TEXT``, ``INTEGER``, ``PATH``, ``[a|b]``."""
    label = TyperArgument.display_type(param, ctx).removeprefix("<").removesuffix(">")
    if label.startswith("list[") and label.endswith("]"):
        label = label[5:-1]
    shown = f"[{label}]" if "|" in label else _PLACEHOLDERS.get(label, label.upper())
    return f"{shown}..." if param.nargs != 1 else shown


class _Option(TyperOption):
    """An option whose help shows click's placeholder (``PATH``), none for a flag."""

    def display_type_rich(self, ctx: Context) -> str | None:
        if self.is_flag or self.count:
            return None
        if self.metavar is not None:
            return self.metavar
        return _type_placeholder(self, ctx)


class _Argument(TyperArgument):
    """An argument named in capitals (``LOCAL``, ``[ZARR_IDS]...``), its type as click's
    placeholder."""

    def display_type_rich(self, ctx: Context) -> str | None:
        return _type_placeholder(self, ctx)

    def _usage_display_name(self) -> str:
        name = self.display_name_raw
        if not self.required:
            name = f"[{name}]"
        return f"{name}..." if self.nargs != 1 else name


def natural_help(command: Command) -> None:
    """Give *command* (and a group's subcommands) the help of :class:`_Option` and
    :class:`_Argument` (typer's own shows ``<bool>``, ``<str>`` and ``{local}``)."""
    if type(command) is TyperCommand:
        command.__class__ = _Command
    elif type(command) is TyperGroup:
        command.__class__ = ZarrchiveGroup
    for param in command.params:
        if type(param) is TyperOption:
            param.__class__ = _Option
        elif type(param) is TyperArgument:
            param.__class__ = _Argument
            if param.metavar is None and param.name:
                param.metavar = param.name.upper()
    if isinstance(command, TyperGroup):
        for sub in command.commands.values():
            natural_help(sub)


def _help_option(option: Any) -> Any:
    """The ``--help`` flag, shown without a placeholder."""
    if type(option) is TyperOption:
        option.__class__ = _Option
    return option


class _Command(TyperCommand):
    """A command whose ``--help`` flag shows no placeholder."""

    def get_help_option(self, ctx: Context) -> Any:
        return _help_option(super().get_help_option(ctx))


class ZarrchiveGroup(TyperGroup):
    """The ``zarrchive`` command: help placeholders as click writes them (``PATH``,
    ``TEXT``, no ``<bool>``), and a mistyped command is pointed to the one of a subgroup
    (``zarrchive create-user``: did you mean ``zarrchive admin create-user``?)."""

    def get_help_option(self, ctx: Context) -> Any:
        return _help_option(super().get_help_option(ctx))

    def main(self, *args: Any, **kwargs: Any) -> Any:
        natural_help(self)
        return super().main(*args, **kwargs)

    def resolve_command(
        self, ctx: Context, args: list[str]
    ) -> tuple[str | None, Command | None, list[str]]:
        try:
            return super().resolve_command(ctx, args)
        except UsageError as exc:
            if args and not ctx.resilient_parsing:
                homes = [
                    f"'{ctx.command_path} {name} {args[0]}'"
                    for name in self.list_commands(ctx)
                    if isinstance(sub := self.get_command(ctx, name), TyperGroup)
                    and args[0] in sub.commands
                ]
                if homes:
                    exc.message = f"No such command {args[0]!r}. Did you mean {' or '.join(homes)}?"
            raise

"""The ``zarrchive`` command line: a thin layer over the library.

Start-up: a command's module is imported when that command runs (or its own ``--help`` is
asked for), never for another command; ``zarrchive --help`` lists the commands from
:data:`COMMANDS` without importing any of them.  Help is click's plain text (typer's rich
help costs more to import than the rest of the CLI together).
"""

from __future__ import annotations

from typing import Any, NamedTuple

import typer
from typer._click.core import Command, Context
from typer._click.formatting import HelpFormatter
from typer._click.utils import make_default_short_help

from zarrchive.cli._common import ZarrchiveGroup, _natural


class LazyCommand(NamedTuple):
    """A command (``module.attribute``: a function, or a :class:`typer.Typer` for a group)
    and its help's first sentence, for ``zarrchive --help``.  ``tests/cli/test_startup.py``
    checks that it is the command's own."""

    module: str
    attribute: str
    short_help: str


#: Every command of ``zarrchive``, in the order of ``zarrchive --help``.
COMMANDS: dict[str, LazyCommand] = {
    "serve": LazyCommand(
        "zarrchive.cli.serve",
        "serve",
        "Start the archive: the API, background jobs and (by default) an embedded S3.",
    ),
    "checksum": LazyCommand(
        "zarrchive.cli.checksum",
        "checksum",
        "Compute the Dandi Zarr checksum of a local directory.",
    ),
    "worker": LazyCommand(
        "zarrchive.cli.worker",
        "worker",
        "Run background jobs (manifests, backfills) from Redis; start one per core or machine.",
    ),
    "upload": LazyCommand(
        "zarrchive.cli.upload",
        "upload",
        "Upload a local Zarr: only new and changed files; delete files gone locally.",
    ),
    "publish": LazyCommand(
        "zarrchive.cli.publish",
        "publish",
        "Publish the draft of DANDISET (you are asked first): its Zarrs become immutable, or "
        "in an archive in snapshot mode their current states are pinned.",
    ),
    "download": LazyCommand(
        "zarrchive.cli.download",
        "download",
        "Download a Zarr (only missing or differing files); check every md5 and the checksum.",
    ),
    "verify": LazyCommand(
        "zarrchive.cli.download",
        "verify",
        "Compare a local directory with a Zarr of the archive (no data transferred).",
    ),
    "admin": LazyCommand("zarrchive.cli.admin", "app", "Administer the archive (users, fsck, gc)."),
    "lindi": LazyCommand("zarrchive.cli.lindi", "app", "LINDI: HDF5/NWB files as Zarr."),
    "manifest": LazyCommand("zarrchive.cli.manifest", "app", "Zarr manifest files."),
}


def load_command(name: str) -> Command:
    """Import the command *name* of :data:`COMMANDS` and build it (plain help)."""
    spec = COMMANDS[name]
    # __import__, not importlib.import_module: the import system's own path, which
    # ``python -X importtime`` reports (tests/cli/test_startup.py reads it).
    target = getattr(__import__(spec.module, fromlist=[spec.attribute]), spec.attribute)
    if isinstance(target, typer.Typer):
        target.rich_markup_mode = None
        target._add_completion = False
        command = typer.main.get_command(target)
    else:
        single = typer.Typer(
            rich_markup_mode=None, pretty_exceptions_enable=False, add_completion=False
        )
        single.command(name)(target)
        command = typer.main.get_command(single)
    command.name = name
    _natural(command)
    return command


class LazyGroup(ZarrchiveGroup):
    """The ``zarrchive`` group: its commands are imported when asked for."""

    def list_commands(self, ctx: Context) -> list[str]:
        return list(COMMANDS)

    def get_command(self, ctx: Context, cmd_name: str) -> Command | None:
        found = self.commands.get(cmd_name)
        if found is None and cmd_name in COMMANDS:
            found = self.commands[cmd_name] = load_command(cmd_name)
        return found

    def format_commands(self, ctx: Context, formatter: HelpFormatter) -> None:
        """The commands and their one-line help, without importing them."""
        limit = formatter.width - 6 - max(map(len, COMMANDS))
        rows = [
            (name, make_default_short_help(spec.short_help, limit))
            for name, spec in COMMANDS.items()
        ]
        with formatter.section("Commands"):
            formatter.write_dl(rows)


app = typer.Typer(
    name="zarrchive",
    cls=LazyGroup,
    help="zarrchive: an archive for Zarr datasets (server, client and tools).",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
    rich_markup_mode=None,
)


@app.callback()
def _root() -> None:
    """zarrchive: an archive for Zarr datasets (server, client and tools)."""


def main() -> None:
    """Console-script entry point."""
    app()


def __getattr__(name: str) -> Any:
    """The command modules as attributes (``zarrchive.cli.upload``), imported on first use."""
    if name in {spec.module.rpartition(".")[2] for spec in COMMANDS.values()}:
        return __import__(f"{__name__}.{name}", fromlist=["_"])
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

"""The ``zarrchive`` typer application, its commands loaded when asked for
(:data:`zarrchive.cli.registry.COMMANDS`)."""

from __future__ import annotations

import typer
from typer._click.core import Command, Context
from typer._click.formatting import HelpFormatter
from typer._click.utils import make_default_short_help

from zarrchive.cli._common import ZarrchiveGroup, natural_help
from zarrchive.cli.registry import COMMANDS


def load_command(name: str) -> Command:
    """Import the command *name* of :data:`COMMANDS` and build it (plain help)."""
    spec = COMMANDS[name]
    # __import__, not importlib.import_module: the import system's own path, which
    # ``python -X importtime`` reports (tests/cli/test_startup.py reads it).
    target = getattr(__import__(spec.module, fromlist=[spec.attribute]), spec.attribute)
    holder = typer.Typer(
        rich_markup_mode=None, pretty_exceptions_enable=False, add_completion=False
    )
    if isinstance(target, typer.Typer):
        # Added as a subgroup, as ``zarrchive`` always did: a group of one command (manifest)
        # stays a group.
        target.rich_markup_mode = None
        holder.add_typer(target, name=name)
    else:
        holder.command(name)(target)
        holder.callback()(_root)
    group = typer.main.get_command(holder)
    assert isinstance(group, typer.core.TyperGroup)
    command = group.commands[name]
    command.name = name
    natural_help(command)
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


def _print_version(value: bool) -> None:
    """``--version``: print ``zarrchive <version>`` and exit."""
    if value:
        from zarrchive.version import package_version

        print(f"zarrchive {package_version()}")
        raise typer.Exit()


@app.callback()
def _root(
    version: bool = typer.Option(
        False,
        "--version",
        help="Print zarrchive's version and exit.",
        callback=_print_version,
        is_eager=True,
    ),
) -> None:
    """zarrchive: an archive for Zarr datasets (server, client and tools)."""

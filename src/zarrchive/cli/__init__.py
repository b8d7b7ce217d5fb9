"""The ``zarrchive`` command line: a thin layer over the library.

Start-up: a command's module is imported when that command runs (or its own ``--help`` is
asked for), never for another command; ``zarrchive --help`` lists the commands from
:data:`COMMANDS` (:mod:`zarrchive.cli.registry`) without importing any of them, nor typer
itself (:func:`main` writes it, :func:`top_level_help`).  Help is click's plain text (typer's rich help costs more to
import than the rest of the CLI together).
"""

from __future__ import annotations

import os
import shutil
import sys
from typing import Any

from zarrchive.cli.registry import COMMANDS, LazyCommand


def top_level_help(width: int = 78) -> str:
    """``zarrchive --help`` as typer writes it at the widest (*width* 78: a terminal of 80
    columns or more, or none), without importing typer (``tests/cli/test_startup.py``
    checks it is typer's, byte for byte)."""
    name_width = max(map(len, COMMANDS))
    limit = width - 6 - name_width
    lines = [
        "Usage: zarrchive [OPTIONS] COMMAND [ARGS]...",
        "",
        "  zarrchive: an archive for Zarr datasets (server, client and tools).",
        "",
        "Options:",
        "  --version  Print zarrchive's version and exit.",
        "  --help     Show this message and exit.",
        "",
        "Commands:",
        *(
            f"  {name:<{name_width}}  {_first_words(spec.short_help, limit)}"
            for name, spec in COMMANDS.items()
        ),
    ]
    return "\n".join(lines) + "\n"


def _first_words(text: str, limit: int) -> str:
    """*text* cut to at most *limit* characters: up to the end of its first sentence if that
    fits, else whole words followed by ``...``."""
    words = text.split()
    taken: list[str] = []
    length = -1
    for word in words:
        if length + 1 + len(word) > limit:
            break
        taken.append(word)
        length += 1 + len(word)
        if word.endswith("."):
            return " ".join(taken)
    else:
        return " ".join(taken)
    while taken and length + 3 > limit:
        length -= len(taken.pop()) + 1
    return " ".join(taken) + "..."


def main() -> None:
    """Console-script entry point."""
    if sys.argv[1:] == ["--version"]:  # as quick as --help
        from zarrchive.version import package_version

        sys.stdout.write(f"zarrchive {package_version()}\n")
        return
    if (
        sys.argv[1:] == ["--help"]
        and os.path.basename(sys.argv[0]) == "zarrchive"
        and shutil.get_terminal_size().columns >= 80
    ):
        # Typer alone costs most of a start-up: the commands' list needs none of it.
        sys.stdout.write(top_level_help())
        return
    from zarrchive.cli._app import app

    app()


def __getattr__(name: str) -> Any:
    """``app``, ``load_command`` and the command modules (``zarrchive.cli.upload``),
    imported on first use."""
    if name in {"app", "load_command", "LazyGroup"}:
        from zarrchive.cli import _app

        return getattr(_app, name)
    if name in {spec.module.rpartition(".")[2] for spec in COMMANDS.values()}:
        return __import__(f"{__name__}.{name}", fromlist=["_"])
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["COMMANDS", "LazyCommand", "main", "top_level_help"]

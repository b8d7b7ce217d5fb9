"""``zarrchive manifest``: Zarr manifest files."""

from __future__ import annotations

import typer

app = typer.Typer(help="Zarr manifest files.", no_args_is_help=True)

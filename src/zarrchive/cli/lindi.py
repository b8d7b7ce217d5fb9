"""``zarrchive lindi``: HDF5/NWB <-> LINDI commands."""

from __future__ import annotations

import typer

app = typer.Typer(help="LINDI: HDF5/NWB files as Zarr.", no_args_is_help=True)

"""``zarrchive admin``: administration against the archive's database and S3."""

from __future__ import annotations

import typer

app = typer.Typer(help="Administer the archive (users, fsck).", no_args_is_help=True)

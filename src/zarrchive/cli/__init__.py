"""The ``zarrchive`` command line: a thin layer over the library."""

from __future__ import annotations

import typer

from zarrchive.cli import admin, checksum, download, lindi, manifest, publish, serve, upload, worker
from zarrchive.cli._common import ZarrchiveGroup

app = typer.Typer(
    name="zarrchive",
    cls=ZarrchiveGroup,
    help="zarrchive: an archive for Zarr datasets (server, client and tools).",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)
app.command("serve")(serve.serve)
app.command("checksum")(checksum.checksum)
app.add_typer(admin.app, name="admin")
app.add_typer(lindi.app, name="lindi")
app.add_typer(manifest.app, name="manifest")
app.command("worker")(worker.worker)
app.command("upload")(upload.upload)
app.command("publish")(publish.publish)
app.command("download")(download.download)
app.command("verify")(download.verify)


def main() -> None:
    """Console-script entry point."""
    app()

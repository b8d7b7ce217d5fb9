"""The registry of ``zarrchive``'s commands (:data:`COMMANDS`): what ``zarrchive --help``
lists and what :mod:`zarrchive.cli._app` imports when a command runs.

A leaf (the standard library only): the package (:mod:`zarrchive.cli`, which writes the
top-level help without typer) and the typer application (:mod:`zarrchive.cli._app`) both
read it, and neither imports the other back.  A new command is one entry here.
"""

from __future__ import annotations

from typing import NamedTuple


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
        (
            "Run background jobs from Redis; start one per core or machine, and some on "
            "`--queue zarr` alone so that a Zarr's jobs never wait behind a long conversion."
        ),
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
    "metadata": LazyCommand(
        "zarrchive.cli.metadata",
        "app",
        "A draft's dandiset metadata: print it, or set it from a YAML or JSON file.",
    ),
    "rm": LazyCommand(
        "zarrchive.cli.rm",
        "rm",
        "Delete files and whole directories of a Zarr (you are asked first).",
    ),
    "restore": LazyCommand(
        "zarrchive.cli.restore",
        "restore",
        "Roll a Zarr back to an earlier checksum, or list the checksums it had.",
    ),
    "admin": LazyCommand("zarrchive.cli.admin", "app", "Administer the archive (users, fsck, gc)."),
    "lindi": LazyCommand("zarrchive.cli.lindi", "app", "LINDI: HDF5/NWB files as Zarr."),
    "manifest": LazyCommand("zarrchive.cli.manifest", "app", "Zarr manifest files."),
}

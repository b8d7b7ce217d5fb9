"""``zarrchive rm ADDRESS PATH...``: delete files and whole directories of a Zarr.

Each PATH is a file of the Zarr or a directory (every file below it is deleted; a trailing
``/`` insists on a directory).  The command first looks every path up and says what it
will delete (files, bytes); nothing is deleted if one is missing.  It asks for confirmation
on a terminal; ``--yes`` skips the question, and without a terminal it refuses unless
``--yes`` is given.  A large deletion is applied by the archive in the background: the
command waits for it (a progress line) unless ``--no-wait``.

Exit codes: 0 deleted (or queued, with ``--no-wait``); 1 not confirmed; 2 an error (one
line on stderr: a missing path, no permission, a published Zarr...); 130 interrupted (a
deletion already sent goes on in the archive).
"""

from __future__ import annotations

import sys
import time
from typing import TYPE_CHECKING

import typer

from zarrchive.cli._common import (
    API_URL_OPTION,
    TOKEN_OPTION,
    human_size,
    make_progress,
    run_client_command,
    say_retry,
)
from zarrchive.errors import InvalidInput, NotFound

if TYPE_CHECKING:  # imported when used: `zarrchive --help` stays quick
    from zarrchive.client.api import ApiClient, ZarrInfo

#: Seconds between two looks at a Zarr whose deletion the archive applies.
POLL_SECONDS = 0.5
#: How long to wait for a deletion applied in the background before giving up.
WAIT_LIMIT_SECONDS = 3600.0


class NotConfirmed(Exception):
    """The user said no (exit 1)."""


def resolve_draft_zarr(client: ApiClient, address: str) -> ZarrInfo:
    from zarrchive.client.address import is_versioned_address, parse_address
    from zarrchive.client.download import resolve_zarr

    if is_versioned_address(address):
        parsed = parse_address(address)
        if not parsed.is_draft:
            raise InvalidInput(
                f"{address!r} names a published version: what it pins never changes; "
                f"name the draft's Zarr ({parsed.dandiset}/{parsed.path}) or its id"
            )
        address = f"{parsed.dandiset}/{parsed.path}"
    return resolve_zarr(client, address)


def _look_up(client: ApiClient, zarr: ZarrInfo, paths: list[str]) -> tuple[int, int, int]:
    """``(directories, files, bytes)`` the deletion removes; :class:`NotFound` naming the
    paths that are neither files nor directories of the Zarr."""
    directories = files = size = 0
    missing: list[str] = []
    for path in paths:
        if path.strip("/") == "":
            raise InvalidInput(
                "the root directory can't be deleted: name its top-level files and directories"
            )
        found = client.stat_path(zarr.zarr_id, path)
        if found is None:
            missing.append(path)
            continue
        is_directory, count, nbytes = found
        directories += is_directory
        files += count
        size += nbytes
    if missing:
        raise NotFound(
            f"Zarr {zarr.zarr_id} has no file or directory {', '.join(map(repr, missing[:20]))}"
            + (f" (and {len(missing) - 20} more)" if len(missing) > 20 else "")
            + "; nothing was deleted"
        )
    return directories, files, size


def _what(directories: int, files: int, size: int) -> str:
    inside = f" (in {directories} director{'y' if directories == 1 else 'ies'})"
    return f"{files} file{'' if files == 1 else 's'}, {human_size(size)}" + (
        inside if directories else ""
    )


def _interactive() -> bool:
    """Whether a person can answer the question (stdin is a terminal)."""
    return sys.stdin.isatty()


def _confirm(zarr: ZarrInfo, what: str) -> None:
    from rich.console import Console
    from rich.prompt import Confirm

    question = f"Delete {what} from Zarr {zarr.zarr_id} ({zarr.dandiset}/{zarr.name})?"
    if not _interactive():
        raise InvalidInput(
            f"not deleting {what} from Zarr {zarr.zarr_id}: stdin is not a terminal to "
            "confirm; rerun with --yes"
        )
    if not Confirm.ask(question, default=False, console=Console(stderr=True)):
        raise NotConfirmed


def _wait(client: ApiClient, zarr_id: str, files: int) -> ZarrInfo:
    """Poll the Zarr until the archive has applied the deletion (no longer ``applying``)."""
    from zarrchive.errors import ArchiveBusy

    deadline = time.monotonic() + WAIT_LIMIT_SECONDS
    with make_progress() as progress:
        progress.start("deleting (applied by the archive)", files=files)
        while True:
            info = client.get_zarr(zarr_id)
            if info.upload_state != "applying":
                progress.advance(files=files)
                return info
            if time.monotonic() > deadline:
                raise ArchiveBusy(
                    f"Zarr {zarr_id} is still applying the deletion after "
                    f"{WAIT_LIMIT_SECONDS:.0f} s; it goes on: see `GET /api/zarr/{zarr_id}/`"
                )
            time.sleep(POLL_SECONDS)


def rm(
    address: str = typer.Argument(
        ...,
        help="The Zarr: its id, or DANDISET/ASSET_PATH (the draft's asset at that path).",
        show_default=False,
    ),
    path: list[str] = typer.Argument(
        ...,
        help="Files or directories of the Zarr (a directory: every file below it).",
        show_default=False,
    ),
    yes: bool = typer.Option(False, "--yes", "-y", help="Delete without asking."),
    no_wait: bool = typer.Option(
        False, "--no-wait", help="Do not wait for a large deletion the archive applies."
    ),
    api_url: str | None = API_URL_OPTION,
    token: str | None = TOKEN_OPTION,
) -> None:
    """Delete files and whole directories of a Zarr (you are asked first)."""
    from zarrchive.client.api import ApiClient

    paths = path

    def run() -> str:
        with ApiClient.from_env(api_url, token, on_retry=say_retry) as client:
            zarr = resolve_draft_zarr(client, address)
            directories, files, size = _look_up(client, zarr, paths)
            what = _what(directories, files, size)
            if not yes:
                _confirm(zarr, what)
            limit = client.info().max_batch_files
            info, applied = zarr, True
            for start in range(0, len(paths), limit):
                info, done = client.delete_paths(zarr.zarr_id, paths[start : start + limit])
                applied = applied and done
            if not applied and no_wait:
                return (
                    f"Zarr {zarr.zarr_id}: deleting {what}; the archive applies it in the "
                    "background (upload_state 'applying' until it is done)"
                )
            if not applied:
                info = _wait(client, zarr.zarr_id, files)
            return f"Zarr {zarr.zarr_id}: deleted {what}; checksum {info.checksum}"

    try:
        print(run_client_command("rm", run))
    except NotConfirmed:
        print("zarrchive rm: nothing deleted", file=sys.stderr)
        raise typer.Exit(1) from None

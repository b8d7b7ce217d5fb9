"""``zarrchive restore ADDRESS --to CHECKSUM``: roll a Zarr back to an earlier checksum.

Without ``--to``, the command lists the checksums the Zarr had, newest first (time, files,
size, whether it can be restored to it).  With it, the archive brings the Zarr back to that
checksum exactly (the files of that state at the versions its manifest records; the others
deleted); only differences are copied.  A restore is itself undone by restoring the
checksum it left.  A large restore is applied by the archive in the background: the command
waits for it unless ``--no-wait``.

Exit codes: 0 restored (or queued, with ``--no-wait``; or listed); 2 an error (one line on
stderr: no manifest of that checksum, not an owner, a published Zarr, an upload going
on...); 130 interrupted (a restore already sent goes on in the archive).
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

import typer

from zarrchive.cli._common import (
    API_URL_OPTION,
    TOKEN_OPTION,
    human_size,
    run_client_command,
    say_retry,
)

if TYPE_CHECKING:  # imported when used: `zarrchive --help` stays quick
    from zarrchive.client.api import ApiClient, ZarrInfo

#: Seconds between two looks at a Zarr whose restore the archive applies.
POLL_SECONDS = 0.5
#: How long to wait for a restore applied in the background before giving up.
WAIT_LIMIT_SECONDS = 3600.0


def _history(client: ApiClient, zarr: ZarrInfo) -> str:
    lines = [f"Zarr {zarr.zarr_id} ({zarr.dandiset}/{zarr.name}), newest first:"]
    for state in client.zarr_history(zarr.zarr_id):
        marks = ", ".join(
            mark
            for mark, shown in (("current", state.current), ("restorable", state.restorable))
            if shown
        )
        lines.append(
            f"  {state.checksum}  {state.time}  {state.file_count} files, "
            f"{human_size(state.size)}" + (f"  ({marks})" if marks else "")
        )
    return "\n".join(lines)


def _wait(client: ApiClient, zarr_id: str) -> ZarrInfo:
    """Poll the Zarr until the archive has applied the restore (no longer ``applying``)."""
    from zarrchive.errors import ArchiveBusy

    deadline = time.monotonic() + WAIT_LIMIT_SECONDS
    while True:
        info = client.get_zarr(zarr_id)
        if info.upload_state != "applying":
            return info
        if time.monotonic() > deadline:
            raise ArchiveBusy(
                f"Zarr {zarr_id} is still applying the restore after "
                f"{WAIT_LIMIT_SECONDS:.0f} s; it goes on: see `GET /api/zarr/{zarr_id}/`"
            )
        time.sleep(POLL_SECONDS)


def restore(
    address: str = typer.Argument(
        ...,
        help="The Zarr: its id, or DANDISET/ASSET_PATH (the draft's asset at that path).",
        show_default=False,
    ),
    to: str | None = typer.Option(
        None,
        "--to",
        help="The checksum to bring the Zarr back to; without it, list the Zarr's checksums.",
        show_default=False,
    ),
    no_wait: bool = typer.Option(
        False, "--no-wait", help="Do not wait for a large restore the archive applies."
    ),
    api_url: str | None = API_URL_OPTION,
    token: str | None = TOKEN_OPTION,
) -> None:
    """Roll a Zarr back to an earlier checksum, or list the checksums it had."""
    from zarrchive.cli.rm import resolve_draft_zarr
    from zarrchive.client.api import ApiClient

    def run() -> str:
        with ApiClient.from_env(api_url, token, on_retry=say_retry) as client:
            zarr = resolve_draft_zarr(client, address)
            if to is None:
                return _history(client, zarr)
            done = client.restore_zarr(zarr.zarr_id, to)
            copied, deleted = done.copied, done.deleted
            what = f"{copied} file{'' if copied == 1 else 's'} copied back, {deleted} deleted"
            if not done.applied:
                if no_wait:
                    return (
                        f"Zarr {zarr.zarr_id}: restoring to {to} ({what}); the archive applies "
                        "it in the background (upload_state 'applying' until it is done)"
                    )
                info = _wait(client, zarr.zarr_id)
            else:
                info = client.get_zarr(zarr.zarr_id)
            if not done.batches:
                return f"Zarr {zarr.zarr_id}: already at {to}; nothing changed"
            return f"Zarr {zarr.zarr_id}: restored to {info.checksum} ({what})"

    print(run_client_command("restore", run))

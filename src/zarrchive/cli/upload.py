"""``zarrchive upload``: a thin layer over :mod:`zarrchive.client.upload`.

Errors are one line on stderr and exit code 2; a checksum mismatch after the
upload exits 1 with a report; Ctrl-C exits 130 (a rerun finishes the job).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING

import typer

from zarrchive.cli._common import (
    API_URL_OPTION,
    JOBS_OPTION,
    TOKEN_OPTION,
    human_size,
    make_progress,
    run_client_command,
    say,
)
from zarrchive.cli.checksum import NO_CACHE_OPTION
from zarrchive.errors import ZarrchiveError

if TYPE_CHECKING:  # imported when used: `zarrchive --help` stays quick
    from zarrchive.client.api import ApiClient
    from zarrchive.client.upload import UploadResult


def summary(result: UploadResult, seconds: float | None = None) -> str:
    if result.dry_run:
        return (
            f"dry run: would upload {result.planned_uploads} files, delete "
            f"{result.planned_deletes}, skip {result.skipped} (of {result.local_files} local "
            f"files); Zarr {result.zarr_id or '(new: ' + result.name + ')'}"
        )
    rate = ""
    if seconds and result.uploaded_bytes:
        rate = f" at {human_size(int(result.uploaded_bytes / seconds))}/s"
    return (
        f"Zarr {result.zarr_id}: uploaded {result.uploaded} files "
        f"({human_size(result.uploaded_bytes)}{rate}), deleted {result.deleted}, skipped "
        f"{result.skipped}; checksum {result.remote_checksum}"
        + (" (matches the local one)" if result.ok else "")
    )


def upload(
    local: Path = typer.Argument(..., help="The local Zarr directory.", show_default=False),
    dandiset: str = typer.Option(..., "--dandiset", "-d", help="The dandiset's identifier."),
    path: str | None = typer.Option(
        None,
        "--path",
        help="The Zarr's asset path in the dandiset (default: the directory's name).",
        show_default=False,
    ),
    jobs: int | None = JOBS_OPTION,
    dry_run: bool = typer.Option(False, "--dry-run", help="Only say what would be done."),
    force: bool = typer.Option(
        False,
        "--force",
        help="Upload even a directory that is empty or has no Zarr metadata at its root "
        "(.zgroup, .zarray or zarr.json).",
    ),
    batch_files: int | None = typer.Option(
        None,
        "--batch-files",
        help="Files per upload batch (default and maximum: the server's limit).",
        show_default=False,
    ),
    no_cache: bool = NO_CACHE_OPTION,
    api_url: str | None = API_URL_OPTION,
    token: str | None = TOKEN_OPTION,
) -> None:
    """Upload a local Zarr: only new and changed files; delete files gone locally."""
    import time

    from zarrchive.client.api import ApiClient
    from zarrchive.client.digest_cache import disable_default_cache
    from zarrchive.client.upload import Uploader

    if no_cache:
        disable_default_cache()

    mode = ["freeze"]

    def run() -> UploadResult:
        with ApiClient.from_env(api_url, token) as client, make_progress() as progress:
            uploader = Uploader(client, jobs=jobs, progress=progress, batch_files=batch_files)
            result = uploader.upload(
                local, dandiset=dandiset, name=path, dry_run=dry_run, require_zarr=not force
            )
            mode[0] = _published_zarrs(client)
            return result

    started = time.monotonic()
    result = run_client_command("upload", run)
    elapsed = time.monotonic() - started
    print(summary(result, elapsed))
    for note in result.notes:
        if note.startswith("uploaded, but"):
            say(note)
    if result.asset_created:  # once per Zarr: when it becomes part of the dandiset
        if mode[0] == "snapshot":
            say(
                f"NOTE: publishing dandiset {dandiset} pins this Zarr's current state for the "
                "version; the draft's Zarr stays writable"
            )
        else:
            say(
                f"NOTE: publishing dandiset {dandiset} makes this Zarr immutable: after "
                "publication it can never change again"
            )
    if not result.ok:
        print(
            "zarrchive upload: CHECKSUM MISMATCH: the archive's checksum "
            f"{result.remote_checksum} differs from the local {result.local_checksum}. "
            "Run `zarrchive verify "
            f"{result.zarr_id} {local}` to see the differing files, then upload again.",
            file=sys.stderr,
        )
        raise typer.Exit(1)


def _published_zarrs(client: ApiClient) -> str:
    """The archive's ``published_zarrs`` mode (``freeze`` when it does not say)."""
    try:
        info = client.request("GET", "/api/info/").json()
    except (ZarrchiveError, ValueError):
        return "freeze"
    mode = info.get("published_zarrs") if isinstance(info, dict) else None
    return mode if isinstance(mode, str) else "freeze"

"""``zarrchive download`` and ``zarrchive verify``: thin layers over
:mod:`zarrchive.client.download`.

Errors are one line on stderr and exit code 2; a checksum mismatch after a
download, or any difference found by verify, exits 1.
"""

from __future__ import annotations

import sys
from pathlib import Path
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
from zarrchive.cli.checksum import NO_CACHE_OPTION

if TYPE_CHECKING:  # imported when used: `zarrchive --help` stays quick
    from zarrchive.client.download import DownloadResult, VerifyResult

ZARR_ARGUMENT = typer.Argument(
    ...,
    help="The Zarr: its id, DANDISET/ASSET_PATH (the draft's asset at that path), or "
    "DANDISET@VERSION/ASSET_PATH (exactly the state that published version pins).",
    show_default=False,
)

DOWNLOAD_JOBS_OPTION = typer.Option(
    None,
    "--jobs",
    "-j",
    help="Parallel GETs (default: 16, or the machine's CPUs + 2 if more); a file of 64 MiB "
    "or more comes in ranged GETs of 16 MiB on as many more.",
    show_default=False,
)

VERIFY_JOBS_OPTION = typer.Option(
    None,
    "--jobs",
    "-j",
    help="Parallel requests (listings, local hashing; default: 8 or more).",
    show_default=False,
)


def download(
    zarr: str = ZARR_ARGUMENT,
    dest: Path = typer.Argument(..., help="The local directory.", show_default=False),
    jobs: int | None = DOWNLOAD_JOBS_OPTION,
    sync: bool = typer.Option(False, "--sync", help="Delete local files not in the archive."),
    api_url: str | None = API_URL_OPTION,
    token: str | None = TOKEN_OPTION,
    no_cache: bool = NO_CACHE_OPTION,
) -> None:
    """Download a Zarr (only missing or differing files); check every md5 and the checksum.

    An interrupted download resumes: files already in place are skipped (a stat each when
    the digest cache knows them), a big file's finished parts are kept."""
    from zarrchive.client.api import ApiClient
    from zarrchive.client.local.digest_cache import disable_default_cache
    from zarrchive.client.snapshot import SnapshotDownloader

    if no_cache:
        disable_default_cache()

    def run() -> DownloadResult:
        with (
            ApiClient.from_env(api_url, token, on_retry=say_retry) as client,
            make_progress() as progress,
            SnapshotDownloader(client, jobs=jobs, progress=progress) as downloader,
        ):
            return downloader.download(zarr, dest, sync=sync)

    result = run_client_command("download", run)
    extra = f", {len(result.extra)} local files not in the archive kept" if result.extra else ""
    print(
        f"Zarr {result.zarr_id}: downloaded {result.downloaded} files "
        f"({human_size(result.downloaded_bytes)}), skipped {result.skipped}, deleted "
        f"{result.deleted}{extra}; checksum {result.local_checksum}"
        + (" (matches the archive)" if result.ok else "")
    )
    if result.extra:
        print(
            f"zarrchive download: {len(result.extra)} local files are not in the archive "
            f"(first: {result.extra[0]}); --sync deletes them",
            file=sys.stderr,
        )
    if not result.ok:
        print(
            f"zarrchive download: CHECKSUM MISMATCH: the downloaded files hash to "
            f"{result.local_checksum}, the archive says {result.remote_checksum} "
            "(did the Zarr change during the download?); run the download again",
            file=sys.stderr,
        )
        raise typer.Exit(1)


def verify(
    zarr: str = ZARR_ARGUMENT,
    local: Path = typer.Argument(..., help="The local directory.", show_default=False),
    jobs: int | None = VERIFY_JOBS_OPTION,
    api_url: str | None = API_URL_OPTION,
    token: str | None = TOKEN_OPTION,
    no_cache: bool = NO_CACHE_OPTION,
) -> None:
    """Compare a local directory with a Zarr of the archive (no data transferred).

    Prints each differing path, prefixed by missing (only in the archive), differs or
    extra (only local); exits 1 if there is any.
    """
    from zarrchive.client.api import ApiClient
    from zarrchive.client.local.digest_cache import disable_default_cache
    from zarrchive.client.snapshot import SnapshotDownloader

    if no_cache:
        disable_default_cache()

    def run() -> VerifyResult:
        with (
            ApiClient.from_env(api_url, token, on_retry=say_retry) as client,
            make_progress() as progress,
            SnapshotDownloader(client, jobs=jobs, progress=progress) as verifier,
        ):
            return verifier.verify(zarr, local)

    result = run_client_command("verify", run)
    for label, paths in (
        ("missing", result.missing),
        ("differs", result.differ),
        ("extra", result.extra),
    ):
        for path in paths:
            print(f"{label}\t{path}")
    if result.ok:
        print(f"OK: {local} equals Zarr {result.zarr_id} (checksum {result.remote_checksum})")
        return
    print(
        f"zarrchive verify: {local} differs from Zarr {result.zarr_id}: "
        f"{len(result.missing)} missing, {len(result.differ)} differ, {len(result.extra)} extra",
        file=sys.stderr,
    )
    raise typer.Exit(1)

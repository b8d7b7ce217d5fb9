"""``zarrchive upload``: a thin layer over :mod:`zarrchive.client.upload`.

Errors are one line on stderr and exit code 2; a checksum mismatch after the
upload exits 1 with a report; Ctrl-C exits 130 and says what it left: the batch being sent
stays open, with what S3 holds, for the rerun to take up (it sends only what is missing);
``--cancel`` cancels it instead.
"""

from __future__ import annotations

import shlex
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import typer

from zarrchive.cli._common import (
    API_URL_OPTION,
    JOBS_OPTION,
    TOKEN_OPTION,
    make_progress,
    run_client_command,
    say,
)
from zarrchive.cli.checksum import NO_CACHE_OPTION
from zarrchive.cli.upload_report import left_open_note, summary
from zarrchive.errors import NetworkError, ZarrchiveError

if TYPE_CHECKING:  # imported when used: `zarrchive --help` stays quick
    from zarrchive.client.api import ApiClient
    from zarrchive.client.upload import UploadResult


INCLUDE_HELP = (
    "Only the files GLOB selects (repeatable; needs --patch). GLOB is matched against each "
    "file's path relative to the Zarr root, '/'-separated: '**' as a whole segment spans any "
    "number of directories, '*' and '?' never cross '/', [abc] and [!abc] match one "
    "character; a GLOB that matches a directory selects every file below it. Directories "
    "no GLOB can reach are never walked, files not selected never read. E.g. "
    "--include '**/.zattrs' --include '**/zarr.json' (metadata only), --include 'arr/0/**'."
)
EXCLUDE_HELP = (
    "Leave out the files GLOB selects (repeatable; needs --patch; the rules of --include; "
    "an excluded file is left out even if an --include selects it)."
)
PATCH_HELP = (
    "Send the new and changed local files and delete nothing: for a partial local copy (the "
    "root's Zarr metadata is not required). Compares with the archive's listings of the "
    "directories that hold the local files only, never the whole Zarr, and checks the "
    "archive's new checksum against the one predicted from those listings plus the patch, "
    "which fails if anything else in the Zarr changed meanwhile (a local checksum would "
    "need the whole Zarr here)."
)


CANCEL_HELP = (
    "Cancel the upload batch an interrupted run left open on the Zarr (and the batch opened "
    "ahead of it) instead of uploading: what they sent is dropped, big files' S3 multipart "
    "uploads are aborted. Without it, running the command again takes the batch up and sends "
    "only what S3 does not hold."
)


def upload(
    local: str = typer.Argument(
        ...,
        help="The local Zarr directory, or s3://BUCKET/PREFIX: a Zarr in a bucket, uploaded "
        "without passing through this disk (see --source-endpoint-url).",
        show_default=False,
    ),
    dandiset: str = typer.Option(..., "--dandiset", "-d", help="The dandiset's identifier."),
    path: str | None = typer.Option(
        None,
        "--path",
        help="The Zarr's asset path in the dandiset (default: the directory's name).",
        show_default=False,
    ),
    jobs: int | None = JOBS_OPTION,
    dry_run: bool = typer.Option(
        False,
        "--dry-run",
        help="Only say what would be done (counts, sizes, the first paths); change nothing.",
    ),
    patch: bool = typer.Option(False, "--patch", help=PATCH_HELP),
    include: list[str] = typer.Option(
        [], "--include", metavar="GLOB", help=INCLUDE_HELP, show_default=False
    ),
    exclude: list[str] = typer.Option(
        [], "--exclude", metavar="GLOB", help=EXCLUDE_HELP, show_default=False
    ),
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
    cancel: bool = typer.Option(False, "--cancel", help=CANCEL_HELP),
    source_endpoint_url: str | None = typer.Option(
        None,
        "--source-endpoint-url",
        help="With s3://: the source's S3 endpoint (default: AWS, or AWS_ENDPOINT_URL).",
        show_default=False,
    ),
    source_profile: str | None = typer.Option(
        None,
        "--source-profile",
        help="With s3://: the AWS profile whose credentials read the source (default: the "
        "usual AWS variables and files).",
        show_default=False,
    ),
    copy: str = typer.Option(
        "auto",
        "--copy",
        help="With s3://: 'server' (the archive copies from the source bucket itself, when it "
        "is on the archive's S3 and allowed: nothing passes through this machine), 'client' "
        "(streamed from the source to the archive's S3 through this machine, never to disk) "
        "or 'auto' (server when the archive can, else client).",
    ),
    api_url: str | None = API_URL_OPTION,
    token: str | None = TOKEN_OPTION,
) -> None:
    """Upload a local Zarr: only new and changed files; delete files gone locally.

    With --patch (for a partial local copy): delete nothing, and compare only the files
    --include/--exclude select."""
    import time

    from zarrchive.client.api import ApiClient
    from zarrchive.client.local.digest_cache import disable_default_cache
    from zarrchive.client.selection import Selection
    from zarrchive.client.upload import Uploader, require_patch_for_filter

    run_client_command("upload", lambda: require_patch_for_filter(bool(include or exclude), patch))
    selection = run_client_command("upload", lambda: Selection.parse(include, exclude))
    if no_cache:
        disable_default_cache()

    if cancel:
        _cancel(Path(local), dandiset, path, api_url, token)
        return
    if local.startswith("s3://"):
        from zarrchive.cli.s3_upload import import_from_s3

        import_from_s3(
            local,
            dandiset=dandiset,
            path=path,
            jobs=jobs,
            dry_run=dry_run,
            patch=patch,
            selection=selection,
            force=force,
            batch_files=batch_files,
            source_endpoint_url=source_endpoint_url,
            source_profile=source_profile,
            copy=copy,
            api_url=api_url,
            token=token,
        )
        return
    mode = ["freeze"]
    again = " ".join(
        ["zarrchive upload", shlex.quote(str(local)), "--dandiset", shlex.quote(dandiset)]
        + (["--path", shlex.quote(path)] if path is not None else [])
    )

    def run() -> UploadResult:
        with ApiClient.from_env(api_url, token) as client, make_progress() as progress:
            client.on_retry = lambda event: progress.note(str(event))  # retries said
            uploader = Uploader(client, jobs=jobs, progress=progress, batch_files=batch_files)
            try:
                result = uploader.upload(
                    local,
                    dandiset=dandiset,
                    name=path,
                    dry_run=dry_run,
                    require_zarr=not force,
                    patch=patch,
                    selection=selection,
                )
            except (KeyboardInterrupt, NetworkError):
                if uploader.left_open is not None:
                    progress.note(left_open_note(uploader.left_open, again))
                raise
            mode[0] = _published_zarrs(client)
            return result

    started = time.monotonic()
    result = run_client_command("upload", run)
    elapsed = time.monotonic() - started
    print(summary(result, elapsed))
    for note in result.notes:
        if note.startswith(("uploaded, but", "nothing to upload")):
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
    if not result.ok and result.patch:
        print(
            "zarrchive upload: CHECKSUM MISMATCH: the archive's checksum "
            f"{result.remote_checksum} differs from {result.expected_checksum}, the one "
            f"predicted from the Zarr as read before this patch (checksum "
            f"{result.base_checksum}) plus the patch's files: another upload or deletion "
            "changed the Zarr meanwhile (this patch's files were sent and applied). Run the "
            "same command again (it compares again and sends what differs).",
            file=sys.stderr,
        )
        raise typer.Exit(1)
    if not result.ok:
        print(
            "zarrchive upload: CHECKSUM MISMATCH: the archive's checksum "
            f"{result.remote_checksum} differs from the local {result.local_checksum}. "
            "Run `zarrchive verify "
            f"{result.zarr_id} {local}` to see the differing files, then upload again.",
            file=sys.stderr,
        )
        raise typer.Exit(1)


def _cancel(
    local: Path, dandiset: str, path: str | None, api_url: str | None, token: str | None
) -> None:
    """``--cancel``: cancel the batch open on the Zarr of *local*, and say what was done."""
    from zarrchive.client.api import ApiClient
    from zarrchive.client.upload import Uploader

    def run() -> str | None:
        with ApiClient.from_env(api_url, token) as client:
            return Uploader(client).cancel(local, dandiset=dandiset, name=path)

    name = path if path is not None else local.resolve().name
    cancelled = run_client_command("upload", run)
    if cancelled is None:
        say(
            f"no upload batch is open on the Zarr {name!r} of dandiset {dandiset}: nothing to cancel"
        )
        return
    say(
        f"cancelled the upload batch open on Zarr {cancelled} (and any batch opened ahead of "
        "it): what it had sent is dropped; the next upload sends everything it needs"
    )


def _published_zarrs(client: ApiClient) -> str:
    """The archive's ``published_zarrs`` mode (``freeze`` when it does not say), from its
    info the upload already read."""
    try:
        return client.info().published_zarrs
    except ZarrchiveError:
        return "freeze"

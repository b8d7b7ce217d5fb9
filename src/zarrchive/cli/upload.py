"""``zarrchive upload``: a thin layer over :mod:`zarrchive.client.upload`.

Errors are one line on stderr and exit code 2; a checksum mismatch after the
upload exits 1 with a report; Ctrl-C exits 130 (a rerun finishes the job).
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TypeVar

import typer

from zarrchive.cli._common import human_size
from zarrchive.client.api import ApiClient
from zarrchive.client.progress import PlainProgress, Progress, RichProgress
from zarrchive.client.upload import Uploader, UploadResult
from zarrchive.errors import ZarrchiveError

T = TypeVar("T")

API_URL_OPTION = typer.Option(
    None,
    "--api-url",
    envvar="ZARRCHIVE_URL",
    help="The archive's URL (or ZARRCHIVE_URL).",
    show_default=False,
)
TOKEN_OPTION = typer.Option(
    None,
    "--token",
    envvar="ZARRCHIVE_TOKEN",
    help="Your API token (or ZARRCHIVE_TOKEN).",
    show_default=False,
)
JOBS_OPTION = typer.Option(
    None, "--jobs", "-j", help="Parallel transfers (default: 8 or more).", show_default=False
)


def say(message: str) -> None:
    print(f"zarrchive: {message}", file=sys.stderr, flush=True)


def run_client_command(command: str, fn: Callable[[], T]) -> T:
    """Run *fn*; zarrchive errors, OS errors and Ctrl-C become one line and an exit code."""
    try:
        return fn()
    except ZarrchiveError as exc:
        print(f"zarrchive {command}: {exc.message}", file=sys.stderr)
        raise typer.Exit(2) from None
    except OSError as exc:
        where = f" {exc.filename!r}" if exc.filename else ""
        print(f"zarrchive {command}:{where} {exc.strerror or exc}", file=sys.stderr)
        raise typer.Exit(2) from None
    except KeyboardInterrupt:
        print(
            f"zarrchive {command}: interrupted; run the same command again to finish",
            file=sys.stderr,
        )
        raise typer.Exit(130) from None


@contextmanager
def make_progress(quiet: bool = False) -> Iterator[Progress]:
    progress: Progress = RichProgress() if sys.stderr.isatty() and not quiet else PlainProgress()
    try:
        yield progress
    finally:
        progress.stop()


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
    batch_files: int | None = typer.Option(
        None,
        "--batch-files",
        help="Files per upload batch (default and maximum: the server's limit).",
        show_default=False,
    ),
    api_url: str | None = API_URL_OPTION,
    token: str | None = TOKEN_OPTION,
) -> None:
    """Upload a local Zarr: only new and changed files; delete files gone locally."""
    import time

    def run() -> UploadResult:
        with ApiClient.from_env(api_url, token) as client, make_progress() as progress:
            uploader = Uploader(client, jobs=jobs, progress=progress, batch_files=batch_files)
            return uploader.upload(local, dandiset=dandiset, name=path, dry_run=dry_run)

    started = time.monotonic()
    result = run_client_command("upload", run)
    elapsed = time.monotonic() - started
    print(summary(result, elapsed))
    for note in result.notes:
        if note.startswith("uploaded, but"):
            say(note)
    if not result.dry_run and result.ok:
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

"""``zarrchive upload s3://BUCKET/PREFIX``: a Zarr in a bucket uploaded without passing
through the client's disk (:mod:`zarrchive.client.s3_import`); the report is the local
upload's (:func:`zarrchive.cli.upload_report.summary`)."""

from __future__ import annotations

import sys
import time
from typing import TYPE_CHECKING

import typer

from zarrchive.cli._common import make_progress, run_client_command, say
from zarrchive.cli.upload_report import summary

if TYPE_CHECKING:
    from zarrchive.client.selection import Selection
    from zarrchive.client.upload import UploadResult

COPY_MODES = ("auto", "server", "client")


def import_from_s3(
    url: str,
    *,
    dandiset: str,
    path: str | None,
    jobs: int | None,
    dry_run: bool,
    patch: bool,
    selection: Selection,
    force: bool,
    batch_files: int | None,
    source_endpoint_url: str | None,
    source_profile: str | None,
    copy: str,
    api_url: str | None,
    token: str | None,
) -> None:
    from zarrchive.client.api import ApiClient
    from zarrchive.client.s3_import import CopyMode, S3Importer
    from zarrchive.client.s3_source import S3Location, S3Source, s3_client

    if copy not in COPY_MODES:
        print(
            f"zarrchive upload: --copy {copy!r}: expected one of {', '.join(COPY_MODES)}",
            file=sys.stderr,
        )
        raise typer.Exit(2)
    mode: CopyMode = "server" if copy == "server" else "client" if copy == "client" else "auto"
    location = run_client_command("upload", lambda: S3Location.parse(url))

    def run() -> UploadResult:
        source = S3Source(location, s3_client(source_endpoint_url, source_profile))
        with ApiClient.from_env(api_url, token) as client, make_progress() as progress:
            client.on_retry = lambda event: progress.note(str(event))
            importer = S3Importer(
                client,
                source,
                source_endpoint_url=source_endpoint_url,
                mode=mode,
                jobs=jobs,
                progress=progress,
                batch_files=batch_files,
            )
            return importer.run(
                dandiset=dandiset,
                name=path,
                dry_run=dry_run,
                patch=patch,
                selection=selection,
                require_zarr=not force,
            )

    started = time.monotonic()
    result = run_client_command("upload", run)
    print(summary(result, time.monotonic() - started))
    for note in result.notes:
        say(note)
    if not result.ok:
        expected = result.expected_checksum if result.patch else result.local_checksum
        print(
            f"zarrchive upload: CHECKSUM MISMATCH: the archive's checksum {result.remote_checksum} "
            f"differs from {expected}, the source's: run the same command again (it compares "
            "again and sends what differs).",
            file=sys.stderr,
        )
        raise typer.Exit(1)

"""``zarrchive manifest``: Zarr manifest files."""

from __future__ import annotations

from collections import Counter

import typer

from zarrchive.cli._common import fail, friendly_errors, open_archive

app = typer.Typer(help="Zarr manifest files.", no_args_is_help=True)


@app.command("backfill")
@friendly_errors
def backfill(
    zarr_ids: list[str] = typer.Argument(None, help="Zarr ids"),
    all_zarrs: bool = typer.Option(False, "--all", help="Every Zarr of the archive"),
) -> None:
    """Write the missing manifests of the current checksums (idempotent)."""
    from rich.console import Console
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
    )
    from sqlalchemy import select

    from zarrchive.db.models import Zarr
    from zarrchive.services.manifests import ManifestStatus, write_manifest

    if bool(zarr_ids) == all_zarrs:
        raise fail("name Zarr ids or pass --all (not both)")

    console = Console(stderr=True, soft_wrap=True)
    counts: Counter[str] = Counter()
    with open_archive() as archive:
        if all_zarrs:
            with archive.db.session() as session:
                zarr_ids = list(session.scalars(select(Zarr.id).order_by(Zarr.created_at)))
        with Progress(
            TextColumn("manifests"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            console=console,
            transient=True,
        ) as progress:
            task = progress.add_task("backfill", total=len(zarr_ids))
            for zarr_id in zarr_ids:
                outcome = write_manifest(archive, zarr_id)
                counts[outcome.status] += 1
                if outcome.status is ManifestStatus.WRITTEN or outcome.mismatch:
                    alarm = (
                        f" [red]MISMATCH: S3 holds {outcome.listing_checksum}[/]"
                        if outcome.mismatch
                        else ""
                    )
                    progress.console.print(f"{outcome.status} {zarr_id} {outcome.checksum}{alarm}")
                elif outcome.status is not ManifestStatus.EXISTS:
                    progress.console.print(f"{outcome.status} {zarr_id} (try again when idle)")
                progress.advance(task)
    summary = ", ".join(f"{counts[s]} {s}" for s in ManifestStatus)
    console.print(f"{len(zarr_ids)} Zarrs: {summary}")


@app.command("audit")
@friendly_errors
def audit(
    zarr_ids: list[str] = typer.Argument(None, help="Zarr ids"),
    all_zarrs: bool = typer.Option(False, "--all", help="Every Zarr of the archive"),
) -> None:
    """Compare the manifest of each Zarr's current checksum with a listing of S3 and print
    every difference (missing, extra, another version, ETag, size or time).  Exit code 1
    when any differs or could not be audited (busy: run again at rest)."""
    from rich.console import Console
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
    )
    from sqlalchemy import select

    from zarrchive.db.models import Zarr
    from zarrchive.services.manifests import AuditStatus, audit_manifest

    if bool(zarr_ids) == all_zarrs:
        raise fail("name Zarr ids or pass --all (not both)")

    console = Console(stderr=True, soft_wrap=True)
    counts: Counter[str] = Counter()
    with open_archive() as archive:
        if all_zarrs:
            with archive.db.session() as session:
                zarr_ids = list(session.scalars(select(Zarr.id).order_by(Zarr.created_at)))
        with Progress(
            TextColumn("audit"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            console=console,
            transient=True,
        ) as progress:
            task = progress.add_task("audit", total=len(zarr_ids))
            for zarr_id in zarr_ids:
                outcome = audit_manifest(archive, zarr_id)
                counts[outcome.status] += 1
                if outcome.status is AuditStatus.DIFFERS:
                    progress.console.print(
                        f"differs {zarr_id} {outcome.checksum}: "
                        f"{outcome.difference_count} differences"
                    )
                    for difference in outcome.differences:
                        progress.console.print(f"  {difference.describe()}", markup=False)
                    hidden = outcome.difference_count - len(outcome.differences)
                    if hidden:
                        progress.console.print(f"  ... and {hidden} more")
                elif outcome.status is not AuditStatus.MATCHES:
                    progress.console.print(f"{outcome.status} {zarr_id} {outcome.checksum}")
                progress.advance(task)
    summary = ", ".join(f"{counts[s]} {s}" for s in AuditStatus)
    console.print(f"{len(zarr_ids)} Zarrs: {summary}")
    if counts[AuditStatus.DIFFERS] or counts[AuditStatus.BUSY] or counts[AuditStatus.SUPERSEDED]:
        raise typer.Exit(1)

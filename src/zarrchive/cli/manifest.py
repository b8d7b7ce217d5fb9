"""``zarrchive manifest``: Zarr manifest files."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from typing import TYPE_CHECKING

import typer

from zarrchive.cli._common import fail, friendly_errors, open_archive

if TYPE_CHECKING:
    from rich.console import Console

    from zarrchive.services.runtime import Archive

app = typer.Typer(help="Zarr manifest files.", no_args_is_help=True)


def _for_each_zarr(
    zarr_ids: list[str],
    all_zarrs: bool,
    label: str,
    visit: Callable[[Archive, str, Console], str],
) -> Counter[str]:
    """Run *visit* (which prints through the console it is given and returns an outcome's
    status) on each named Zarr, or every Zarr with *all_zarrs*, under a progress bar; print
    the count of each status and return them."""
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
    from sqlalchemy import select

    from zarrchive.db.models import Zarr

    if bool(zarr_ids) == all_zarrs:
        raise fail("name Zarr ids or pass --all (not both)")
    console = Console(stderr=True, soft_wrap=True)
    counts: Counter[str] = Counter()
    with open_archive() as archive:
        if all_zarrs:
            with archive.db.session() as session:
                zarr_ids = list(session.scalars(select(Zarr.id).order_by(Zarr.created_at)))
        columns = (TextColumn(label), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
        with Progress(*columns, console=console, transient=True) as progress:
            task = progress.add_task(label, total=len(zarr_ids))
            for zarr_id in zarr_ids:
                counts[visit(archive, zarr_id, progress.console)] += 1
                progress.advance(task)
    return counts


@app.command("backfill")
@friendly_errors
def backfill(
    zarr_ids: list[str] = typer.Argument(None, help="Zarr ids"),
    all_zarrs: bool = typer.Option(False, "--all", help="Every Zarr of the archive"),
) -> None:
    """Write the missing manifests of the current checksums (idempotent)."""
    from rich.console import Console

    from zarrchive.services.zarr_engine.manifests import ManifestStatus, write_manifest

    def visit(archive: Archive, zarr_id: str, console: Console) -> str:
        outcome = write_manifest(archive, zarr_id)
        if outcome.status is ManifestStatus.WRITTEN or outcome.mismatch:
            alarm = (
                f" [red]MISMATCH: S3 holds {outcome.listing_checksum}[/]"
                if outcome.mismatch
                else ""
            )
            console.print(f"{outcome.status} {zarr_id} {outcome.checksum}{alarm}")
        elif outcome.status is not ManifestStatus.EXISTS:
            console.print(f"{outcome.status} {zarr_id} (try again when idle)")
        return outcome.status

    counts = _for_each_zarr(zarr_ids, all_zarrs, "manifests", visit)
    summary = ", ".join(f"{counts[s]} {s}" for s in ManifestStatus)
    Console(stderr=True, soft_wrap=True).print(f"{counts.total()} Zarrs: {summary}")


@app.command("audit")
@friendly_errors
def audit(
    zarr_ids: list[str] = typer.Argument(None, help="Zarr ids"),
    all_zarrs: bool = typer.Option(False, "--all", help="Every Zarr of the archive"),
) -> None:
    """Compare the manifest of each Zarr's current checksum with a listing of S3 and print
    every difference (missing, extra, another version, ETag, size or time); objects that
    hash to another checksum than the archive's raise the Zarr's checksum-mismatch alarm.
    Exit code 1 when any differs or could not be audited (busy: run again at rest)."""
    from rich.console import Console

    from zarrchive.services.zarr_engine.manifests import AuditStatus, audit_manifest

    def visit(archive: Archive, zarr_id: str, console: Console) -> str:
        outcome = audit_manifest(archive, zarr_id)
        if outcome.status is AuditStatus.DIFFERS:
            console.print(
                f"differs {zarr_id} {outcome.checksum}: {outcome.difference_count} differences"
            )
            for difference in outcome.differences:
                console.print(f"  {difference.describe()}", markup=False)
            hidden = outcome.difference_count - len(outcome.differences)
            if hidden:
                console.print(f"  ... and {hidden} more")
            if outcome.s3_checksum != outcome.checksum:
                held = outcome.s3_checksum or "no checksum (an object without an md5)"
                console.print(
                    f"  [red]MISMATCH: S3 holds {held}[/]: the alarm is raised (the manifest's "
                    "zarrChecksumMismatch, the Zarr's checksum_mismatch) until "
                    f"'zarrchive admin fsck --repair {zarr_id}'",
                    soft_wrap=True,
                )
        elif outcome.status is not AuditStatus.MATCHES:
            console.print(f"{outcome.status} {zarr_id} {outcome.checksum}")
        return outcome.status

    counts = _for_each_zarr(zarr_ids, all_zarrs, "audit", visit)
    summary = ", ".join(f"{counts[s]} {s}" for s in AuditStatus)
    Console(stderr=True, soft_wrap=True).print(f"{counts.total()} Zarrs: {summary}")
    if counts[AuditStatus.DIFFERS] or counts[AuditStatus.BUSY] or counts[AuditStatus.SUPERSEDED]:
        raise typer.Exit(1)

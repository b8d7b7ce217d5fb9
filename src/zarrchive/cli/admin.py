"""``zarrchive admin``: administration against the archive's database and S3."""

from __future__ import annotations

import json

import typer

from zarrchive.cli._common import fail, friendly_errors, open_archive
from zarrchive.config import Settings

app = typer.Typer(help="Administer the archive (users, fsck).", no_args_is_help=True)


@app.command("create-user")
@friendly_errors
def create_user(
    name: str = typer.Argument(..., help="The new user's name"),
    admin: bool = typer.Option(False, "--admin", help="Make the user an administrator"),
) -> None:
    """Create a user and print a new API token for it (shown only once)."""
    from zarrchive.db.session import Database
    from zarrchive.services import auth

    settings = Settings.from_env()
    db = Database(settings.database_url, strict=settings.strict_sessions)
    try:
        db.migrate()
        with db.write_session() as session:
            _, token = auth.create_user(session, name, admin=admin)
    finally:
        db.dispose()
    print(token)


@app.command("fsck")
@friendly_errors
def fsck(
    zarr_ids: list[str] = typer.Argument(None, help="Zarr ids to check"),
    all_zarrs: bool = typer.Option(False, "--all", help="Check every Zarr"),
    repair: bool = typer.Option(False, "--repair", help="Rewrite what differs"),
    as_json: bool = typer.Option(False, "--json", help="Print reports as JSON lines"),
) -> None:
    """Recompute Zarr tree hashes from S3 listings; report (and repair) differences."""
    from rich.console import Console
    from sqlalchemy import select

    from zarrchive.db.models import Zarr
    from zarrchive.services.fsck import fsck as run_fsck

    if not zarr_ids and not all_zarrs:
        raise fail("name Zarr ids or pass --all")
    console = Console(stderr=True, soft_wrap=True)
    bad = 0
    with open_archive() as archive:
        if all_zarrs:
            with archive.db.session() as session:
                zarr_ids = list(session.scalars(select(Zarr.id).order_by(Zarr.created_at)))
        for zarr_id in zarr_ids:
            report = run_fsck(archive, zarr_id, repair=repair)
            if as_json:
                print(json.dumps(report.__dict__))
                continue
            if report.ok:
                console.print(f"[green]ok[/] {report.zarr_id} {report.checksum_from_s3}")
            else:
                bad += 1
                state = "repaired" if report.repaired else "differs"
                console.print(f"[red]{state}[/] {report.zarr_id}")
                for problem in report.problems:
                    console.print(f"  {problem}")
    if bad and not repair:
        raise typer.Exit(1)


@app.command("gc")
@friendly_errors
def gc(
    zarr_ids: list[str] = typer.Argument(None, help="Zarr ids (default: every Zarr)"),
    apply: bool = typer.Option(False, "--apply", help="Remove (default: only print)"),
) -> None:
    """Remove what no published snapshot and no open batch needs: noncurrent object versions
    of Zarrs (and of their .checksum nodes) that no pinned manifest names, and the staging
    areas of batches no longer open.  A dry run (nothing removed) unless --apply."""
    from rich.console import Console

    from zarrchive.cli._common import human_size
    from zarrchive.services.snapshots import collect_garbage, gc_zarr_ids

    console = Console(stderr=True, soft_wrap=True)
    total_versions = total_bytes = total_staging = 0
    verb = "removed" if apply else "would remove"
    with open_archive() as archive:
        for zarr_id in zarr_ids or gc_zarr_ids(archive):
            report = collect_garbage(archive, zarr_id, apply=apply)
            if report.skipped:
                console.print(f"[yellow]skipped[/] {report.zarr_id}: {report.skipped}")
                continue
            for key, version_id, size in report.versions:
                print(f"{verb}\t{key}\t{version_id}\t{size}")
            for prefix, size in report.staging:
                print(f"{verb}\t{prefix}\t(staging)\t{size}")
            total_versions += len(report.versions)
            total_staging += len(report.staging)
            total_bytes += report.bytes
    console.print(
        f"{verb} {total_versions} object versions and {total_staging} staging areas: "
        f"{total_bytes} bytes ({human_size(total_bytes)})"
        + ("" if apply else "; rerun with --apply to remove them")
    )

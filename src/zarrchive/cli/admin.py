"""``zarrchive admin``: administration against the archive's database and S3."""

from __future__ import annotations

import json
import shlex
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import typer

from zarrchive.cli._common import admin_settings, fail, friendly_errors, open_archive

if TYPE_CHECKING:
    from datetime import timedelta

    from zarrchive.services.runtime import Archive

app = typer.Typer(help="Administer the archive (users, fsck, gc).", no_args_is_help=True)


def first_user_note(archive: Archive) -> str | None:
    """What ``zarrchive serve`` says on an archive without users: how to create the first
    one (its token is printed once), with the data directory, so the command works from any
    directory.  None once the archive has a user."""
    from sqlalchemy import exists, select

    from zarrchive.db.models import User

    with archive.db.session() as session:
        if session.scalar(select(exists().where(User.id.is_not(None)))):
            return None
    settings = archive.settings
    prefix = (
        f"ZARRCHIVE_DATA_DIR={shlex.quote(str(settings.data_dir))} "
        if settings.database_url.startswith("sqlite")
        else ""
    )
    script = Path(sys.executable).with_name("zarrchive")
    command = shlex.quote(str(script)) if script.exists() else "zarrchive"
    return (
        "this archive has no users yet: create the first one (an administrator; its API "
        f"token is printed once) with\n    {prefix}{command} admin create-user NAME --admin"
    )


@app.command("create-user")
@friendly_errors
def create_user(
    name: str = typer.Argument(..., help="The new user's name"),
    admin: bool = typer.Option(False, "--admin", help="Make the user an administrator"),
) -> None:
    """Create a user and print a new API token for it (shown only once)."""
    from zarrchive.db.session import Database
    from zarrchive.services.identity import auth

    settings = admin_settings()
    db = Database(settings.database_url, strict=settings.strict_sessions)
    try:
        db.migrate()
        with db.write_session() as session:
            _, token = auth.create_user(session, name, admin=admin)
    finally:
        db.dispose()
    print(token)


@app.command("rotate-token")
@friendly_errors
def rotate_token(name: str = typer.Argument(..., help="The user's name")) -> None:
    """Replace the user's API tokens by a new one (printed, shown only once) and sign the
    user out of every browser."""
    from zarrchive.db.session import Database
    from zarrchive.services.identity import auth

    settings = admin_settings()
    db = Database(settings.database_url, strict=settings.strict_sessions)
    try:
        db.migrate()
        with db.write_session() as session:
            token = auth.rotate_token(session, name)
    finally:
        db.dispose()
    print(token)


def _set_status(name: str, approve: bool) -> None:
    from zarrchive.db.models import AccountStatus
    from zarrchive.db.session import Database
    from zarrchive.services.identity import accounts

    settings = admin_settings()
    db = Database(settings.database_url, strict=settings.strict_sessions)
    status = AccountStatus.APPROVED if approve else AccountStatus.REJECTED
    try:
        db.migrate()
        with db.write_session() as session:
            info = accounts.set_status(session, None, name, status)
    finally:
        db.dispose()
    print(f"{info.username}: {info.status.value}")


@app.command("approve")
@friendly_errors
def approve(name: str = typer.Argument(..., help="The user's name")) -> None:
    """Approve an account: it may then change what it owns and make API keys."""
    _set_status(name, approve=True)


@app.command("reject")
@friendly_errors
def reject(name: str = typer.Argument(..., help="The user's name")) -> None:
    """Reject an account: it reads only what is public, its keys stop working at once."""
    _set_status(name, approve=False)


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
    from zarrchive.services.zarr_engine.fsck import fsck as run_fsck

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


def _purge_trash(archive: Archive, *, apply: bool, console: object) -> None:
    """Purge (or, without *apply*, count) what is in the trash since more than
    ``ZARRCHIVE_TRASH_DAYS``: first, so that the content it held is garbage from then on."""
    from rich.console import Console

    from zarrchive.services.dandi.trash import purge_expired

    assert isinstance(console, Console)
    days = archive.settings.trash_days
    with archive.db.write_session() as session:
        purged = purge_expired(session, days=days, apply=apply)
    if purged.assets or purged.dandisets:
        console.print(
            f"{'purged' if apply else 'would purge'} from the trash (deleted more than {days} "
            f"days ago): {purged.assets} assets, {purged.dandisets} dandisets"
        )


def _gc_blobs(archive: Archive, apply: bool, grace: timedelta) -> tuple[int, int]:
    """Remove (or list) the blobs nothing references (:mod:`zarrchive.services.dandi.blob_gc`):
    ``(count, bytes)``."""
    from zarrchive.services.dandi.blob_gc import remove_unreferenced_blob, unreferenced_blobs

    count = size = 0
    for blob in unreferenced_blobs(archive, grace=grace):
        if apply and not remove_unreferenced_blob(archive, blob.blob_id, grace=grace):
            continue  # taken meanwhile
        print(
            f"{'removed' if apply else 'would remove'}\t{blob.key}\t(blob {blob.blob_id}: no "
            f"asset or trash item references it since {blob.since:%Y-%m-%d})\t{blob.size}"
        )
        count += 1
        size += blob.size
    return count, size


@app.command("usage")
@friendly_errors
def usage(
    as_json: bool = typer.Option(False, "--json", help="Print the report as JSON"),
) -> None:
    """Bytes per dandiset and per user (of their dandisets): the draft's, what only published
    versions hold, the trash's; and what nothing references (orphaned blobs and Zarrs, staging
    leftovers, noncurrent object versions no published or restorable state needs).  Each blob
    or Zarr is counted once per figure."""
    from zarrchive.cli._common import human_size
    from zarrchive.services.dandi.usage import Usage, usage_report

    with open_archive() as archive:
        report = usage_report(archive)
    if as_json:
        print(json.dumps(report.as_json(), indent=2))
        return

    def line(name: str, u: Usage) -> str:
        return (
            f"{name}\tdraft {human_size(u.draft)}\tpublished only "
            f"{human_size(u.published_only)}\ttrash {human_size(u.trash)}"
            f"\ttotal {human_size(u.total)}"
        )

    print("dandisets")
    for identifier, figures in sorted(report.dandisets.items()):
        print("  " + line(identifier, figures))
    print("users")
    for username, figures in sorted(report.users.items()):
        print("  " + line(username, figures))
    print(
        f"orphaned\t{report.orphaned_blobs} blobs {human_size(report.orphaned_blob_bytes)}"
        f"\t{report.orphaned_zarrs} Zarrs {human_size(report.orphaned_zarr_bytes)}"
        f"\t{report.staging_objects} staging objects {human_size(report.staging_bytes)}"
        f"\t{report.unneeded_versions} noncurrent versions "
        f"{human_size(report.unneeded_version_bytes)}"
    )


@app.command("gc")
@friendly_errors
def gc(
    zarr_ids: list[str] = typer.Argument(None, help="Zarr ids (default: every Zarr)"),
    apply: bool = typer.Option(False, "--apply", help="Remove (default: only print)"),
    grace_days: float = typer.Option(
        7.0,
        "--grace-days",
        min=0,
        envvar="ZARRCHIVE_GC_GRACE_DAYS",
        help="Remove a Zarr that nothing references only once it has not changed for this "
        "many days (uploads create the asset last), and abort the multipart upload of an open "
        "batch's big file only once nothing has been sent to it for this many days (an "
        "interrupted upload leaves them for its rerun).",
    ),
    retention_days: float | None = typer.Option(
        None,
        "--retention-days",
        min=0,
        help="Remove a noncurrent object version only once it has been noncurrent for this "
        "many days, and keep the versions every manifest younger than this names (a Zarr "
        "can be rolled back to those states) [default: ZARRCHIVE_VERSION_RETENTION_DAYS, 30]",
        show_default=False,
    ),
) -> None:
    """Remove what no published snapshot and no open batch needs: noncurrent object versions
    of Zarrs (their objects, .checksum nodes and manifest files) and of blobs noncurrent for
    longer than ZARRCHIVE_VERSION_RETENTION_DAYS that no kept manifest names (a published
    version's, the current state's, one younger than the retention, a trashed Zarr's, a
    rollback's target), the staging
    areas of batches no longer open (and their stray multipart uploads), the multipart
    uploads of open batches abandoned for --grace-days, whole Zarrs that no asset, version or
    trash item references (unchanged for --grace-days), and blobs that no asset or trash item
    has referenced for --grace-days; first, it purges what has been in the trash for longer
    than ZARRCHIVE_TRASH_DAYS.  A dry run (nothing removed) unless --apply."""
    from datetime import timedelta

    from rich.console import Console

    from zarrchive.cli._common import human_size
    from zarrchive.services.zarr_engine.snapshots import (
        gc_zarr_ids,
        remove_unreferenced_zarr,
        unreferenced_zarrs,
    )
    from zarrchive.services.zarr_engine.version_gc import collect_zarr, content_versions

    console = Console(stderr=True, soft_wrap=True)
    total_versions = total_bytes = total_staging = total_zarrs = total_multipart = 0
    verb = "removed" if apply else "would remove"
    grace = timedelta(days=grace_days)
    with open_archive() as archive:
        retention = timedelta(
            days=archive.settings.version_retention_days
            if retention_days is None
            else retention_days
        )
        unknown = sorted(set(zarr_ids or ()) - set(gc_zarr_ids(archive)))
        if unknown:  # before anything is removed
            raise fail(f"no Zarr {', '.join(map(repr, unknown))}: nothing removed")
        _purge_trash(archive, apply=apply, console=console)
        freed_blobs, freed_blob_bytes = (0, 0) if zarr_ids else _gc_blobs(archive, apply, grace)
        total_bytes += freed_blob_bytes
        chosen = zarr_ids or gc_zarr_ids(archive)
        unreferenced = {z.zarr_id: z for z in unreferenced_zarrs(archive, grace=grace)}
        for zarr_id in chosen:
            whole = unreferenced.get(zarr_id)
            if whole is not None:
                if apply and not remove_unreferenced_zarr(archive, zarr_id, grace=grace):
                    console.print(f"[yellow]kept[/] {zarr_id}: it is referenced or changed now")
                    continue
                print(
                    f"{verb}\tzarr/{zarr_id}/\t(Zarr {whole.dandiset}/{whole.name}: no asset "
                    f"or version references it; unchanged since {whole.modified:%Y-%m-%d})"
                    f"\t{whole.size}"
                )
                total_zarrs += 1
                total_bytes += whole.size
                continue
            report = collect_zarr(
                archive, zarr_id, retention=retention, apply=apply, abandoned_after=grace
            )
            if report.versions.skipped:
                console.print(f"[yellow]skipped[/] {zarr_id}: {report.versions.skipped}")
                continue
            for version in report.versions.versions:
                print(f"{verb}\t{version.key}\t{version.version_id}\t{version.size}")
            for prefix, size in report.staging:
                print(f"{verb}\t{prefix}\t(staging)\t{size}")
            for key, upload_id, why in report.multipart:
                print(
                    f"{'aborted' if apply else 'would abort'}\t{key}\t(multipart upload "
                    f"{upload_id}: {why})"
                )
            total_versions += len(report.versions.versions)
            total_staging += len(report.staging)
            total_multipart += len(report.multipart)
            total_bytes += report.bytes
        if not zarr_ids:
            for content in content_versions(archive, retention=retention, apply=apply):
                for version in content.versions:
                    print(f"{verb}\t{version.key}\t{version.version_id}\t{version.size}")
                total_versions += len(content.versions)
                total_bytes += content.freed.bytes
    zarrs = f", and {total_zarrs} unreferenced Zarrs" if total_zarrs else ""
    if freed_blobs:
        zarrs += f", and {freed_blobs} unreferenced blobs"
    if total_multipart:
        zarrs += (
            f" ({total_multipart} stray or abandoned multipart uploads "
            f"{'aborted' if apply else 'to abort'})"
        )
    console.print(
        f"{verb} {total_versions} object versions and {total_staging} staging areas{zarrs}: "
        f"{total_bytes} bytes ({human_size(total_bytes)})"
        + ("" if apply else "; rerun with --apply to remove them")
    )


doi_app = typer.Typer(help="DOIs at DataCite (ZARRCHIVE_DOI_*).", no_args_is_help=True)
app.add_typer(doi_app, name="doi")


@doi_app.command("sync")
@friendly_errors
def doi_sync(
    dandiset: str = typer.Argument(None, help="A dandiset's identifier (default: every one)"),
) -> None:
    """Send every DOI's metadata to DataCite again (after a metadata change or an outage);
    record the DOIs public dandisets and versions lack.  Prints each DOI, its state and
    DataCite's refusal if any; exits 1 if DataCite refused or did not answer one."""
    from zarrchive.services.dandi import dois

    with open_archive() as archive:
        if archive.settings.doi is None:
            raise fail("DOIs are off: set ZARRCHIVE_DOI_API_URL, _PREFIX, _USER and _PASSWORD")
        if dandiset is not None and not (dandiset.isdigit() and len(dandiset) <= 6):
            raise fail(f"{dandiset!r} is not a dandiset identifier (000123)")
        identifier = None if dandiset is None else f"{int(dandiset):06d}"
        statuses = dois.sync_all(archive, identifier)
    for status in statuses:
        print(dois.describe(status))
    if any(s.last_error for s in statuses):
        raise typer.Exit(1)

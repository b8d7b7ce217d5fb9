"""Zarr manifest files: one per checksum at which a Zarr comes to rest.

The job lists the Zarr's current object versions (streamed, in key order, its prefixes
listed in parallel: :meth:`~zarrchive.storage.objects.ObjectStore.iter_current_versions`),
writes the manifest through :mod:`zarrchive.manifest` into a spooled temporary
file (bounded memory), recomputes the tree hash from the listing and compares
it with the checksum the database holds.  A difference is an alarm: it is
recorded, logged loudly and shown by ``GET /api/zarr/{id}/``.

The file is named by the archive's checksum (what clients refer to);
``statistics.zarrChecksum`` inside is the listing's tree hash and
``zarrChecksumMismatch`` the archive's when they differ.

A job finds the Zarr busy (a batch open, queued or being applied, or its dandiset being
unembargoed) or changed while it listed: it does nothing, since a later job covers the
new state.  Whatever brings a Zarr to rest queues that job after its commit (the apply
engine, cancelling the open batch, an empty ``finalize``, ``fsck --repair``, the end of
an unembargo; a batch left by a crash is applied by whoever takes its claim over, which
queues it too), and the job queue runs a job queued while one of its key runs after
that one (:mod:`zarrchive.jobs`), so the last state always gets its manifest.
"""

from __future__ import annotations

import logging
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum

from sqlalchemy import select
from sqlalchemy.orm import Session

from zarrchive.checksum import is_md5
from zarrchive.db.models import EmbargoStatus, UploadBatch, Zarr, ZarrManifest, ZarrPin
from zarrchive.manifest import ManifestEntry, generate_manifest, manifest_key
from zarrchive.services.runtime import Archive, current_archive
from zarrchive.services.zarrs import ZarrRef, get_zarr
from zarrchive.storage.keys import zarr_prefix
from zarrchive.storage.objects import ObjectStore

log = logging.getLogger(__name__)

_SPOOL_BYTES = 16 * 1024 * 1024
#: Prefixes of a Zarr listed at once by the manifest job (S3 serves prefixes in parallel).
LIST_PARALLELISM = 8


class ManifestStatus(StrEnum):
    """What :func:`write_manifest` did."""

    WRITTEN = "written"
    #: already there (and, when forced, pinned by a published version: never rewritten)
    EXISTS = "exists"
    #: a batch is open or being applied, or the dandiset is being unembargoed: the Zarr
    #: is not at rest
    BUSY = "busy"
    #: the Zarr changed while its objects were listed: the next job writes the new one
    SUPERSEDED = "superseded"


@dataclass(frozen=True)
class ManifestOutcome:
    zarr_id: str
    checksum: str
    status: ManifestStatus
    listing_checksum: str | None = None
    entries: int | None = None

    @property
    def mismatch(self) -> bool:
        return self.listing_checksum is not None and self.listing_checksum != self.checksum


@dataclass(frozen=True)
class _Snapshot:
    checksum: str
    modified_at: datetime
    busy: bool
    embargoed: bool


def _snapshot(archive: Archive, zarr_id: str) -> tuple[_Snapshot, ObjectStore]:
    """The Zarr's state.  Its batches are read before its row: each statement sees the
    commits done before it, and the apply engine deletes the batch in the commit that
    stores the new checksum, so "no batch" is never paired with the old checksum."""
    with archive.db.session() as session:
        zarr_id = get_zarr(session, None, zarr_id, check_read=False).id
        busy = (
            session.scalar(select(UploadBatch.id).where(UploadBatch.zarr_id == zarr_id).limit(1))
            is not None
        )
        zarr = session.execute(
            select(Zarr).where(Zarr.id == zarr_id).execution_options(populate_existing=True)
        ).scalar_one()
        dandiset = zarr.dandiset
        session.refresh(dandiset)
        snap = _Snapshot(
            zarr.checksum,
            zarr.modified_at,
            busy or dandiset.embargo_status == EmbargoStatus.UNEMBARGOING,
            dandiset.embargoed,
        )
        return snap, archive.store_for(dandiset.embargoed)


def current_entries(
    store: ObjectStore, zarr_id: str, *, parallel: int | None = None
) -> Iterator[ManifestEntry]:
    """The Zarr's current object versions, in key order (prefixes listed *parallel* at once,
    default :data:`LIST_PARALLELISM`)."""
    prefix = zarr_prefix(zarr_id)
    listed = store.iter_current_versions(
        prefix, parallel=LIST_PARALLELISM if parallel is None else parallel
    )
    for version in listed:
        assert version.etag is not None
        etag = version.etag
        if not is_md5(etag):  # assembled from parts: the md5 the archive verified
            known = version.version_id if version.version_id not in ("", "null") else None
            etag = store.recorded_md5(version.key, known) or etag
        yield ManifestEntry(
            version.key[len(prefix) :],
            version.version_id,
            version.last_modified,
            version.size,
            etag,
        )


def has_manifest(archive: Archive, zarr_id: str, checksum: str) -> bool:
    with archive.db.session() as session:
        return (
            session.scalar(
                select(ZarrManifest.id).where(
                    ZarrManifest.zarr_id == zarr_id, ZarrManifest.checksum == checksum
                )
            )
            is not None
        )


def _is_pinned(archive: Archive, zarr_id: str, checksum: str) -> bool:
    with archive.db.session() as session:
        pin = session.scalar(
            select(ZarrPin.id).where(ZarrPin.zarr_id == zarr_id, ZarrPin.checksum == checksum)
        )
        return pin is not None


def write_manifest(archive: Archive, zarr_id: str, *, force: bool = False) -> ManifestOutcome:
    """Write the manifest of the Zarr's current checksum (unless it exists or the Zarr is busy;
    *force* rewrites an existing one, except a manifest a published version pins)."""
    before, store = _snapshot(archive, zarr_id)
    if before.busy:
        return ManifestOutcome(zarr_id, before.checksum, ManifestStatus.BUSY)
    if has_manifest(archive, zarr_id, before.checksum) and (
        not force or _is_pinned(archive, zarr_id, before.checksum)
    ):
        # a pinned manifest names the object versions a published version reads: it is
        # never rewritten (the same checksum may now be held by other versions)
        return ManifestOutcome(zarr_id, before.checksum, ManifestStatus.EXISTS)
    with tempfile.SpooledTemporaryFile(max_size=_SPOOL_BYTES) as body:
        generated = generate_manifest(
            current_entries(store, zarr_id), body, database_checksum=before.checksum
        )
        after, _ = _snapshot(archive, zarr_id)
        if after != before:
            return ManifestOutcome(zarr_id, before.checksum, ManifestStatus.SUPERSEDED)
        store.upload_fileobj(
            manifest_key(zarr_id, before.checksum), generated.open(), "application/json"
        )
    stats = generated.statistics
    listing = stats.zarr_checksum
    if listing != before.checksum:
        log.error(
            "CHECKSUM MISMATCH: Zarr %s: the archive holds %s but its S3 objects hash to %s; "
            "run 'zarrchive admin fsck %s' to investigate",
            zarr_id,
            before.checksum,
            listing,
            zarr_id,
        )
    with archive.db.write_session() as session:
        row = session.scalar(
            select(ZarrManifest).where(
                ZarrManifest.zarr_id == zarr_id, ZarrManifest.checksum == before.checksum
            )
        )
        if row is None:
            row = ZarrManifest(zarr_id=zarr_id, checksum=before.checksum)
            session.add(row)
        row.listing_checksum = listing
        row.entries = stats.entries
    return ManifestOutcome(zarr_id, before.checksum, ManifestStatus.WRITTEN, listing, stats.entries)


def generate_manifest_job(zarr_id: str) -> None:
    """The background job (see :mod:`zarrchive.jobs`)."""
    outcome = write_manifest(current_archive(), zarr_id)
    log.info("manifest of Zarr %s at %s: %s", zarr_id, outcome.checksum, outcome.status)


@dataclass(frozen=True)
class ManifestInfo:
    checksum: str
    key: str
    url: str
    entries: int
    listing_checksum: str
    created: datetime


def manifest_url(archive: Archive, zarr: ZarrRef, checksum: str) -> str:
    """A URL of the manifest the caller can read: public, or presigned when embargoed."""
    store = archive.store_for(zarr.embargoed)
    key = manifest_key(zarr.id, checksum)
    if zarr.embargoed:
        return store.presign_get(key, archive.settings.presign_expiry)
    return store.public_url(key)


def list_manifests(archive: Archive, session: Session, zarr: Zarr) -> list[ManifestInfo]:
    """Manifests written for the Zarr, oldest first."""
    ref = ZarrRef.of(zarr)
    rows = session.scalars(
        select(ZarrManifest)
        .where(ZarrManifest.zarr_id == zarr.id)
        .order_by(ZarrManifest.created_at, ZarrManifest.id)
    )
    result = []
    for row in rows:
        result.append(
            ManifestInfo(
                row.checksum,
                manifest_key(zarr.id, row.checksum),
                manifest_url(archive, ref, row.checksum),
                row.entries,
                row.listing_checksum,
                row.created_at,
            )
        )
    return result

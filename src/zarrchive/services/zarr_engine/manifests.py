"""Zarr manifest files: one per checksum at which a Zarr comes to rest.

From records when it can: the manifest of the newest state that has one, merged (a sorted
stream, bounded memory) with the changes the apply recorded since
(:mod:`zarrchive.services.zarr_engine.manifest_changes`), never a listing of the Zarr; its tree hash
must be the archive's checksum, else (and when there is no chain of records: an old Zarr,
records pruned, an unembargo) the job lists S3 as below.

Else the job lists the Zarr's current object versions (streamed, in key order, its prefixes
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
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import IO

from sqlalchemy import select
from sqlalchemy.orm import Session

from zarrchive.checksum import is_md5
from zarrchive.checksum.tree import TreeHasher
from zarrchive.db.models import (
    EmbargoStatus,
    UploadBatch,
    Zarr,
    ZarrChangeSet,
    ZarrManifest,
    ZarrPin,
    utcnow,
)
from zarrchive.errors import ZarrchiveError
from zarrchive.manifest import (
    GeneratedManifest,
    ManifestDifference,
    ManifestEntry,
    diff_manifests,
    generate_manifest,
    manifest_key,
    merge_changes,
    merge_manifest,
    read_manifest,
)
from zarrchive.manifest.writer import chunk_stream
from zarrchive.services.runtime import Archive, current_archive
from zarrchive.services.zarr_engine.manifest_changes import (
    ChangeChain,
    iter_net_changes,
    mark_manifest_written,
    newest_change_set_id,
    resolve_chain,
    resting_chain,
)
from zarrchive.services.zarr_engine.zarrs import ZarrRef, get_zarr
from zarrchive.storage.keys import zarr_prefix
from zarrchive.storage.protocol import ObjectStoreProtocol

log = logging.getLogger(__name__)

#: The manifest being made is kept in memory up to this size, then in a temporary file
#: (a 10^6-entry manifest is over 100 MiB; a BytesIO growing to 16 MiB held two copies of
#: itself at its last resize).
_SPOOL_BYTES = 2 * 1024 * 1024
#: The chunks in which a manifest is read from S3 (botocore's read of 8 MiB held two or
#: three copies of it at once; the merge reads line by line).
READ_CHUNK = 1024 * 1024
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


class ManifestSource(StrEnum):
    """How a written manifest was made."""

    #: the previous manifest merged with the recorded changes since
    RECORDS = "records"
    #: a listing of the Zarr's object versions in S3
    LISTING = "listing"


@dataclass(frozen=True)
class ManifestOutcome:
    zarr_id: str
    checksum: str
    status: ManifestStatus
    listing_checksum: str | None = None
    entries: int | None = None
    source: ManifestSource | None = None

    @property
    def mismatch(self) -> bool:
        return self.listing_checksum is not None and self.listing_checksum != self.checksum


@dataclass(frozen=True)
class _Snapshot:
    checksum: str
    modified_at: datetime
    busy: bool
    embargoed: bool
    #: the Zarr's newest change set (its state is the one after it)
    last_change_set: int | None


def _snapshot(archive: Archive, zarr_id: str) -> tuple[_Snapshot, ObjectStoreProtocol]:
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
            newest_change_set_id(session, zarr_id),
        )
        return snap, archive.store_for(dandiset.embargoed)


def content_md5(
    store: ObjectStoreProtocol, key: str, etag: str, version_id: str | None = None
) -> str | None:
    """The md5 of an object's content: its ETag when that is an md5, else (an object
    assembled from parts) the md5 the archive verified and recorded on it; None without
    one."""
    if is_md5(etag):
        return etag
    known = version_id if version_id not in (None, "", "null") else None
    recorded = store.recorded_md5(key, known)
    return recorded if recorded is not None and is_md5(recorded) else None


def current_entries(
    store: ObjectStoreProtocol, zarr_id: str, *, parallel: int | None = None
) -> Iterator[ManifestEntry]:
    """The Zarr's current object versions, in key order (prefixes listed *parallel* at once,
    default :data:`LIST_PARALLELISM`)."""
    prefix = zarr_prefix(zarr_id)
    listed = store.iter_current_versions(
        prefix, parallel=LIST_PARALLELISM if parallel is None else parallel
    )
    for version in listed:
        assert version.etag is not None
        etag = content_md5(store, version.key, version.etag, version.version_id) or version.etag
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


def is_pinned(archive: Archive, zarr_id: str, checksum: str) -> bool:
    with archive.db.session() as session:
        pin = session.scalar(
            select(ZarrPin.id).where(ZarrPin.zarr_id == zarr_id, ZarrPin.checksum == checksum)
        )
        return pin is not None


def _changed_since_manifest(archive: Archive, zarr_id: str, snap: _Snapshot) -> bool:
    """Whether the Zarr's objects changed since the (good) manifest of its checksum was
    written: a batch recorded after it brought the Zarr back to that checksum with new
    versions (the same content written again, or a change undone).  Such a manifest still
    names versions that hold the same bytes, but no longer the current ones: the job
    rewrites it unless a published version pins it."""
    if snap.last_change_set is None:
        return False
    with archive.db.session() as session:
        last = session.get(ZarrChangeSet, snap.last_change_set)
        if last is None or last.manifest_written or last.checksum_after != snap.checksum:
            return False
        listing = session.scalar(
            select(ZarrManifest.listing_checksum).where(
                ZarrManifest.zarr_id == zarr_id, ZarrManifest.checksum == snap.checksum
            )
        )
        return listing == snap.checksum  # a mismatching one stays as the alarm it is


def write_manifest(
    archive: Archive, zarr_id: str, *, force: bool = False, from_listing: bool = False
) -> ManifestOutcome:
    """Write the manifest of the Zarr's current checksum (unless it exists or the Zarr is busy;
    *force* rewrites an existing one, except a manifest a published version pins).  An
    existing manifest is also rewritten when batches applied since it was written brought
    the Zarr back to the same checksum with new object versions (unless pinned).
    *from_listing*: list S3 even when records could make it (``fsck --repair`` of a manifest
    the audit found wrong)."""
    before, store = _snapshot(archive, zarr_id)
    if before.busy:
        return ManifestOutcome(zarr_id, before.checksum, ManifestStatus.BUSY)
    exists = has_manifest(archive, zarr_id, before.checksum)
    if exists and (
        not (force or _changed_since_manifest(archive, zarr_id, before))
        or is_pinned(archive, zarr_id, before.checksum)
    ):
        # a pinned manifest names the object versions a published version reads: it is
        # never rewritten (the same checksum may now be held by other versions)
        return ManifestOutcome(zarr_id, before.checksum, ManifestStatus.EXISTS)
    with archive.db.session() as session:
        chain = None
        if not from_listing:
            chain = resolve_chain(
                session, zarr_id, before.checksum, before.embargoed, before.last_change_set
            )
            if chain is None and not exists:  # its row dropped, its file still right
                chain = resting_chain(
                    session, zarr_id, before.checksum, before.embargoed, before.last_change_set
                )
    with tempfile.SpooledTemporaryFile(max_size=_SPOOL_BYTES) as body:
        generated = None
        source = ManifestSource.RECORDS
        if chain is not None:
            generated = _from_records(archive, store, zarr_id, before.checksum, chain, body)
        if generated is None:
            source = ManifestSource.LISTING
            body.seek(0)
            body.truncate()
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
        else:  # rewritten: it names the versions current now (see manifest_is_fresh)
            row.created_at = utcnow()
        row.listing_checksum = listing
        row.entries = stats.entries
        if listing == before.checksum:
            mark_manifest_written(
                session, zarr_id, before.checksum, before.embargoed, before.last_change_set
            )
    return ManifestOutcome(
        zarr_id, before.checksum, ManifestStatus.WRITTEN, listing, stats.entries, source
    )


def _from_records(
    archive: Archive,
    store: ObjectStoreProtocol,
    zarr_id: str,
    checksum: str,
    chain: ChangeChain,
    body: IO[bytes],
) -> GeneratedManifest | None:
    """The manifest of *checksum* from the chain's base manifest and recorded changes
    (streamed), or ``None`` when that fails or does not hash to *checksum* (then list)."""
    try:
        with archive.db.session() as session:
            changes = iter_net_changes(session, zarr_id, chain)
            if chain.base_checksum is None:
                generated = generate_manifest(
                    merge_changes((), changes), body, database_checksum=checksum
                )
            else:
                chunks = store.iter_content(
                    manifest_key(zarr_id, chain.base_checksum), chunk_size=READ_CHUNK
                )
                try:
                    # not verified on reading: the merged tree hash is checked against
                    # the archive's checksum below (a wrong base or record fails it)
                    generated = merge_manifest(
                        chunk_stream(chunks), changes, body, database_checksum=checksum
                    )
                finally:
                    chunks.close()  # type: ignore[attr-defined]
    except ZarrchiveError as error:
        log.warning(
            "Zarr %s: the manifest of %s could not be made from records (%s): listing S3",
            zarr_id,
            checksum,
            error,
        )
        return None
    if generated.statistics.zarr_checksum != checksum:
        log.warning(
            "Zarr %s: the recorded changes hash to %s, not %s: listing S3 instead",
            zarr_id,
            generated.statistics.zarr_checksum,
            checksum,
        )
        return None
    return generated


def raise_mismatch_alarm(archive: Archive, zarr_id: str, s3_checksum: str | None) -> None:
    """An audit found the Zarr's S3 objects hashing to *s3_checksum* (``None``: not
    computable, an object without an md5), not to the archive's checksum: a write behind
    the archive's back.  Show it where users look, as a listed manifest does: the manifest
    of the current checksum is written again from a listing (its ``zarrChecksumMismatch``
    set) and its row records the listing's checksum (``checksum_mismatch`` of
    ``GET /api/zarr/{id}/``).  A manifest a published version pins is never rewritten: its
    row alone records the alarm.  A busy or changing Zarr is left alone (audit it again at
    rest).  The alarm stays until S3 and the tree agree again (``fsck --repair``): a
    manifest whose listing differs is no base for records (:mod:`.manifest_changes`), so
    the next states' manifests are listed, and carry it, until then."""
    outcome = write_manifest(archive, zarr_id, force=True, from_listing=True)
    if outcome.status is ManifestStatus.WRITTEN:
        return
    if outcome.status is ManifestStatus.EXISTS and s3_checksum is not None:  # pinned
        with archive.db.write_session() as session:
            row = session.scalar(
                select(ZarrManifest).where(
                    ZarrManifest.zarr_id == zarr_id, ZarrManifest.checksum == outcome.checksum
                )
            )
            if row is not None:
                row.listing_checksum = s3_checksum
                row.created_at = utcnow()


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


class AuditStatus(StrEnum):
    """What :func:`audit_manifest` found."""

    #: the manifest names exactly what S3 holds
    MATCHES = "matches"
    DIFFERS = "differs"
    #: no manifest of the Zarr's current checksum (``manifest backfill`` writes it)
    NO_MANIFEST = "no-manifest"
    #: a batch is pending or the dandiset is being unembargoed: audit it at rest
    BUSY = "busy"
    #: the Zarr changed while it was listed: audit it again
    SUPERSEDED = "superseded"


#: Differences kept for the report (all are counted).
AUDIT_REPORTED = 1000


@dataclass(frozen=True)
class ManifestAudit:
    zarr_id: str
    checksum: str
    status: AuditStatus
    #: the first :data:`AUDIT_REPORTED` differences, by path
    differences: tuple[ManifestDifference, ...] = ()
    difference_count: int = 0
    #: the tree hash of S3's listing, when the audit listed it itself and could compute it
    s3_checksum: str | None = None


def audit_manifest(
    archive: Archive,
    zarr_id: str,
    *,
    reported: int = AUDIT_REPORTED,
    listing: Iterable[ManifestEntry] | None = None,
) -> ManifestAudit:
    """Compare the stored manifest of the Zarr's current checksum with a listing of S3
    (both streamed): every path missing from S3, extra in S3, or with another version,
    ETag, size or last-modified second.  *listing* is :func:`current_entries` of the Zarr
    when the caller lists it itself (fsck: one listing for the tree and the audit; it is
    read whole unless the audit ends before listing: busy, or no manifest).

    When it lists S3 itself, the audit also hashes the listing: objects that hash to
    another checksum than the archive's (a write behind its back) raise the alarm
    (:func:`raise_mismatch_alarm`).  A caller passing *listing* hashes it and raises the
    alarm itself (fsck)."""
    before, store = _snapshot(archive, zarr_id)
    if before.busy:
        return ManifestAudit(zarr_id, before.checksum, AuditStatus.BUSY)
    if not has_manifest(archive, zarr_id, before.checksum):
        return ManifestAudit(zarr_id, before.checksum, AuditStatus.NO_MANIFEST)
    kept: list[ManifestDifference] = []
    count = 0
    chunks = store.iter_content(manifest_key(zarr_id, before.checksum), chunk_size=READ_CHUNK)
    try:
        stored = read_manifest(chunk_stream(chunks), verify=False).entries
        tree = _ListingTree() if listing is None else None
        actual = tree.seen(current_entries(store, zarr_id)) if tree is not None else listing
        assert actual is not None
        for difference in diff_manifests(stored, actual):
            count += 1
            if len(kept) < reported:
                kept.append(difference)
    finally:
        chunks.close()  # type: ignore[attr-defined]
    after, _ = _snapshot(archive, zarr_id)
    if after != before:
        return ManifestAudit(zarr_id, before.checksum, AuditStatus.SUPERSEDED)
    s3_checksum = None if tree is None else tree.checksum()
    mismatch = tree is not None and s3_checksum != before.checksum
    # once the alarm is up the manifest names what S3 holds: the audit still differs
    status = AuditStatus.DIFFERS if count or mismatch else AuditStatus.MATCHES
    if mismatch and count:
        raise_mismatch_alarm(archive, zarr_id, s3_checksum)
    return ManifestAudit(zarr_id, before.checksum, status, tuple(kept), count, s3_checksum)


class _ListingTree:
    """The tree hash of a listing, computed as it goes by (``None`` when an entry has no
    md5: S3 holds an object the archive never verified)."""

    def __init__(self) -> None:
        self.hasher = TreeHasher()
        self.unhashable = False

    def seen(self, entries: Iterable[ManifestEntry]) -> Iterator[ManifestEntry]:
        for entry in entries:
            if is_md5(entry.etag):
                self.hasher.add(entry.path, entry.size, entry.etag)
            else:
                self.unhashable = True
            yield entry

    def checksum(self) -> str | None:
        return None if self.unhashable else self.hasher.finish().digest

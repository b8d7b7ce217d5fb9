"""``admin gc`` of noncurrent S3 object versions, older than ``ZARRCHIVE_VERSION_RETENTION_DAYS``
and needed by no kept manifest (the decision: :mod:`zarrchive.version_retention`).

Per Zarr, its objects, ``.checksum`` nodes and manifest files (``zarr/``, ``zarr_checksums/``,
``zarr-manifest/`` of its id) in its bucket; per bucket, the blobs' and LINDI files' keys
(``blobs/``, ``lindi/``), which nothing reads at a noncurrent version.

Order matters: the versions are listed *before* the database's holds
(:mod:`~zarrchive.services.zarr_engine.zarr_holds`) are read, so a publication or a manifest written
meanwhile names only versions that were current at the listing, never candidates.  A Zarr is
left alone while its dandiset is being unembargoed (the versions move buckets), while a
batch of it is queued or being applied (a rollback copies old versions into place through
batches), and when a kept manifest cannot be read.
"""

from __future__ import annotations

import logging
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from sqlalchemy import exists, select

from zarrchive.db.models import (
    PENDING_STATES,
    EmbargoStatus,
    UploadBatch,
    Zarr,
    ZarrManifest,
    utcnow,
)
from zarrchive.errors import InvalidManifest, NotFound, StorageError
from zarrchive.manifest import MANIFEST_PREFIX, manifest_key, read_manifest
from zarrchive.services.runtime import Archive
from zarrchive.services.zarr_engine.uploads.leftovers import find_leftovers, remove_leftovers
from zarrchive.services.zarr_engine.zarr_holds import zarr_holds
from zarrchive.storage.keys import (
    checksum_prefix,
    manifest_prefix,
    zarr_prefix,
)
from zarrchive.storage.objects import ObjectStore, delete_versions
from zarrchive.storage.protocol import ObjectStoreProtocol
from zarrchive.version_retention import (
    ExpiredVersion,
    Freed,
    KeepReason,
    ManifestRecord,
    VersionRef,
    expired_versions,
    freed,
    plan_manifests,
    removable_versions,
)

log = logging.getLogger(__name__)

_SPOOL_BYTES = 16 * 1024 * 1024
#: Keys of content read at its current version only, per bucket.
CONTENT_PREFIXES = ("blobs/", "lindi/")


@dataclass
class VersionGcReport:
    """What gc removes (or would remove) of one area: a Zarr, or a bucket's blobs."""

    #: ``Zarr {id}`` or ``blobs of {bucket}``
    area: str
    versions: list[ExpiredVersion] = field(default_factory=list)
    #: the Zarr's kept manifests and why (empty for blobs)
    kept: dict[str, frozenset[KeepReason]] = field(default_factory=dict)
    skipped: str | None = None
    applied: bool = False

    @property
    def freed(self) -> Freed:
        return freed(self.versions)


def _manifest_refs(store: ObjectStoreProtocol, zarr_id: str, checksum: str) -> Iterator[VersionRef]:
    """The ``(key, version id)`` a manifest names (streamed from a spooled copy)."""
    prefix = zarr_prefix(zarr_id)
    with tempfile.SpooledTemporaryFile(max_size=_SPOOL_BYTES) as raw:
        for chunk in store.iter_content(manifest_key(zarr_id, checksum)):
            raw.write(chunk)
        raw.seek(0)
        for entry in read_manifest(raw).entries:
            yield (prefix + entry.path, entry.version_id)


def _delete(store: ObjectStoreProtocol, versions: list[ExpiredVersion], what: str) -> None:
    refs = [v.ref for v in versions]
    if isinstance(store, ObjectStore):
        delete_versions(store, refs, what)  # 1000 per request
    else:
        for key, version_id in refs:
            store.delete_version(key, version_id)


def zarr_versions(
    archive: Archive,
    zarr_id: str,
    *,
    retention: timedelta,
    apply: bool = False,
    now: datetime | None = None,
    expire_all: bool = False,
    listed: dict[str, list[ExpiredVersion]] | None = None,
) -> VersionGcReport:
    """The noncurrent versions of one Zarr that gc removes (with *apply*: removed), those
    noncurrent since more than *retention* before *now* and named by no kept manifest.
    *expire_all*: every noncurrent version no kept manifest names, whatever its age (what
    ``admin usage`` counts as unneeded).  *listed*: the expired versions of its bucket's
    Zarrs by id, listed beforehand (:func:`expired_by_zarr`), instead of listing its own."""
    now = now or utcnow()
    with archive.db.session() as session:
        zarr = session.get(Zarr, zarr_id)
        if zarr is None:
            raise NotFound(f"no Zarr {zarr_id}")
        store = archive.store_for(zarr.dandiset.embargoed)
        unembargoing = zarr.dandiset.embargo_status == EmbargoStatus.UNEMBARGOING
    report = VersionGcReport(f"Zarr {zarr_id}")
    if unembargoing:
        report.skipped = "its dandiset is being unembargoed"
        return report
    cutoff = now if expire_all else now - retention
    if listed is not None:
        expired = listed.get(zarr_id, [])
    else:
        expired = [
            v
            for prefix in (
                zarr_prefix(zarr_id),
                checksum_prefix(zarr_id),
                manifest_prefix(zarr_id),
            )
            for v in expired_versions(store.iter_versions(prefix), cutoff=cutoff)
        ]
    with archive.db.session() as session:
        zarr = session.get(Zarr, zarr_id)
        if zarr is None:  # removed meanwhile
            return report
        busy = session.scalar(
            select(
                exists().where(
                    UploadBatch.zarr_id == zarr_id, UploadBatch.state.in_(PENDING_STATES)
                )
            )
        )
        holds = zarr_holds(session, zarr)
        manifests = [
            ManifestRecord(c, t)
            for c, t in session.execute(
                select(ZarrManifest.checksum, ZarrManifest.created_at).where(
                    ZarrManifest.zarr_id == zarr_id
                )
            )
        ]
    if busy:
        report.skipped = "a batch of it is being applied"
        return report
    plan = plan_manifests(manifests, holds, now=now, retention=retention)
    report.kept = plan.kept
    if plan.refusal is not None:
        report.skipped = f"{plan.refusal}: nothing removed"
        return report
    try:
        report.versions = removable_versions(
            expired, (_manifest_refs(store, zarr_id, c) for c in sorted(plan.kept))
        )
    except (StorageError, InvalidManifest) as exc:
        report.skipped = f"a kept manifest cannot be read ({exc}): nothing removed"
        return report
    if apply and report.versions:
        _delete(store, report.versions, report.area)
        report.applied = True
        log.info("%s: removed %d noncurrent versions", report.area, len(report.versions))
    return report


def content_versions(
    archive: Archive,
    *,
    retention: timedelta,
    apply: bool = False,
    now: datetime | None = None,
    expire_all: bool = False,
) -> list[VersionGcReport]:
    """The noncurrent versions of blobs and LINDI files (read only at their current version)
    noncurrent since more than *retention*, one report per bucket (*expire_all*: whatever
    their age).  The content under a current delete marker stays (blob gc removes a blob
    whole)."""
    now = now or utcnow()
    cutoff = now if expire_all else now - retention
    reports = []
    for store in (archive.store, archive.embargo_store):
        report = VersionGcReport(f"blobs of {store.bucket}")
        report.versions = [
            v
            for prefix in CONTENT_PREFIXES
            for v in expired_versions(
                store.iter_versions(prefix), cutoff=cutoff, keep_content_under_marker=True
            )
        ]
        if apply and report.versions:
            _delete(store, report.versions, report.area)
            report.applied = True
        reports.append(report)
    return reports


#: The roots of the Zarrs' keys: ``{root}{zarr_id}/...``.
ZARR_ROOTS = ("zarr/", "zarr_checksums/", MANIFEST_PREFIX)


def expired_by_zarr(
    store: ObjectStoreProtocol, cutoff: datetime
) -> dict[str, list[ExpiredVersion]]:
    """The versions of every Zarr's keys in *store* noncurrent since *cutoff*, by Zarr id:
    one listing per root, not three per Zarr."""
    found: dict[str, list[ExpiredVersion]] = {}
    for root in ZARR_ROOTS:
        for version in expired_versions(store.iter_versions(root), cutoff=cutoff):
            zarr_id = version.key[len(root) :].partition("/")[0]
            found.setdefault(zarr_id, []).append(version)
    return found


def all_versions(
    archive: Archive,
    *,
    retention: timedelta,
    apply: bool = False,
    now: datetime | None = None,
    expire_all: bool = False,
) -> list[VersionGcReport]:
    """:func:`zarr_versions` of every Zarr (oldest first), then :func:`content_versions`.
    Each bucket's Zarr keys are listed once, before any Zarr's holds are read."""
    now = now or utcnow()
    cutoff = now if expire_all else now - retention
    listed = {
        store.bucket: expired_by_zarr(store, cutoff)
        for store in (archive.store, archive.embargo_store)
    }
    with archive.db.session() as session:
        zarrs = [
            (z.id, archive.store_for(z.dandiset.embargoed).bucket)
            for z in session.scalars(select(Zarr).order_by(Zarr.created_at, Zarr.id))
        ]
    reports = []
    for zarr_id, bucket in zarrs:
        try:
            reports.append(
                zarr_versions(
                    archive,
                    zarr_id,
                    retention=retention,
                    apply=apply,
                    now=now,
                    expire_all=expire_all,
                    listed=listed[bucket],
                )
            )
        except NotFound:
            continue  # removed meanwhile
    return reports + content_versions(
        archive, retention=retention, apply=apply, now=now, expire_all=expire_all
    )


@dataclass
class ZarrGcReport:
    """What ``admin gc`` removes (or would remove) of one Zarr besides the Zarr itself."""

    versions: VersionGcReport
    #: staging prefixes of batches that no longer exist, with their bytes
    staging: list[tuple[str, int]] = field(default_factory=list)
    #: multipart uploads nothing will finish: ``(key, upload id, why)``
    multipart: list[tuple[str, str, str]] = field(default_factory=list)

    @property
    def bytes(self) -> int:
        return self.versions.freed.bytes + sum(size for _, size in self.staging)


def collect_zarr(
    archive: Archive,
    zarr_id: str,
    *,
    retention: timedelta,
    apply: bool = False,
    abandoned_after: timedelta | None = None,
    now: datetime | None = None,
) -> ZarrGcReport:
    """``admin gc`` of one Zarr: its noncurrent versions (:func:`zarr_versions`), the
    staging areas of batches that no longer exist, the multipart uploads nothing will finish
    and, with *abandoned_after*, those of open batches nothing was sent to for that long."""
    report = ZarrGcReport(
        zarr_versions(archive, zarr_id, retention=retention, apply=apply, now=now)
    )
    if report.versions.skipped:
        return report
    with archive.db.session() as session:
        zarr = session.get(Zarr, zarr_id)
        if zarr is None:
            return report
        store = archive.store_for(zarr.dandiset.embargoed)
    found = find_leftovers(archive, store, zarr_id, abandoned_after=abandoned_after, now=now)
    report.staging, report.multipart = found.staging, found.multipart
    if apply:
        remove_leftovers(archive, store, zarr_id, found)
    return report

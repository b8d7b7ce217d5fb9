"""Snapshots: the states of Zarrs that published versions pin, read through their manifests.

Publishing pins each Zarr of the draft (a :class:`~zarrchive.db.models.ZarrPin`: the Zarr's
checksum then).  In ``freeze`` mode (the spec) the pin also freezes the Zarr for good; in
``snapshot`` mode (``ZARRCHIVE_PUBLISHED_ZARRS=snapshot``) the draft keeps changing the same
Zarr and the version reads its pinned state through the **manifest** of the pinned checksum,
which names the S3 *version* of every object: nothing is copied.

Invariants:

- the manifest of a snapshot pin is written (or verified fresh: see
  :func:`manifest_is_fresh`) before the version that pins it becomes visible, in the same
  transaction that checks the Zarr has no batch and holds its row lock;
- nothing a pin needs is ever deleted: file deletion leaves delete markers, cancel drops
  only staging objects, fsck rewrites only ``.checksum`` nodes, unembargo copies every
  version and rewrites pinned manifests with the new version ids
  (:func:`remap_pinned_manifests`), and ``admin gc``
  (:func:`zarrchive.services.zarr_engine.version_gc.collect_zarr`) removes only noncurrent
  versions that no kept manifest (a pin's among them) names.

Readers (the routes under ``/api/zarr/{id}/snapshots/``) answer from a parsed index of the
manifest (:class:`SnapshotIndex`), cached per pinned checksum (pinned manifests never
change) under a memory budget, so a page of a directory of a 10^6-entry snapshot costs a
bisection, not a parse.
"""

from __future__ import annotations

import logging
import tempfile
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import IO

from sqlalchemy import ColumnElement, delete, exists, select
from sqlalchemy.orm import Session

from zarrchive.checksum import EMPTY_CHECKSUM, iter_directory_digests
from zarrchive.checksum.digest import ZarrDigest
from zarrchive.checksum.node import ChildDigest
from zarrchive.config import PublishedZarrs
from zarrchive.db.models import (
    Asset,
    EmbargoStatus,
    TrashedAsset,
    UploadBatch,
    Version,
    Zarr,
    ZarrManifest,
    ZarrPin,
    utcnow,
)
from zarrchive.errors import (
    ArchiveBusy,
    CorruptManifest,
    InvalidInput,
    InvalidManifest,
    NotFound,
    StorageError,
)
from zarrchive.manifest import ManifestEntry, generate_manifest, manifest_key, read_manifest
from zarrchive.paths import split_path, validate_directory_path, validate_path
from zarrchive.services.identity.auth import Caller
from zarrchive.services.runtime import Archive
from zarrchive.services.zarr_engine import zarrs as zarr_service
from zarrchive.services.zarr_engine.manifest_changes import newest_change_set_id, resting_chain
from zarrchive.services.zarr_engine.manifests import ManifestStatus, manifest_url, write_manifest
from zarrchive.services.zarr_engine.node_cache import NodeView
from zarrchive.storage.keys import (
    checksum_prefix,
    manifest_prefix,
    staging_zarr_prefix,
    zarr_object_key,
    zarr_prefix,
)
from zarrchive.storage.objects import ObjectVersion, oldest_first
from zarrchive.storage.protocol import ObjectStoreProtocol

log = logging.getLogger(__name__)

_SPOOL_BYTES = 16 * 1024 * 1024


# -- pins -------------------------------------------------------------------------------
@dataclass(frozen=True)
class Pin:
    """One pinned checksum of a Zarr and the published versions that hold it."""

    checksum: str
    frozen: bool
    versions: list[str]


def pins_of(session: Session, zarr_id: str) -> dict[str, Pin]:
    """``checksum -> Pin`` of every state of the Zarr a published version holds (oldest
    version first)."""
    rows = session.execute(
        select(ZarrPin.checksum, ZarrPin.frozen, Version.version)
        .join(Version, Version.id == ZarrPin.version_id)
        .where(ZarrPin.zarr_id == zarr_id)
        .order_by(Version.id)
    ).all()
    found: dict[str, Pin] = {}
    for checksum, frozen, version in rows:
        pin = found.get(checksum)
        if pin is None:
            found[checksum] = Pin(checksum, bool(frozen), [version])
        else:
            found[checksum] = Pin(checksum, pin.frozen or bool(frozen), [*pin.versions, version])
    return found


def frozen_by(session: Session, zarr_id: str) -> tuple[str, int] | None:
    """``(version, dandiset_id)`` of the first version that froze the Zarr, if any."""
    row = session.execute(
        select(Version.version, Version.dandiset_id)
        .join(ZarrPin, ZarrPin.version_id == Version.id)
        .where(ZarrPin.zarr_id == zarr_id, ZarrPin.frozen.is_(True))
        .order_by(Version.id)
        .limit(1)
    ).first()
    return None if row is None else (str(row[0]), int(row[1]))


def add_pins(
    session: Session, version_id: int, zarrs: Iterable[Zarr], mode: PublishedZarrs
) -> None:
    """Pin each Zarr's current checksum for the published version *version_id*."""
    for zarr in zarrs:
        session.add(
            ZarrPin(
                zarr_id=zarr.id,
                version_id=version_id,
                checksum=zarr.checksum,
                frozen=mode == PublishedZarrs.FREEZE,
            )
        )


# -- manifests of pinned states -----------------------------------------------------------
def manifest_row(session: Session, zarr_id: str, checksum: str) -> ZarrManifest | None:
    return session.scalar(
        select(ZarrManifest).where(
            ZarrManifest.zarr_id == zarr_id, ZarrManifest.checksum == checksum
        )
    )


def manifest_is_fresh(session: Session, zarr: Zarr, row: ZarrManifest) -> bool:
    """Whether *row*'s manifest names object versions of the Zarr's current state that are
    certain to exist.

    The change records decide (:mod:`~zarrchive.services.zarr_engine.manifest_changes`),
    not timestamps: a manifest names the current versions exactly when the Zarr's newest
    change set is the one marked when it was written (``manifest_written``, at this checksum
    and in this bucket), i.e. nothing was applied since.  A cancelled batch, which changes
    nothing, leaves it fresh; clocks play no part.  Otherwise (the Zarr left that state and
    came back, a batch went unrecorded, its objects moved buckets, a Zarr older than the
    records) it may name versions that ``admin gc`` has removed since, unless a pin already
    holds that checksum (then gc kept every version it names).
    """
    if row.checksum != zarr.checksum:
        return False
    names_current = resting_chain(
        session,
        zarr.id,
        zarr.checksum,
        zarr.dandiset.embargoed,
        newest_change_set_id(session, zarr.id),
    )
    if names_current is not None:
        return True
    return (
        session.scalar(
            select(ZarrPin.id)
            .where(ZarrPin.zarr_id == zarr.id, ZarrPin.checksum == zarr.checksum)
            .limit(1)
        )
        is not None
    )


def prepare_manifest(archive: Archive, zarr_id: str) -> None:
    """Write the manifest of the Zarr's current checksum unless a fresh one exists.

    Best effort: a Zarr with a batch open, or changing meanwhile, is left as it is (the
    publication that asked checks again under the Zarr's lock and refuses or retries).
    """

    with archive.db.session() as session:
        zarr = zarr_service.get_zarr(session, None, zarr_id, check_read=False)
        row = manifest_row(session, zarr.id, zarr.checksum)
        if row is not None and manifest_is_fresh(session, zarr, row):
            return
        stale = row is not None
        checksum = zarr.checksum
    if stale:  # written anew (the job skips checksums that have a row)
        with archive.db.write_session() as session:
            session.execute(
                delete(ZarrManifest).where(
                    ZarrManifest.zarr_id == zarr_id, ZarrManifest.checksum == checksum
                )
            )
    outcome = write_manifest(archive, zarr_id)
    log.info("manifest of Zarr %s at %s for publication: %s", zarr_id, checksum, outcome.status)


# -- reading a snapshot: the parsed index ----------------------------------------------------
@dataclass
class SnapshotIndex:
    """A pinned state of a Zarr, parsed from its manifest: every directory's node (sorted
    names for paging) and every file's S3 version id."""

    checksum: str
    file_count: int
    size: int
    nodes: dict[str, NodeView]
    versions: dict[str, str]

    @property
    def cost(self) -> int:
        """Rough bytes in memory (for the cache's budget)."""
        return 400 * (self.file_count + len(self.nodes)) + 1024


def build_index(entries: Iterable[ManifestEntry]) -> SnapshotIndex:
    """The index of a manifest's entries (grouped by directory, as manifests list them)."""
    files: dict[str, dict[str, ChildDigest]] = {}
    versions: dict[str, str] = {}

    def rows() -> Iterator[tuple[str, int, str]]:
        for entry in entries:
            etag = entry.etag.strip('"')
            versions[entry.path] = entry.version_id
            parent, _, name = entry.path.rpartition("/")
            files.setdefault(parent, {})[name] = ChildDigest(etag, entry.size)
            yield entry.path, entry.size, etag

    subdirectories: dict[str, dict[str, ChildDigest]] = {}
    nodes: dict[str, NodeView] = {}
    digests = list(iter_directory_digests(rows(), grouped=True))
    for directory in digests:
        if directory.path:
            parent, _, name = directory.path.rpartition("/")
            subdirectories.setdefault(parent, {})[name] = ChildDigest(
                directory.digest, directory.size
            )
    for directory in digests:
        dirs = subdirectories.get(directory.path, {})
        here = files.get(directory.path, {})
        nodes[directory.path] = NodeView(
            directory.digest,
            directory.count,
            directory.size,
            dirs,
            here,
            sorted(dirs),
            sorted(here),
        )
    root = nodes.get("")
    if root is None or root.count == 0:
        nodes[""] = NodeView.empty()
        return SnapshotIndex(EMPTY_CHECKSUM, 0, 0, nodes, versions)
    return SnapshotIndex(root.digest, root.count, root.size, nodes, versions)


class SnapshotCache:
    """Parsed snapshot indexes keyed by (endpoint, bucket, Zarr, checksum): a pinned
    manifest never changes, so an entry never goes stale.  One load per key at a time
    (single flight); least recently used entries are dropped beyond the budget, and an
    index larger than the budget is served once and not kept."""

    def __init__(self, *, budget_bytes: int = 1024 * 1024 * 1024, wait_seconds: float = 20):
        self.budget_bytes = budget_bytes
        self.wait_seconds = wait_seconds
        self._entries: OrderedDict[tuple[str, str, str, str], SnapshotIndex] = OrderedDict()
        self._used = 0
        self._lock = threading.Lock()
        self._loading: dict[tuple[str, str, str, str], threading.Lock] = {}
        #: Manifests downloaded and parsed (for tests and monitoring).
        self.loads = 0

    def get(
        self, key: tuple[str, str, str, str], load: Callable[[], SnapshotIndex]
    ) -> SnapshotIndex:
        with self._lock:
            found = self._entries.get(key)
            if found is not None:
                self._entries.move_to_end(key)
                return found
            flight = self._loading.setdefault(key, threading.Lock())
        if not flight.acquire(timeout=self.wait_seconds):
            raise ArchiveBusy("the snapshot's manifest is being read: retry in a few seconds")
        try:
            with self._lock:
                found = self._entries.get(key)
            if found is not None:
                return found
            index = load()
            with self._lock:
                self.loads += 1
                if index.cost <= self.budget_bytes:
                    self._entries[key] = index
                    self._used += index.cost
                    while self._used > self.budget_bytes:
                        _, dropped = self._entries.popitem(last=False)
                        self._used -= dropped.cost
            return index
        finally:
            flight.release()

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()
            self._used = 0


#: The process's cache of parsed snapshots.
SNAPSHOT_CACHE = SnapshotCache()


def _download(store: ObjectStoreProtocol, key: str, sink: IO[bytes]) -> None:
    for chunk in store.iter_content(key):
        sink.write(chunk)
    sink.seek(0)


def read_pinned_manifest(store: ObjectStoreProtocol, zarr_id: str, checksum: str) -> SnapshotIndex:
    """Download and parse the manifest of *checksum*; it must hash to *checksum*."""
    key = manifest_key(zarr_id, checksum)
    with tempfile.SpooledTemporaryFile(max_size=_SPOOL_BYTES) as body:
        _download(store, key, body)
        try:
            index = build_index(read_manifest(body).entries)
        except InvalidManifest as exc:
            raise CorruptManifest(
                f"the manifest {key} of a published snapshot of Zarr {zarr_id} is unreadable "
                f"({exc.message}): an administrator must investigate (the pinned object "
                "versions are kept in S3)"
            ) from exc
    if index.checksum != checksum:
        raise CorruptManifest(
            f"the manifest {key} of a published snapshot of Zarr {zarr_id} hashes to "
            f"{index.checksum}, not {checksum}: an administrator must investigate "
            f"('zarrchive admin fsck {zarr_id}')"
        )
    return index


@dataclass(frozen=True)
class SnapshotInfo:
    zarr_id: str
    checksum: str
    file_count: int
    size: int
    #: The pin also froze the Zarr (``freeze`` mode).
    frozen: bool
    versions: list[str]
    manifest_url: str | None


def list_snapshots(archive: Archive, session: Session, zarr: Zarr) -> list[SnapshotInfo]:
    """Every pinned state of *zarr* (readable by the caller), oldest first."""
    ref = zarr_service.ZarrRef.of(zarr)
    result = []
    for pin in pins_of(session, zarr.id).values():
        row = manifest_row(session, zarr.id, pin.checksum)
        result.append(
            SnapshotInfo(
                zarr.id,
                pin.checksum,
                *ZarrDigest.totals(pin.checksum),
                pin.frozen,
                pin.versions,
                manifest_url(archive, ref, pin.checksum) if row is not None else None,
            )
        )
    return result


def find_pin(session: Session, zarr: Zarr, checksum: str) -> Pin:
    """The pin of *checksum*, else 404 naming where the snapshots are listed."""
    pin = pins_of(session, zarr.id).get(checksum)
    if pin is None:
        raise NotFound(
            f"Zarr {zarr.id} has no published snapshot {checksum[:80]!r}: "
            f"GET /api/zarr/{zarr.id}/snapshots/ lists them"
        )
    return pin


def find_snapshot(
    archive: Archive, user: Caller | None, zarr_id: str, checksum: str
) -> tuple[zarr_service.ZarrRef, Pin]:
    """The Zarr (if *user* may read it) and its pin of *checksum* (else 404)."""
    with archive.db.session() as session:
        zarr = zarr_service.get_zarr(session, user, zarr_id)
        return zarr_service.ZarrRef.of(zarr), find_pin(session, zarr, checksum)


def snapshot_info(archive: Archive, session: Session, zarr: Zarr, checksum: str) -> SnapshotInfo:
    for info in list_snapshots(archive, session, zarr):
        if info.checksum == checksum:
            return info
    find_pin(session, zarr, checksum)  # raises
    raise AssertionError("unreachable")  # pragma: no cover


def ensure_manifest(archive: Archive, zarr: zarr_service.ZarrRef, pin: Pin) -> None:
    """Make sure the manifest of a pinned state exists.

    The manifest of a frozen pin may not be written yet (the job runs after publication):
    the Zarr is frozen at that state, so it is written now.
    """
    with archive.db.session() as session:
        has_manifest = manifest_row(session, zarr.id, pin.checksum) is not None
    if has_manifest:
        return
    if not pin.frozen:
        raise CorruptManifest(
            f"the manifest of the published snapshot {pin.checksum} of Zarr {zarr.id} is "
            "missing: an administrator must investigate"
        )
    outcome = write_manifest(archive, zarr.id)
    done = (ManifestStatus.WRITTEN, ManifestStatus.EXISTS)
    if outcome.checksum != pin.checksum or outcome.status not in done:
        raise ArchiveBusy(
            f"the manifest of Zarr {zarr.id} at {pin.checksum} is being written: retry"
        )


def snapshot_index(archive: Archive, zarr: zarr_service.ZarrRef, pin: Pin) -> SnapshotIndex:
    """The parsed index of a pinned state (cached)."""
    store = archive.store_for(zarr.embargoed)
    ensure_manifest(archive, zarr, pin)
    key = (store.endpoint_url or "", store.bucket, zarr.id, pin.checksum)
    return SNAPSHOT_CACHE.get(key, lambda: read_pinned_manifest(store, zarr.id, pin.checksum))


@dataclass(frozen=True)
class SnapshotFile(zarr_service.FileEntry):
    version_id: str


def version_url(archive: Archive, zarr: zarr_service.ZarrRef, key: str, version_id: str) -> str:
    """A URL of exactly one object version: public, or presigned when embargoed."""
    store = archive.store_for(zarr.embargoed)
    if zarr.embargoed:
        return store.presign_get_version(key, version_id, archive.settings.presign_expiry)
    return store.public_version_url(key, version_id)


def version_head_url(
    archive: Archive, zarr: zarr_service.ZarrRef, key: str, version_id: str
) -> str | None:
    """A presigned HEAD URL of exactly one object version of an embargoed Zarr (signing
    ``x-amz-checksum-mode: ENABLED``: see :class:`~.zarrs.DownloadLink`); ``None`` for a
    public one, whose plain URL answers HEAD itself."""
    if not zarr.embargoed:
        return None
    store = archive.store_for(True)
    return store.presign_head(
        key, archive.settings.presign_expiry, version_id=version_id, checksum_mode=True
    )


@dataclass(frozen=True, kw_only=True)
class SnapshotLink(zarr_service.DownloadLink):
    """A :class:`~.zarrs.DownloadLink` of exactly the pinned version *version_id* of a
    file."""

    version_id: str


def browse_snapshot(
    archive: Archive,
    zarr: zarr_service.ZarrRef,
    pin: Pin,
    path: str,
    *,
    page_size: int = 100,
    cursor: str | None = None,
) -> SnapshotFile | zarr_service.DirectoryListing:
    """A file of the snapshot, or a page of one of its directories (as the live
    :func:`zarrchive.services.zarr_engine.zarrs.browse`)."""
    if not 1 <= page_size <= zarr_service.MAX_PAGE_SIZE:
        raise InvalidInput(f"page_size must be between 1 and {zarr_service.MAX_PAGE_SIZE}")
    is_directory_path = path == "" or path.endswith("/")
    directory = validate_directory_path(path)
    after = zarr_service._decode_cursor(cursor) if cursor else None
    index = snapshot_index(archive, zarr, pin)
    if directory and not is_directory_path:
        version_id = index.versions.get(directory)
        if version_id is not None:
            parent, name = split_path(directory)
            child = index.nodes[parent].files[name]
            key = zarr_object_key(zarr.id, directory)
            url = version_url(archive, zarr, key, version_id)
            return SnapshotFile(name, directory, child.size, child.digest, key, url, version_id)
    node = index.nodes.get(directory)
    if node is None:
        raise NotFound(
            f"the snapshot {pin.checksum} of Zarr {zarr.id} has no file or directory {directory!r}"
        )
    return zarr_service.directory_page(directory, node, after, page_size)


def snapshot_download_links(
    archive: Archive, zarr: zarr_service.ZarrRef, pin: Pin, paths: list[str]
) -> list[SnapshotLink]:
    """Where to read each file of the snapshot: URLs that fetch exactly the pinned versions
    (presigned for an embargoed Zarr, with a presigned HEAD URL of each pinned version:
    :class:`~.zarrs.DownloadLink`).  Every path must be a file of the snapshot (else 404
    naming them)."""
    if not paths:
        raise InvalidInput("give at least one path")
    limit = archive.settings.max_batch_files
    if len(paths) > limit:
        raise InvalidInput(f"{len(paths)} paths: at most {limit} per request")
    checked = [validate_path(p) for p in paths]
    index = snapshot_index(archive, zarr, pin)
    missing = [p for p in checked if p not in index.versions]
    if missing:
        raise NotFound(
            f"{len(missing)} path(s) are not files of the snapshot {pin.checksum} of Zarr "
            f"{zarr.id}: {', '.join(repr(p) for p in missing[:10])}"
        )
    result = []
    for path in checked:
        version_id = index.versions[path]
        key = zarr_object_key(zarr.id, path)
        url = version_url(archive, zarr, key, version_id)
        head = version_head_url(archive, zarr, key, version_id)
        result.append(SnapshotLink(path, url, head, version_id=version_id))
    return result


def published_asset_checksum(session: Session, asset_id: str) -> tuple[str, str] | None:
    """``(zarr_id, checksum)`` a *published* Zarr asset pins as a snapshot, else ``None`` (a
    draft asset, a blob, or a frozen Zarr, whose live state is the pinned one): what serves
    a published Zarr asset's content serves that snapshot, never the live draft."""
    from zarrchive.db.models import Asset

    row = session.execute(
        select(ZarrPin.zarr_id, ZarrPin.checksum)
        .join(Asset, (Asset.version_id == ZarrPin.version_id) & (Asset.zarr_id == ZarrPin.zarr_id))
        .where(Asset.id == asset_id, ZarrPin.frozen.is_(False))
        .limit(1)
    ).first()
    return None if row is None else (str(row[0]), str(row[1]))


# -- unembargo: pinned manifests follow the move -------------------------------------------
def version_map(
    source_history: list[ObjectVersion], target_history: list[ObjectVersion]
) -> dict[str, str]:
    """Source version id -> the target's copy of it, for one key whose history was replayed
    oldest first into the target (see :func:`zarrchive.storage.objects.oldest_first`):
    the i-th version written in the source is the i-th written in the target."""

    mapping: dict[str, str] = {}
    source = oldest_first(source_history)
    target = oldest_first(target_history)
    if len(target) < len(source):
        raise StorageError(
            f"{source[0].key if source else '?'}: the target holds {len(target)} versions, "
            f"fewer than the {len(source)} copied"
        )
    for old, new in zip(source, target[len(target) - len(source) :], strict=True):
        if old.is_delete_marker != new.is_delete_marker:
            raise StorageError(f"{old.key}: the copied history does not match the original")
        mapping[old.version_id] = new.version_id
    return mapping


def remap_pinned_manifests(
    session: Session, source: ObjectStoreProtocol, target: ObjectStoreProtocol, zarr_id: str
) -> set[str]:
    """After unembargo copied every version of the Zarr to *target*: write each pinned
    manifest to *target* with the copies' version ids.  Returns the checksums rewritten
    (their manifest rows stay; every other row is the caller's to drop)."""
    pinned = [c for c in pins_of(session, zarr_id) if manifest_row(session, zarr_id, c)]
    if not pinned or all(target.head(manifest_key(zarr_id, c)) for c in pinned):
        return set(pinned)
    prefix = zarr_prefix(zarr_id)
    histories: dict[str, list[ObjectVersion]] = {}
    for version in source.iter_versions(prefix):
        histories.setdefault(version.key, []).append(version)
    copies: dict[str, list[ObjectVersion]] = {}
    for version in target.iter_versions(prefix):
        copies.setdefault(version.key, []).append(version)
    mapping: dict[tuple[str, str], str] = {}
    for key, history in histories.items():
        for old, new in version_map(history, copies.get(key, [])).items():
            mapping[(key, old)] = new
    done: set[str] = set()
    for checksum in pinned:
        index_key = manifest_key(zarr_id, checksum)
        if target.head(index_key) is not None:  # rewritten by an earlier, interrupted run
            done.add(checksum)
            continue
        with (
            tempfile.SpooledTemporaryFile(max_size=_SPOOL_BYTES) as raw,
            tempfile.SpooledTemporaryFile(max_size=_SPOOL_BYTES) as body,
        ):
            _download(source, index_key, raw)
            entries = [
                entry._replace(version_id=mapping[(prefix + entry.path, entry.version_id)])
                for entry in read_manifest(raw).entries
            ]
            generated = generate_manifest(entries, body, database_checksum=checksum)
            target.upload_fileobj(index_key, generated.open(), "application/json")
        done.add(checksum)
    return done


@dataclass(frozen=True)
class UnreferencedZarr:
    """A Zarr that no asset of any version and no published version references, with no
    batch, unchanged for the grace period: what ``admin gc`` removes whole."""

    zarr_id: str
    dandiset: str
    name: str
    file_count: int
    size: int
    modified: datetime


def _unreferenced(cutoff: datetime) -> list[ColumnElement[bool]]:
    """The conditions on ``zarrs`` of :class:`UnreferencedZarr` (unchanged since *cutoff*)."""
    return [
        ~exists().where(Asset.zarr_id == Zarr.id),
        ~exists().where(TrashedAsset.zarr_id == Zarr.id),  # restorable: see trash.py
        ~exists().where(ZarrPin.zarr_id == Zarr.id),
        ~exists().where(UploadBatch.zarr_id == Zarr.id),
        Zarr.created_at <= cutoff,
        Zarr.modified_at <= cutoff,
    ]


def unreferenced_zarrs(
    archive: Archive, *, grace: timedelta, now: datetime | None = None
) -> list[UnreferencedZarr]:
    """The Zarrs nothing references (:class:`UnreferencedZarr`), oldest first.

    A Zarr is uploaded before its asset is created (``zarrchive upload`` and ``dandi upload``
    create the asset at the end), and a deleted asset leaves its Zarr: the *grace* period,
    counted from the Zarr's last change, keeps every upload in progress out of reach."""
    cutoff = (now or utcnow()) - grace
    with archive.db.session() as session:
        rows = session.scalars(
            select(Zarr).where(*_unreferenced(cutoff)).order_by(Zarr.created_at, Zarr.id)
        )
        return [
            UnreferencedZarr(
                z.id, z.dandiset.identifier, z.name, z.file_count, z.size, z.modified_at
            )
            for z in rows
            if z.dandiset.embargo_status != EmbargoStatus.UNEMBARGOING
        ]


def remove_unreferenced_zarr(
    archive: Archive, zarr_id: str, *, grace: timedelta, now: datetime | None = None
) -> bool:
    """Remove the Zarr *zarr_id* for good if it is still unreferenced (checked again under
    its row lock): its row (with its manifests' index), then every version of its objects,
    ``.checksum`` nodes, manifests and staging areas.  False (nothing removed) when
    something references or changed it meanwhile.

    The row goes first, in one transaction: from then on nothing can reference the Zarr,
    and a failure of S3 afterwards (a :class:`StorageError`, naming the prefix) leaves only
    unreachable objects, never a referenced Zarr with missing files."""
    cutoff = (now or utcnow()) - grace
    with archive.db.write_session() as session:
        zarr = session.scalar(
            select(Zarr).where(Zarr.id == zarr_id, *_unreferenced(cutoff)).with_for_update(of=Zarr)
        )
        if zarr is None or zarr.dandiset.embargo_status == EmbargoStatus.UNEMBARGOING:
            return False
        store = archive.store_for(zarr.dandiset.embargoed)
        session.delete(zarr)
    for prefix in (
        zarr_prefix(zarr_id),
        checksum_prefix(zarr_id),
        manifest_prefix(zarr_id),
        staging_zarr_prefix(zarr_id),
    ):
        store.purge(prefix)
    log.info("removed the unreferenced Zarr %s", zarr_id)
    return True


def gc_zarr_ids(archive: Archive) -> list[str]:
    """Every Zarr, oldest first."""
    with archive.db.session() as session:
        return list(session.scalars(select(Zarr.id).order_by(Zarr.created_at, Zarr.id)))

"""Embargo: everything of an embargoed dandiset lives in the private bucket.

The archive has two buckets: the public one is world-readable (anonymous GET),
the embargo bucket is not.  An embargoed dandiset's Zarr objects, ``.checksum``
nodes, manifests and blobs are written to the embargo bucket, and the API
answers 404 about them to anyone but owners and admins.  This works the same on
AWS S3 (a bucket policy granting ``s3:GetObject`` to ``*`` on the public bucket)
and on SeaweedFS (an ``anonymous`` identity with ``Read:{public bucket}``).

Unembargoing moves the objects: the dandiset is marked ``unembargoing`` (its
Zarrs refuse writes), every object version is copied server-side to the public
bucket (oldest first, on the job's own thread pool; in parts above 5 GiB), reads
flip to the public bucket, manifests are regenerated (S3 version ids change with
the copy; the manifests of states published versions pin are rewritten with the
copies' version ids, so every snapshot still reads exactly its state), the embargo bucket's copies are purged (any refused deletion fails
the job) and only then the dandiset is ``open``.  Each step is idempotent, so an
interrupted move is finished by running it again.

End dates: an embargoed dandiset has an end date (DANDI's ``embargo_end_date``, given at
creation as ``?embargo_end_date=YYYY-MM-DD``, by default two years on; shown in its draft's
``access[0].embargoedUntil``).  On that day (UTC) the archive unembargoes it by itself: a
periodic job (:data:`END_CHECK`, every minute, in-process and on the RQ workers alike)
starts the move of every dandiset whose day has come, recorded in the audit log with no
user.  The database decides who starts a move (a conditional update of the dandiset's
status): any number of processes may check at once, one move starts.
"""

from __future__ import annotations

import logging
import uuid
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, date, datetime
from typing import cast

from sqlalchemy import select, update
from sqlalchemy.orm import Session

from zarrchive.db.models import (
    Asset,
    Blob,
    Dandiset,
    EmbargoStatus,
    Version,
    Zarr,
    ZarrManifest,
)
from zarrchive.errors import Conflict, StorageError
from zarrchive.jobs.lanes import JobLane
from zarrchive.jobs.periodic import PeriodicJob
from zarrchive.services.dandi import audit, dois, lindi_files
from zarrchive.services.dandi.blobs import Digests, stored_twin
from zarrchive.services.dandi.dandisets import get_dandiset
from zarrchive.services.dandi.embargo_dates import embargo_access, utc_today
from zarrchive.services.identity.auth import Caller, is_owner, is_reviewer, require_owner
from zarrchive.services.runtime import Archive, current_archive
from zarrchive.services.zarr_engine.snapshots import remap_pinned_manifests
from zarrchive.services.zarr_engine.uploads import open_batch, queue_manifest
from zarrchive.storage.keys import blob_key, checksum_prefix, manifest_prefix, zarr_prefix
from zarrchive.storage.objects import (
    COPY_OBJECT_LIMIT,
    COPY_PART_SIZE,
    ObjectStore,
    ObjectVersion,
    copy_object_version,
    oldest_first,
    purge_checked,
)

log = logging.getLogger(__name__)

UNEMBARGO_JOB = "zarrchive.services.dandi.embargo:unembargo_job"


#: Threads of one unembargo's copies: its own bounded pool, never the request handlers'.
UNEMBARGO_WORKERS = 8


def embargo_status(dandiset: Dandiset) -> str:
    """``embargoed``, ``unembargoing`` or ``open``."""
    if dandiset.embargo_status == EmbargoStatus.UNEMBARGOING:
        return EmbargoStatus.UNEMBARGOING.value
    return (EmbargoStatus.EMBARGOED if dandiset.embargoed else EmbargoStatus.OPEN).value


# -- end dates (the dates themselves: :mod:`.embargo_dates`) ------------------------------
def _claim_move(session: Session, dandiset: Dandiset, today: date) -> bool:
    """Mark *dandiset* ``unembargoing`` if it is embargoed and no one marked it yet: the
    database decides (a conditional update), so of processes racing one wins.  Its end date
    becomes *today* if later (DANDI's), and its draft's ``access`` says so."""
    claimed = session.execute(
        update(Dandiset)
        .where(
            Dandiset.id == dandiset.id,
            Dandiset.embargoed.is_(True),
            Dandiset.embargo_status != EmbargoStatus.UNEMBARGOING.value,
        )
        .values(embargo_status=EmbargoStatus.UNEMBARGOING.value)
        .execution_options(synchronize_session=False)
    )
    if getattr(claimed, "rowcount", 0) != 1:
        return False
    session.refresh(dandiset)
    if dandiset.embargo_end_date is None or dandiset.embargo_end_date > today:
        dandiset.embargo_end_date = today
    draft = session.scalar(
        select(Version).where(Version.dandiset_id == dandiset.id, Version.version == "draft")
    )
    if draft is not None and isinstance((draft.metadata_ or {}).get("access"), list):
        draft.metadata_ = {
            **draft.metadata_,
            "access": embargo_access(False, dandiset.embargo_end_date),
        }
    return True


def _busy_zarrs(session: Session, dandiset: Dandiset) -> list[str]:
    zarrs = session.scalars(
        select(Zarr).where(Zarr.dandiset_id == dandiset.id).with_for_update(of=Zarr)
    )
    return [z.id for z in zarrs if open_batch(session, z) is not None]


def _queue_move(archive: Archive, number: int) -> None:
    if archive.jobs is not None:
        archive.jobs.enqueue(
            UNEMBARGO_JOB, {"dandiset_id": number}, key=f"unembargo:{number}", lane=JobLane.ZARR
        )
    else:
        move_to_public(archive, number)


def start_unembargo(archive: Archive, user: Caller | None, identifier: str) -> str:
    """Begin making an embargoed dandiset public (owners); the move runs as a job.
    Returns the dandiset's identifier.

    A dandiset still ``unembargoing`` (an earlier move failed, e.g. S3 refused a purge) may
    be asked again: the move is idempotent and resumes.
    """
    with archive.db.write_session() as session:
        dandiset = get_dandiset(session, user, identifier)
        require_owner(user, dandiset)
        resuming = dandiset.embargo_status == EmbargoStatus.UNEMBARGOING
        if not dandiset.embargoed and not resuming:
            raise Conflict(f"dandiset {dandiset.identifier} is not embargoed")
        if not resuming:
            busy = _busy_zarrs(session, dandiset)
            if busy:
                raise Conflict(
                    f"Zarrs {', '.join(busy)} have upload batches open: complete or cancel "
                    "them, then unembargo"
                )
            if _claim_move(session, dandiset, utc_today()):
                audit.record(session, dandiset, user, audit.RecordType.UNEMBARGO_DANDISET, {})
        number, shown = dandiset.id, dandiset.identifier
    _queue_move(archive, number)
    return shown


def shown_end_date(archive: Archive, user: Caller | None, identifier: str) -> date | None:
    """The day an embargoed (or unembargoing) dandiset's embargo ends, for its pages: to
    its owners (and admins) and reviewers only; ``None`` to anyone else, or without one."""
    with archive.db.session() as session:
        dandiset = get_dandiset(session, user, identifier)
        if not dandiset.embargoed or dandiset.embargo_end_date is None:
            return None
        if is_owner(user, dandiset) or is_reviewer(user, dandiset):
            return dandiset.embargo_end_date
        return None


def due_embargoes(session: Session, today: date) -> list[int]:
    """The embargoed dandisets (not in the trash, not being moved) whose end date has come."""
    return list(
        session.scalars(
            select(Dandiset.id)
            .where(
                Dandiset.embargoed.is_(True),
                Dandiset.embargo_status != EmbargoStatus.UNEMBARGOING.value,
                Dandiset.deleted_at.is_(None),
                Dandiset.embargo_end_date.is_not(None),
                Dandiset.embargo_end_date <= today,
            )
            .order_by(Dandiset.id)
        )
    )


def end_due_embargoes(archive: Archive, today: date) -> list[str]:
    """Start the move of every embargoed dandiset whose end date is *today* or earlier (no
    owner asks: the audit record has no user and says why); the identifiers started.  A
    dandiset whose Zarrs have upload batches open waits for the next check."""
    with archive.db.session() as session:
        due = due_embargoes(session, today)
    started = []
    for number in due:
        with archive.db.write_session() as session:
            dandiset = session.get(Dandiset, number)
            if dandiset is None:
                continue
            busy = _busy_zarrs(session, dandiset)
            if busy:
                log.info(
                    "dandiset %06d: its embargo ended but Zarrs %s have upload batches open; "
                    "it is unembargoed once they are applied or cancelled",
                    number,
                    ", ".join(busy),
                )
                continue
            end = dandiset.embargo_end_date
            if not _claim_move(session, dandiset, today):
                continue  # another process started it
            audit.record(
                session,
                dandiset,
                None,
                audit.RecordType.UNEMBARGO_DANDISET,
                {"reason": "embargo_end_date", "embargo_end_date": end.isoformat() if end else ""},
            )
            shown = dandiset.identifier
        log.info("dandiset %s: its embargo ended (%s): unembargoing it", shown, end)
        _queue_move(archive, number)
        started.append(shown)
    return started


def end_due_embargoes_job(now: str | None = None) -> None:
    """The periodic job (:data:`END_CHECK`): *now* is the ticker's clock (ISO 8601)."""
    today = datetime.fromisoformat(now).astimezone(UTC).date() if now else utc_today()
    end_due_embargoes(current_archive(), today)


#: The check of end dates: every minute, on the Zarr lane (where unembargo moves run).
END_CHECK = PeriodicJob("zarrchive.services.dandi.embargo:end_due_embargoes_job", every=60.0)


def _prefixes(zarr_ids: list[str]) -> list[str]:
    return [p(z) for z in zarr_ids for p in (zarr_prefix, checksum_prefix)]


@dataclass(frozen=True)
class _Copy:
    """The copy of one object with its whole history (or only its current version)."""

    key: str
    history: list[ObjectVersion]
    target_key: str


class _Mover:
    """Copies objects from *source* to *target* on a pool of its own, keeping histories."""

    def __init__(
        self,
        source: ObjectStore,
        target: ObjectStore,
        pool: ThreadPoolExecutor,
        *,
        threshold: int,
        part_size: int,
    ) -> None:
        self.source, self.target, self.pool = source, target, pool
        self.threshold, self.part_size = threshold, part_size
        self.copied = 0

    def histories(self, prefix: str, *, exact: bool = False) -> list[_Copy]:
        """What is left to copy under *prefix*: every key's versions that *target* lacks.

        Each key's history is replayed oldest first by one thread, so *target* holds a
        prefix of it after an interruption: the versions it has are skipped on a re-run.
        """
        by_key: dict[str, list[ObjectVersion]] = {}
        for version in self.source.iter_versions(prefix):
            if not exact or version.key == prefix:
                by_key.setdefault(version.key, []).append(version)
        done = Counter(
            v.key for v in self.target.iter_versions(prefix) if not exact or v.key == prefix
        )
        return [
            _Copy(key, oldest_first(history)[done[key] :], key)
            for key, history in sorted(by_key.items())
        ]

    def run(self, copies: list[_Copy]) -> None:
        for _ in self.pool.map(self._replay, copies):
            pass

    def _replay(self, copy: _Copy) -> None:
        for version in copy.history:
            if version.is_delete_marker:
                self.target.delete(copy.target_key)
            else:
                copy_object_version(
                    self.target,
                    self.source,
                    copy.target_key,
                    size=version.size,
                    source_key=copy.key,
                    version_id=version.version_id,
                    threshold=self.threshold,
                    part_size=self.part_size,
                )
            self.copied += 1


def move_to_public(
    archive: Archive,
    dandiset_id: int,
    *,
    copy_threshold: int = COPY_OBJECT_LIMIT,
    copy_part_size: int = COPY_PART_SIZE,
) -> None:
    """Copy the dandiset's objects to the public bucket, flip it public, purge the copies.

    Every version of every Zarr object and ``.checksum`` node is copied, oldest first, so
    the public bucket keeps the history (versioned Zarrs name object versions); manifests
    are regenerated instead, since S3 version ids change with the copy.  A blob that an
    other (still embargoed) dandiset uses too is copied, not moved: this dandiset's assets
    get a public blob of their own and the other keeps its private one.

    The copies run on a pool of this job's own (:data:`UNEMBARGO_WORKERS` threads), not on
    the store's pool that request handlers share.  Objects above *copy_threshold* are
    copied in parts.  The dandiset stays ``unembargoing`` until the embargo bucket's
    copies are purged: if S3 refuses any deletion the job fails, and running it again
    finishes the move.
    """
    with archive.db.session() as session:
        dandiset = session.get(Dandiset, dandiset_id)
        if dandiset is None or dandiset.embargo_status != EmbargoStatus.UNEMBARGOING:
            return
        zarr_ids = list(session.scalars(select(Zarr.id).where(Zarr.dandiset_id == dandiset_id)))
        private = _dandiset_blobs(session, dandiset_id, embargoed=True)
        # blob id -> its key in the embargo bucket
        blobs = {b.id: b.key for b in private}
        shared = {b.id for b in private if _used_elsewhere(session, b, dandiset_id)}
        # public blobs of the same content (by digest) that may take the private ones' place
        twins = {
            twin.id: _Twin(twin.id, twin.key, twin.size)
            for twin in (stored_twin(session, Digests.of(b), embargoed=False) for b in private)
            if twin is not None
        }
        # blobs an interrupted run already published still need their private copies purged
        published = [b.key for b in _dandiset_blobs(session, dandiset_id, embargoed=False)]
    # The copies between the two buckets and the checked purge are S3's own calls. The archive
    # runs on S3; the tests' in-memory store answers the listings and deletes of a dandiset
    # with nothing to move, and an object copy on it fails (it has no S3 client).
    source = cast(ObjectStore, archive.embargo_store)
    target = cast(ObjectStore, archive.store)
    for twin in twins.values():
        _check_twin_object(target, twin)
    with ThreadPoolExecutor(UNEMBARGO_WORKERS, thread_name_prefix="unembargo") as pool:
        mover = _Mover(source, target, pool, threshold=copy_threshold, part_size=copy_part_size)
        copies = [c for prefix in _prefixes(zarr_ids) for c in mover.histories(prefix)]
        for blob_id, key in blobs.items():
            if blob_id not in shared:
                copies += mover.histories(key, exact=True)
        mover.run(copies)
        shared_copies = {i: str(uuid.uuid4()) for i in blobs if i in shared}
        current = []
        for blob_id, key in blobs.items():
            if blob_id in shared:
                latest = source.latest_version(key)
                if latest is None or latest.is_delete_marker:
                    raise StorageError(f"blob {blob_id}: {key!r} is missing in S3")
                current.append(_Copy(key, [latest], blob_key(shared_copies[blob_id])))
        mover.run(current)
    # pinned states keep their manifests, rewritten with the copies' version ids
    kept: dict[str, set[str]] = {}
    with archive.db.session() as session:
        for zarr_id in zarr_ids:
            kept[zarr_id] = remap_pinned_manifests(session, source, target, zarr_id)
    with archive.db.write_session() as session:
        dandiset = session.get(Dandiset, dandiset_id)
        assert dandiset is not None
        dandiset.embargoed = False  # reads go to the public bucket from now on
        # the public copies made for blobs that a twin replaced: no blob's content
        needless: list[str] = []
        for blob in session.scalars(select(Blob).where(Blob.id.in_(list(blobs)))):
            if blob.id in shared:
                if _copy_blob(session, blob, shared_copies[blob.id], dandiset_id, twins):
                    needless.append(blob_key(shared_copies[blob.id]))
            elif _publish_blob(session, blob, twins):
                needless.append(blob.key)
        # version ids changed with the copy: manifests are written anew
        for row in session.scalars(select(ZarrManifest).where(ZarrManifest.zarr_id.in_(zarr_ids))):
            if row.checksum not in kept.get(row.zarr_id, set()):
                session.delete(row)
    for prefix in [*_prefixes(zarr_ids), *(manifest_prefix(z) for z in zarr_ids)]:
        purge_checked(source, prefix)
    for key in [*published, *(k for i, k in blobs.items() if i not in shared)]:
        purge_checked(source, key, exact=True)
    for key in needless:
        target.delete_all_versions(key)
    with archive.db.write_session() as session:
        dandiset = session.get(Dandiset, dandiset_id)
        assert dandiset is not None
        dandiset.embargo_status = EmbargoStatus.OPEN.value
    log.info("dandiset %06d is public: %d object versions copied", dandiset_id, mover.copied)
    for zarr_id in zarr_ids:
        queue_manifest(archive, zarr_id)
    moved = [i for i in blobs if i not in shared]  # shared ones stay private for the others
    lindi_files.after_unembargo(archive, dandiset_id, moved)  # rewritten for public URLs
    dois.dandiset_unembargoed(archive, dandiset_id)  # its Draft DOI, now that it is public


def _dandiset_blobs(session: Session, dandiset_id: int, *, embargoed: bool) -> list[Blob]:
    query = (
        select(Blob)
        .join(Asset, Asset.blob_id == Blob.id)
        .join(Version, Version.id == Asset.version_id)
        .where(Version.dandiset_id == dandiset_id, Blob.embargoed.is_(embargoed))
        .distinct()
    )
    return list(session.scalars(query))


@dataclass(frozen=True)
class _Twin:
    """A public blob with the same digests as a private one (:func:`stored_twin`)."""

    id: str
    key: str
    size: int


def _check_twin_object(store: ObjectStore, twin: _Twin) -> None:
    """A twin takes a private blob's place (whose copy is then purged) only if its object is
    in the public bucket with its size: its digests were verified when it was uploaded."""
    head = store.head(twin.key)
    if head is None or head.size != twin.size:
        found = "missing" if head is None else f"{head.size} bytes"
        raise StorageError(
            f"public blob {twin.id} ({twin.key!r}) has the digests of a blob being unembargoed "
            f"but its object is {found}, not {twin.size} bytes: nothing was purged; restore its "
            "object in S3, then unembargo again"
        )


def _verified_twin(session: Session, blob: Blob, twins: dict[str, _Twin]) -> Blob | None:
    """The public blob of *blob*'s content, if any: one whose object was checked in S3."""
    twin = stored_twin(session, Digests.of(blob), embargoed=False)
    if twin is not None and twin.id not in twins:
        raise StorageError(
            f"public blob {twin.id} of the same content as blob {blob.id} appeared during "
            "the move: unembargo again (its object is then checked)"
        )
    return twin


def _publish_blob(session: Session, blob: Blob, twins: dict[str, _Twin]) -> bool:
    """Mark *blob* public, or merge it into the public blob of the same content (an equal
    digest, never a missing one: see :func:`~zarrchive.services.dandi.blobs.compare_content`).
    True if merged (its public copy is then needless)."""
    twin = _verified_twin(session, blob, twins)
    if twin is None:
        blob.embargoed = False
        return False
    for asset in session.scalars(select(Asset).where(Asset.blob_id == blob.id)):
        asset.blob_id = twin.id
    session.flush()
    session.delete(blob)
    return True


def _used_elsewhere(session: Session, blob: Blob, dandiset_id: int) -> bool:
    query = (
        select(Asset.id)
        .join(Version, Version.id == Asset.version_id)
        .where(Asset.blob_id == blob.id, Version.dandiset_id != dandiset_id)
        .limit(1)
    )
    return session.scalar(query) is not None


def _copy_blob(
    session: Session, blob: Blob, copy_id: str, dandiset_id: int, twins: dict[str, _Twin]
) -> bool:
    """Point this dandiset's assets at a public blob with *blob*'s content: its twin, or the
    copy *copy_id* (with *blob*'s digests).  True if its twin (the copy is then needless)."""
    twin = _verified_twin(session, blob, twins)
    merged = twin is not None
    if twin is None:
        twin = Blob(
            id=copy_id,
            md5=blob.md5,
            etag=blob.etag,
            sha256=blob.sha256,  # the same content: its digest need not be computed again
            size=blob.size,
            key=blob_key(copy_id),
            embargoed=False,
        )
        session.add(twin)
        session.flush()
    mine = select(Version.id).where(Version.dandiset_id == dandiset_id)
    for asset in session.scalars(
        select(Asset).where(Asset.blob_id == blob.id, Asset.version_id.in_(mine))
    ):
        asset.blob_id = twin.id
    return merged


def unembargo_job(dandiset_id: int) -> None:
    """The background job (see :mod:`zarrchive.jobs`)."""
    move_to_public(current_archive(), dandiset_id)

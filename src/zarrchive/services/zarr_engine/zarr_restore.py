"""Rolling a Zarr back to an earlier checksum that has a manifest, exactly.

The changes are the difference of two manifests, the current state's and the target's
(:func:`zarrchive.manifest.diff.restore_changes`: a sorted merge of the two streamed files,
bounded memory), spooled to temporary files, then queued in one transaction as ordinary
batches of at most ``max_batch_files`` changes each, applied by the apply engine like an
upload's (:mod:`zarrchive.services.zarr_engine.uploads.apply`: the same tree update, change records,
manifests and audit trail):

- first ``delete`` batches: the paths the target lacks (a path that is a file in one state
  and a directory in the other is deleted before it is written);
- then *restore batches* (``BatchKind.RESTORE``):
  upload batches whose files are server-side copies of the versions the target's manifest
  names (``staged_version``), from the Zarr's own keys, into place; nothing is uploaded.
  Files above the multipart threshold are copied in parts, their md5 checked as they are.

Only differences are copied (a path already holding the target's bytes is left alone), so a
rollback of 1,000 files of a 10^6-file Zarr costs 1,000 copies plus the reads of the two
manifests.  At rest, the Zarr's checksum is the target.  Object versions are never deleted
or changed (a copy makes a new version), so a version pinned by a publication stays as it
is; and a Zarr a published version froze can't be restored (409).
"""

from __future__ import annotations

import json
import logging
import tempfile
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, replace
from datetime import timedelta
from typing import IO

from sqlalchemy import select
from sqlalchemy.orm import Session

from zarrchive.db.models import (
    BatchKind,
    BatchState,
    UploadBatch,
    UploadBatchFile,
    ZarrManifest,
    utcnow,
)
from zarrchive.errors import (
    ArchiveBusy,
    Conflict,
    InvalidInput,
    NotFound,
    UploadInProgress,
    ZarrFrozen,
)
from zarrchive.manifest import ManifestEntry, manifest_key, stream_manifest_entries
from zarrchive.manifest.diff import restore_changes
from zarrchive.services.dandi import audit
from zarrchive.services.identity.auth import Caller, require_owner
from zarrchive.services.runtime import Archive
from zarrchive.services.zarr_engine.manifests import READ_CHUNK, ManifestStatus, write_manifest
from zarrchive.services.zarr_engine.uploads.apply import apply_pending, schedule_apply
from zarrchive.services.zarr_engine.uploads.batches import record_directories
from zarrchive.services.zarr_engine.uploads.parts import part_size_for
from zarrchive.services.zarr_engine.uploads.records import lock_for_write, next_seq
from zarrchive.services.zarr_engine.zarr_holds import zarr_holds
from zarrchive.services.zarr_engine.zarrs import ensure_writable, get_zarr
from zarrchive.storage.keys import zarr_object_key
from zarrchive.storage.protocol import ObjectStoreProtocol
from zarrchive.version_retention import ManifestRecord, keep_reasons

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class RestoreOutcome:
    """What a restore did: the batches it queued (deletes first, then copies) and whether
    they are applied already (else the apply job applies them: the Zarr is ``applying``)."""

    zarr_id: str
    #: the checksum the Zarr had
    checksum_before: str
    #: the checksum asked for (the Zarr's, once at rest)
    checksum: str
    copied: int
    deleted: int
    batches: int
    applied: bool


@dataclass(frozen=True)
class _Plan:
    """The spooled changes: deleted paths (one JSON string a line) and copies
    (``[path, version id, md5, size]`` a line)."""

    deletes: IO[str]
    copies: IO[str]
    deleted: int
    copied: int
    #: one copy's source, checked before anything is queued
    first_copy: tuple[str, str] | None


def _manifest_row(session: Session, zarr_id: str, checksum: str) -> ZarrManifest | None:
    return session.scalar(
        select(ZarrManifest).where(
            ZarrManifest.zarr_id == zarr_id, ZarrManifest.checksum == checksum
        )
    )


def _refuse_frozen(session: Session, zarr_id: str) -> None:
    zarr = get_zarr(session, None, zarr_id, check_read=False)
    try:
        ensure_writable(session, zarr)
    except ZarrFrozen as exc:  # a state, not a permission: 409
        raise Conflict(exc.message) from None


def _check(archive: Archive, user: Caller | None, zarr_id: str, target: str) -> tuple[str, str]:
    """The Zarr's id and checksum, if *user* may restore it to *target* (else a 4xx, nothing
    changed)."""
    with archive.db.session() as session:
        zarr = get_zarr(session, user, zarr_id)
        require_owner(user, zarr.dandiset)
        _refuse_frozen(session, zarr.id)
        if session.scalar(select(UploadBatch.id).where(UploadBatch.zarr_id == zarr.id).limit(1)):
            raise UploadInProgress(
                f"Zarr {zarr.id} has an upload batch open or being applied: restore it once "
                "the upload is finished or cancelled"
            )
        if target == zarr.checksum:
            return zarr.id, zarr.checksum
        row = _manifest_row(session, zarr.id, target)
        if row is None:
            raise NotFound(
                f"Zarr {zarr.id} has no manifest of checksum {target}, so it can't be restored "
                f"to it: GET /api/zarr/{zarr.id}/history/ lists the checksums it can be "
                "restored to"
            )
        retention = timedelta(days=archive.settings.version_retention_days)
        if not keep_reasons(
            ManifestRecord(target, row.created_at),
            zarr_holds(session, zarr),
            now=utcnow(),
            retention=retention,
        ):
            raise Conflict(
                f"the manifest of checksum {target} of Zarr {zarr.id} is older than the "
                f"archive's retention ({retention.days} days, ZARRCHIVE_VERSION_RETENTION_DAYS) "
                "and no published version pins it: the object versions it names may have "
                "been collected, so it can't be restored to that checksum"
            )
        if row.mismatch:
            raise Conflict(
                f"the manifest of checksum {target} of Zarr {zarr.id} lists objects that hash "
                f"to {row.listing_checksum}, not {target} (a mismatch the archive recorded): "
                "it can't be restored to that checksum"
            )
        return zarr.id, zarr.checksum


def _current_manifest(archive: Archive, zarr_id: str, checksum: str) -> None:
    """Make sure the manifest of the Zarr's current state is there and names it (written now
    from records when missing)."""
    outcome = write_manifest(archive, zarr_id)
    if outcome.checksum != checksum or outcome.status in (
        ManifestStatus.BUSY,
        ManifestStatus.SUPERSEDED,
    ):
        raise Conflict(f"Zarr {zarr_id} changed while its restore was prepared: try again")
    with archive.db.session() as session:
        row = _manifest_row(session, zarr_id, checksum)
        if row is None or row.mismatch:
            raise Conflict(
                f"Zarr {zarr_id}: the manifest of its current checksum {checksum} does not "
                "describe its objects: run 'zarrchive admin fsck "
                f"{zarr_id} --repair' before restoring it"
            )


def _entries(store: ObjectStoreProtocol, zarr_id: str, checksum: str) -> Iterator[ManifestEntry]:
    chunks = store.iter_content(manifest_key(zarr_id, checksum), chunk_size=READ_CHUNK)
    yield from stream_manifest_entries(chunks)


def plan_restore(
    store: ObjectStoreProtocol,
    zarr_id: str,
    current: str,
    target: str,
    deletes: IO[str],
    copies: IO[str],
) -> _Plan:
    """The changes from the manifest of *current* to that of *target*, spooled to *deletes*
    and *copies* (empty text files)."""
    deleted = copied = 0
    first: tuple[str, str] | None = None
    for change in restore_changes(
        _entries(store, zarr_id, current), _entries(store, zarr_id, target)
    ):
        entry = change.entry
        if entry is None:
            deletes.write(json.dumps(change.path) + "\n")
            deleted += 1
        else:
            copies.write(json.dumps([entry.path, entry.version_id, entry.etag, entry.size]) + "\n")
            copied += 1
            first = first or (entry.path, entry.version_id)
    deletes.seek(0)
    copies.seek(0)
    return _Plan(deletes, copies, deleted, copied, first)


def _chunks(lines: IO[str], size: int) -> Iterator[list[str]]:
    chunk: list[str] = []
    for line in lines:
        chunk.append(line)
        if len(chunk) == size:
            yield chunk
            chunk = []
    if chunk:
        yield chunk


def _queue(
    session: Session, archive: Archive, user: Caller | None, zarr_id: str, plan: _Plan
) -> tuple[int, int]:
    """Queue the plan's batches (under the Zarr's lock): ``(batches, last seq)``."""
    limit = archive.settings.max_batch_files
    threshold = archive.settings.multipart_threshold
    seq = next_seq(session, zarr_id)
    batches = 0
    creator = user.id if user is not None else None
    for chunk in _chunks(plan.deletes, limit):
        batch = UploadBatch(
            zarr_id=zarr_id,
            uid=uuid.uuid4().hex,
            kind=BatchKind.DELETE,
            state=BatchState.QUEUED,
            seq=seq + batches,
            created_by=creator,
        )
        batch.files = [UploadBatchFile(path=json.loads(line)) for line in chunk]
        session.add(batch)
        batches += 1
    for chunk in _chunks(plan.copies, limit):
        batch = UploadBatch(
            zarr_id=zarr_id,
            uid=uuid.uuid4().hex,
            kind=BatchKind.RESTORE,
            state=BatchState.QUEUED,
            seq=seq + batches,
            created_by=creator,
        )
        for line in chunk:
            path, version, md5, size = json.loads(line)
            batch.files.append(
                UploadBatchFile(
                    path=path,
                    etag=md5,
                    size=size,
                    staged_version=version,
                    part_size=part_size_for(size, threshold) if size > threshold else None,
                )
            )
        session.add(batch)
        session.flush()
        record_directories(session, batch)
        batches += 1
    return batches, seq + batches - 1


def _queue_plan(
    archive: Archive,
    user: Caller | None,
    zarr_id: str,
    current: str,
    checksum: str,
    store: ObjectStoreProtocol,
    plan: _Plan,
) -> tuple[int, int]:
    """Queue the planned batches and the audit record, if the Zarr is still at *current*:
    ``(batches, last seq)``."""
    if plan.first_copy is not None:
        path, version = plan.first_copy
        if store.head(zarr_object_key(zarr_id, path), version) is None:
            raise Conflict(
                f"Zarr {zarr_id}: the object versions the manifest of {checksum} names are "
                "not in the Zarr's bucket (its dandiset was unembargoed since, or they "
                "were removed): it can't be restored to that checksum"
            )
    with archive.db.write_session() as session:
        try:
            zarr = lock_for_write(session, user, zarr_id)
        except ZarrFrozen as exc:
            raise Conflict(exc.message) from None
        if zarr.checksum != current or session.scalar(
            select(UploadBatch.id).where(UploadBatch.zarr_id == zarr_id).limit(1)
        ):
            raise Conflict(f"Zarr {zarr_id} changed while its restore was prepared: try again")
        batches, last_seq = _queue(session, archive, user, zarr_id, plan)
        audit.record(
            session,
            zarr.dandiset,
            user,
            audit.RecordType.RESTORE_ZARR,
            {
                "zarr_id": zarr_id,
                "checksum_before": current,
                "checksum": checksum,
                "copied": plan.copied,
                "deleted": plan.deleted,
            },
        )
    return batches, last_seq


def restore_zarr(
    archive: Archive, user: Caller | None, zarr_id: str, checksum: str
) -> RestoreOutcome:
    """Bring the Zarr back to *checksum*, the checksum of one of its manifests (owners only;
    see the module).  Refused, changing nothing: no manifest of *checksum* (404), not an
    owner (403), frozen by a published version or a batch open or pending (409).  Asking
    for the current checksum does nothing (an outcome with no batch).

    At most ``max_batch_files`` changes are applied before the answer (when the archive
    has a job queue; all of them without one); more are left to the apply job."""
    checksum = checksum.strip()
    if not checksum:
        raise InvalidInput('give the checksum to restore the Zarr to: {"checksum": "..."}')
    zarr_id, current = _check(archive, user, zarr_id, checksum)
    if current == checksum:
        return RestoreOutcome(zarr_id, current, checksum, 0, 0, 0, True)
    _current_manifest(archive, zarr_id, current)
    with archive.db.session() as session:
        embargoed = get_zarr(session, None, zarr_id, check_read=False).dandiset.embargoed
    store = archive.store_for(embargoed)
    with (
        tempfile.TemporaryFile("w+", encoding="utf-8") as deletes,
        tempfile.TemporaryFile("w+", encoding="utf-8") as copies,
    ):
        plan = plan_restore(store, zarr_id, current, checksum, deletes, copies)
        batches, last_seq = _queue_plan(archive, user, zarr_id, current, checksum, store, plan)
    log.info(
        "Zarr %s: restoring %s -> %s (%d copies, %d deletions, %d batches)",
        zarr_id,
        current,
        checksum,
        plan.copied,
        plan.deleted,
        batches,
    )
    outcome = RestoreOutcome(zarr_id, current, checksum, plan.copied, plan.deleted, batches, True)
    if plan.copied + plan.deleted > archive.settings.max_batch_files and schedule_apply(
        archive, zarr_id
    ):
        return replace(outcome, applied=False)
    try:
        apply_pending(archive, zarr_id, wait=True, until_seq=last_seq)
    except ArchiveBusy:  # another applier has them: they are applied all the same
        return replace(outcome, applied=False)
    return outcome

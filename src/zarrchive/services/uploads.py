"""Batched uploads, their verification, their (deferred) apply, cancellation and deletion.

The life of a batch (rows of ``upload_batches``; see :class:`~zarrchive.db.models.BatchState`):

1. ``start_batch``: under the Zarr's row lock, record the batch (state ``open``, a ``uid``
   unique forever; at most one ``open`` batch per Zarr, enforced by a partial unique index)
   and answer presigned PUT URLs for its **staging keys**
   ``zarr-staging/{zarr_id}/{uid}/{path}`` (signing ``Content-MD5``).  No URL ever names a
   key of the Zarr itself, so no URL, late or replayed, can change what a Zarr shows.
2. ``complete_batch``: list the batch's staging prefix (one listing, no lock) and check every
   file is there with its md5 (any problem: 400, nothing changes); then, under the lock and
   only if the open batch is still the one verified (same uid), record each staging object's
   version and size and mark the batch ``queued`` with the next apply order number ``seq``.
   From here on the batch *will* be applied, and the Zarr can take its next batch at once.
   ``complete`` answers right away (``wait=False``; the Zarr's ``upload_state`` says
   ``applying``) after queueing the apply job (key ``apply:{zarr_id}``: jobs coalesce), or
   applies before answering (``wait=True``, or when the archive has no job queue).
3. ``apply_pending`` applies the Zarr's queued batches **in seq order**, one at a time.  For
   each, under the lock, it claims the lowest one (state ``applying``, ``claimed_by`` a token
   of this call, ``claimed_until`` a lease of :data:`CLAIM_SECONDS`); a batch claimed by
   another live applier is left to it (the caller waits, or returns).  Then, outside the
   lock, it copies each staged version to ``zarr/{zarr_id}/{path}`` (renewing the claim every
   :data:`COPY_CHUNK` copies and stopping if it was lost), and under the lock, if it still
   holds the claim, rewrites the affected ``.checksum`` nodes, stores the root and deletes the
   batch row; after the commit it drops the staging objects (best effort: leftovers are
   garbage that :func:`purge_stale_staging` removes).  Readers see a batch's effect (objects,
   nodes, root) only once it is applied, exactly as before: the copies overwrite only keys
   the batch changes, and the tree and root change in the commit.  Every step is idempotent:
   a crash anywhere leaves the claim to expire, and the batch is finished by the job's retry,
   by the next write to the Zarr (which queues the job again), by
   :func:`sweep_pending` when a server or worker starts, or by ``admin fsck``.  The database
   decides order (``seq``) and ownership (the claim): nothing process-local is needed.
4. ``cancel_batch`` cancels only the ``open`` batch: delete its row under the lock, then its
   staging objects; queued batches stay queued and are applied.
5. ``delete_files`` is allowed while a batch is open (the open batch has not touched the
   Zarr): it first applies every queued batch (waiting for an applier that holds one), then,
   under the lock with nothing queued, checks the paths are files, records a batch of kind
   ``delete`` (queued, next ``seq``) and applies it at once: delete markers (object versions
   are kept), then the tree update.

Anything that needs the Zarr at rest (publish, ``fsck --repair``, manifests, unembargo)
treats a queued or applying batch like an open one: :func:`open_batch` answers any batch.

For callers (routers, DANDI's ``files/`` + ``finalize/`` flow):

- ``start_batch(archive, user, zarr_id, [(path, md5), ...]) -> [UploadUrl]``
- ``complete_batch(archive, user, zarr_id, *, wait=False)`` (raises
  :class:`~zarrchive.errors.UploadVerificationFailed` with every bad file)
- ``cancel_batch(archive, user, zarr_id)``; ``delete_files(archive, user, zarr_id, paths)``
- ``upload_status(session, zarr_id) -> UploadStatus``: ``.state`` is an
  :class:`UploadState` (``at_rest`` | ``open`` | ``applying``): DANDI's Complete | Pending |
  Ingesting.
- ``finish_interrupted(archive, zarr_id)`` / ``apply_pending(archive, zarr_id, wait=True)``:
  apply what is queued now; ``sweep_pending(archive)``: queue the apply of every Zarr with
  pending batches (server and worker start).
"""

from __future__ import annotations

import base64
import logging
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from enum import StrEnum

from sqlalchemy import func, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from zarrchive.checksum import validate_md5
from zarrchive.db.models import (
    PENDING_STATES,
    BatchKind,
    BatchState,
    EmbargoStatus,
    UploadBatch,
    UploadBatchFile,
    Zarr,
    utcnow,
)
from zarrchive.errors import (
    ArchiveBusy,
    BatchTooLarge,
    Conflict,
    InvalidDigest,
    InvalidInput,
    NotFound,
    NoUploadInProgress,
    StorageError,
    UploadInProgress,
    UploadVerificationFailed,
    ZarrchiveError,
)
from zarrchive.paths import find_file_directory_clashes, split_path, validate_path
from zarrchive.services.auth import Caller, require_owner
from zarrchive.services.runtime import Archive, current_archive
from zarrchive.services.tree_updater import (
    FileChange,
    affected_directories,
    apply_changes,
    file_lookup,
    read_nodes,
)
from zarrchive.services.zarrs import ensure_writable, get_zarr
from zarrchive.storage.keys import (
    staging_object_key,
    staging_prefix,
    staging_zarr_prefix,
    zarr_object_key,
)
from zarrchive.storage.objects import ObjectStore

log = logging.getLogger(__name__)

#: How long an applier's claim on a batch lasts without renewal (it renews every chunk).
CLAIM_SECONDS = 15.0
#: Copies between renewals of the claim.
COPY_CHUNK = 250
#: How long a request that must apply now (``wait``) waits for another applier.
WAIT_SECONDS = 60.0
#: The import string of the apply job.
APPLY_JOB = "zarrchive.services.uploads:apply_pending_job"


@dataclass(frozen=True)
class UploadUrl:
    path: str
    upload_url: str


class UploadState(StrEnum):
    """Where a Zarr is in its uploads (DANDI's Complete / Pending / Ingesting)."""

    #: no batch: what the Zarr shows is all there is
    AT_REST = "at_rest"
    #: an upload batch is open (the client PUTs), nothing waits to be applied
    OPEN = "open"
    #: verified batches (or a deletion) are being applied; a batch may also be open
    APPLYING = "applying"


@dataclass(frozen=True)
class UploadStatus:
    #: an upload batch is open
    open: bool
    #: verified batches and deletions not applied yet
    pending: int

    @property
    def state(self) -> UploadState:
        if self.pending:
            return UploadState.APPLYING
        return UploadState.OPEN if self.open else UploadState.AT_REST


def upload_status(session: Session, zarr_id: str) -> UploadStatus:
    """The Zarr's batches: whether one is open and how many wait to be applied."""
    rows = session.execute(
        select(UploadBatch.state, func.count())
        .where(UploadBatch.zarr_id == zarr_id)
        .group_by(UploadBatch.state)
    ).all()
    counts = {state: n for state, n in rows}
    return UploadStatus(
        open=counts.get(BatchState.OPEN, 0) > 0,
        pending=sum(counts.get(s, 0) for s in PENDING_STATES),
    )


def _writable(archive: Archive, user: Caller | None, zarr_id: str) -> tuple[str, UploadStatus]:
    """Refuse (404/403) unless *user* may write the Zarr; its normalised id and its batches."""
    with archive.db.session() as session:
        zarr = get_zarr(session, user, zarr_id)
        require_owner(user, zarr.dandiset)
        ensure_writable(session, zarr)
        return zarr.id, upload_status(session, zarr.id)


def _lock_for_write(session: Session, user: Caller | None, zarr_id: str) -> Zarr:
    zarr = get_zarr(session, user, zarr_id, lock=True)
    require_owner(user, zarr.dandiset)
    ensure_writable(session, zarr)
    if zarr.dandiset.embargo_status == EmbargoStatus.UNEMBARGOING:
        raise Conflict(
            f"dandiset {zarr.dandiset.identifier} is being unembargoed (its objects are moving "
            "to the public bucket): try again when that is done"
        )
    return zarr


def _new_upload_batch(
    session: Session, zarr: Zarr, user: Caller | None, files: list[tuple[str, str]]
) -> UploadBatch:
    """An open upload batch of *files* (``(path, md5)``), with an identity unique forever."""
    batch = UploadBatch(
        zarr_id=zarr.id,
        uid=uuid.uuid4().hex,
        kind=BatchKind.UPLOAD,
        state=BatchState.OPEN,
        created_by=user.id if user else None,
    )
    batch.files = [UploadBatchFile(path=p, etag=e) for p, e in files]
    session.add(batch)
    return batch


def open_batch(session: Session, zarr: Zarr) -> UploadBatch | None:
    """Any batch of the Zarr (open, queued or applying), or None when it is at rest.

    What needs the Zarr at rest (publish, ``fsck --repair``, manifests, unembargo) refuses
    or waits while this answers a batch.
    """
    return session.scalars(
        select(UploadBatch).where(UploadBatch.zarr_id == zarr.id).order_by(UploadBatch.id)
    ).first()


def _the_open_batch(session: Session, zarr_id: str) -> UploadBatch | None:
    """The Zarr's ``open`` upload batch (at most one: the database says so)."""
    return session.scalar(
        select(UploadBatch).where(
            UploadBatch.zarr_id == zarr_id, UploadBatch.state == BatchState.OPEN
        )
    )


def _has_pending(session: Session, zarr_id: str) -> bool:
    return (
        session.scalar(
            select(UploadBatch.id)
            .where(UploadBatch.zarr_id == zarr_id, UploadBatch.state.in_(PENDING_STATES))
            .limit(1)
        )
        is not None
    )


def _next_seq(session: Session, zarr_id: str) -> int:
    """The next apply order number of the Zarr (call under its row lock)."""
    last = session.scalar(select(func.max(UploadBatch.seq)).where(UploadBatch.zarr_id == zarr_id))
    return (last or 0) + 1


def _check_batch_size(archive: Archive, count: int, what: str) -> None:
    limit = archive.settings.max_batch_files
    if count == 0:
        raise InvalidInput(f"the {what} is empty: send at least one file")
    if count > limit:
        raise BatchTooLarge(
            f"the {what} has {count} files; at most {limit} are allowed: split it into batches"
        )


def _validate(
    items: Sequence[tuple[str, str | None]],
) -> list[tuple[str, str | None]]:
    """Check every path (and md5, where given); report all problems at once."""
    seen: set[str] = set()
    result: list[tuple[str, str | None]] = []
    errors: list[str] = []
    for path, etag in items:
        try:
            path = validate_path(path)
            if etag is not None:
                etag = validate_md5(etag)
        except ZarrchiveError as exc:
            errors.append(exc.message)
            continue
        if path in seen:
            errors.append(f"{path!r} appears more than once in the batch")
        seen.add(path)
        result.append((path, etag))
    if errors:
        more = f" (and {len(errors) - 20} more)" if len(errors) > 20 else ""
        raise InvalidInput("; ".join(errors[:20]) + more)
    return result


def _validate_files(files: Sequence[tuple[str, str]]) -> list[tuple[str, str]]:
    """``(path, md5)`` pairs, checked."""
    return [(p, e) for p, e in _validate(files) if e is not None]


def _validate_paths(paths: Sequence[str]) -> list[str]:
    """Paths, checked."""
    return [p for p, _ in _validate([(p, None) for p in paths])]


# -- applying verified batches, in order ------------------------------------------------
@dataclass(frozen=True)
class _Claimed:
    """A batch this applier claimed, read from the database (no ORM object outlives it)."""

    zarr_id: str
    uid: str
    kind: str
    seq: int
    #: upload: path -> (md5, size, staged version id); delete: the paths
    files: dict[str, tuple[str, int, str | None]] = field(default_factory=dict)
    paths: list[str] = field(default_factory=list)


class _Busy:
    """Another applier holds the claim on the Zarr's next batch."""


_BUSY = _Busy()


def _lease() -> timedelta:
    return timedelta(seconds=CLAIM_SECONDS)


def _claim_next(
    archive: Archive, zarr_id: str, token: str, until_seq: int | None
) -> _Claimed | _Busy | None:
    """Claim the Zarr's lowest pending batch (None: nothing pending up to *until_seq*)."""
    with archive.db.write_session() as session:
        zarr = get_zarr(session, None, zarr_id, lock=True, check_read=False)
        batch = session.scalars(
            select(UploadBatch)
            .where(UploadBatch.zarr_id == zarr.id, UploadBatch.state.in_(PENDING_STATES))
            .order_by(UploadBatch.seq)
            .limit(1)
        ).first()
        if batch is None or (until_seq is not None and (batch.seq or 0) > until_seq):
            return None
        now = utcnow()
        if (
            batch.state == BatchState.APPLYING
            and batch.claimed_by != token
            and batch.claimed_until is not None
            and batch.claimed_until > now
        ):
            return _BUSY
        if batch.state == BatchState.APPLYING:
            log.warning(
                "Zarr %s: taking over %s batch %s (its applier stopped)",
                zarr.id,
                batch.kind,
                batch.uid,
            )
        batch.state = BatchState.APPLYING
        batch.claimed_by = token
        batch.claimed_until = now + _lease()
        assert batch.seq is not None
        claimed = _Claimed(zarr.id, batch.uid, batch.kind, batch.seq)
        for f in batch.files:
            claimed.paths.append(f.path)
            if batch.kind == BatchKind.UPLOAD:
                assert f.etag is not None and f.size is not None
                claimed.files[f.path] = (f.etag, f.size, f.staged_version)
        return claimed


def _renew(archive: Archive, claimed: _Claimed, token: str) -> bool:
    """Extend the claim; False if it was lost (another applier took the batch over)."""
    with archive.db.write_session() as session:
        result = session.execute(
            update(UploadBatch)
            .where(UploadBatch.uid == claimed.uid, UploadBatch.claimed_by == token)
            .values(claimed_until=utcnow() + _lease())
        )
        return bool(getattr(result, "rowcount", 0))


def _release(archive: Archive, claimed: _Claimed, token: str) -> None:
    """Give the claim up after a failure, so the next applier need not wait for the lease."""
    try:
        with archive.db.write_session() as session:
            session.execute(
                update(UploadBatch)
                .where(UploadBatch.uid == claimed.uid, UploadBatch.claimed_by == token)
                .values(state=BatchState.QUEUED, claimed_by=None, claimed_until=None)
            )
    except Exception:  # the database is gone too: the lease expires on its own
        log.warning("Zarr %s: could not release batch %s", claimed.zarr_id, claimed.uid)


class _ClaimLost(Exception):
    pass


def _copy_into_place(archive: Archive, store: ObjectStore, claimed: _Claimed, token: str) -> None:
    """Copy every staged object of the batch to its key in the Zarr (idempotent), renewing
    the claim between chunks."""

    def copy(item: tuple[str, tuple[str, int, str | None]]) -> None:
        path, (md5, _size, version) = item
        source = staging_object_key(claimed.zarr_id, claimed.uid, path)
        etag = store.copy_within(source, zarr_object_key(claimed.zarr_id, path), version)
        if etag != md5:
            raise StorageError(
                f"copying {source!r} into Zarr {claimed.zarr_id} gave ETag {etag!r}, not the "
                f"verified md5 {md5}: S3 is not behaving; the batch stays queued and is "
                "applied again by the next write to the Zarr"
            )

    items = list(claimed.files.items())
    for start in range(0, len(items), COPY_CHUNK):
        if start and not _renew(archive, claimed, token):
            raise _ClaimLost
        store.map(copy, items[start : start + COPY_CHUNK])


def _apply_claimed(archive: Archive, claimed: _Claimed, token: str) -> bool:
    """Apply a claimed batch; False if the claim was lost to another applier meanwhile."""
    zarr_id = claimed.zarr_id
    with archive.db.session() as session:
        store = archive.store_for(
            get_zarr(session, None, zarr_id, check_read=False).dandiset.embargoed
        )
    try:
        # S3 work outside the database lock: only this batch's objects, all idempotent.
        if claimed.kind == BatchKind.DELETE:
            store.delete_many(zarr_object_key(zarr_id, p) for p in claimed.paths)
            changes: dict[str, FileChange] = dict.fromkeys(claimed.paths)
        else:
            _copy_into_place(archive, store, claimed, token)
            changes = {p: (md5, size) for p, (md5, size, _v) in claimed.files.items()}
        with archive.db.write_session() as session:
            zarr = get_zarr(session, None, zarr_id, lock=True, check_read=False)
            batch = session.scalar(select(UploadBatch).where(UploadBatch.uid == claimed.uid))
            if batch is None or batch.claimed_by != token:
                return False  # another applier took it over (and applies it)
            state = apply_changes(store, zarr_id, changes)
            zarr.checksum, zarr.file_count, zarr.size = (
                state.checksum,
                state.file_count,
                state.size,
            )
            zarr.modified_at = utcnow()
            session.delete(batch)
    except _ClaimLost:
        return False
    except BaseException:
        _release(archive, claimed, token)
        raise
    if claimed.kind == BatchKind.UPLOAD:
        _drop_staging(store, zarr_id, claimed.uid)
    return True


def apply_pending(
    archive: Archive,
    zarr_id: str,
    *,
    wait: bool = True,
    until_seq: int | None = None,
    timeout: float = WAIT_SECONDS,
) -> int:
    """Apply the Zarr's queued batches in order (those up to *until_seq*, if given).

    A batch claimed by another live applier is theirs: with *wait*, poll until they are
    done (or their claim expires, then take over), up to *timeout* seconds (then
    :class:`~zarrchive.errors.ArchiveBusy`, 503); without, return.  Returns how many batches
    this call applied; queues the manifest job when it applied any.
    """
    token = uuid.uuid4().hex
    applied = 0
    deadline = time.monotonic() + timeout
    pause = 0.02
    try:
        while True:
            claimed = _claim_next(archive, zarr_id, token, until_seq)
            if claimed is None:
                return applied
            if isinstance(claimed, _Busy):
                if not wait:
                    return applied
                if time.monotonic() > deadline:
                    raise ArchiveBusy(
                        f"Zarr {zarr_id}: its verified batches are still being applied by "
                        "another process: try again shortly",
                    )
                time.sleep(pause)
                pause = min(pause * 1.5, 0.5)
                continue
            pause = 0.02
            if _apply_claimed(archive, claimed, token):
                applied += 1
    finally:
        if applied:
            queue_manifest(archive, zarr_id)


def finish_interrupted(archive: Archive, zarr_id: str, *, expected: bool = False) -> bool:
    """Apply every verified batch of *zarr_id* now (waiting for another applier); True if
    this call applied any.  (``admin fsck`` calls it first; kept by name for callers.)"""
    with archive.db.session() as session:
        zarr_id = get_zarr(session, None, zarr_id, check_read=False).id
        if not _has_pending(session, zarr_id):
            return False
    if not expected:
        log.warning("Zarr %s: applying its pending batches", zarr_id)
    return apply_pending(archive, zarr_id, wait=True) > 0


def apply_pending_job(zarr_id: str) -> None:
    """The background job (key ``apply:{zarr_id}``): apply the Zarr's queued batches.

    It waits for another applier's claim (up to twice the lease, so a dead applier's claim
    expires and is taken over); it raises on failure, so the queue retries it.
    """
    try:
        apply_pending(current_archive(), zarr_id, wait=True, timeout=2 * CLAIM_SECONDS + 5)
    except NotFound:
        log.info("Zarr %s is gone: nothing to apply", zarr_id)


def _schedule(archive: Archive, zarr_id: str) -> bool:
    """Queue the apply job of the Zarr; False if there is no job queue (or it refused):
    the caller then applies itself."""
    if archive.jobs is None:
        return False
    try:
        archive.jobs.enqueue(APPLY_JOB, {"zarr_id": zarr_id}, key=f"apply:{zarr_id}")
    except Exception:
        log.exception("Zarr %s: could not queue its apply job: applying now", zarr_id)
        return False
    return True


def _kick(archive: Archive, zarr_id: str) -> None:
    """Make sure the Zarr's pending batches (if any) get applied: queue the job, or without
    a queue apply them now.  Every write calls it, so a batch left behind by a crash is
    finished by the next write."""
    with archive.db.session() as session:
        if not _has_pending(session, zarr_id):
            return
    if not _schedule(archive, zarr_id):
        apply_pending(archive, zarr_id, wait=True)


def sweep_pending(archive: Archive) -> int:
    """Queue (or, without a job queue, run) the apply of every Zarr with pending batches.

    Called when a server or a worker starts: a batch verified before a crash is applied
    even if nobody writes to its Zarr again.  Returns how many Zarrs.
    """
    with archive.db.session() as session:
        zarr_ids = sorted(
            set(
                session.scalars(
                    select(UploadBatch.zarr_id).where(UploadBatch.state.in_(PENDING_STATES))
                )
            )
        )
    for zarr_id in zarr_ids:
        try:
            _kick(archive, zarr_id)
        except ZarrchiveError as exc:
            log.warning("Zarr %s: could not apply its pending batches: %s", zarr_id, exc.message)
    if zarr_ids:
        log.info("%d Zarr(s) had verified batches to apply", len(zarr_ids))
    return len(zarr_ids)


def _drop_staging(store: ObjectStore, zarr_id: str, uid: str) -> None:
    """Remove a finished batch's staging objects for good (best effort: garbage if it fails)."""
    try:
        store.purge(staging_prefix(zarr_id, uid))
    except StorageError:
        log.warning("Zarr %s: could not remove the staging objects of batch %s", zarr_id, uid)


def purge_stale_staging(archive: Archive, zarr_id: str) -> int:
    """Remove the staging objects of every batch of *zarr_id* that no longer exists (e.g.
    written by a URL replayed after its batch ended); returns how many batches' areas."""
    with archive.db.session() as session:
        zarr = get_zarr(session, None, zarr_id, check_read=False)
        zarr_id = zarr.id
        live = set(session.scalars(select(UploadBatch.uid).where(UploadBatch.zarr_id == zarr_id)))
        store = archive.store_for(zarr.dandiset.embargoed)
    root = staging_zarr_prefix(zarr_id)
    stale = [p for p in store.iter_prefixes(root) if p[len(root) :].rstrip("/") not in live]
    # (some S3s, SeaweedFS among them, list emptied "directories": count what held objects)
    return sum(1 for prefix in stale if store.purge(prefix) > 0)


def queue_manifest(archive: Archive, zarr_id: str) -> None:
    """Queue the manifest job for the Zarr's new checksum (after the commit).

    The change itself has been committed: a queue failure is logged, never
    reported as a failure of the change (``zarrchive manifest backfill`` fills gaps).
    """
    if archive.jobs is None:
        return
    try:
        archive.jobs.enqueue(
            "zarrchive.services.manifests:generate_manifest_job",
            {"zarr_id": zarr_id},
            key=f"manifest:{zarr_id}",
        )
    except Exception:
        log.exception("Zarr %s: could not queue its manifest job", zarr_id)


# -- the operations --------------------------------------------------------------------
def upload_in_progress(archive: Archive, user: Caller | None, zarr_id: str) -> bool:
    """True while the Zarr has an open upload batch."""
    with archive.db.session() as session:
        zarr = get_zarr(session, user, zarr_id)
        return upload_status(session, zarr.id).open


def start_batch(
    archive: Archive, user: Caller | None, zarr_id: str, files: Sequence[tuple[str, str]]
) -> list[UploadUrl]:
    """Open a batch for *files* (``(path, md5)``) and return presigned PUT URLs.

    Allowed while earlier batches are queued (verified, not applied yet): they are applied
    in order, before this one.
    """
    _check_batch_size(archive, len(files), "batch")
    checked = _validate_files(files)
    zarr_id, status = _writable(archive, user, zarr_id)
    if status.open:
        raise UploadInProgress(
            f"Zarr {zarr_id} already has an upload batch open: complete it "
            "(POST .../upload/complete/) or cancel it (DELETE .../upload/) first"
        )
    if status.pending:
        _kick(archive, zarr_id)  # a batch left behind by a crash is finished (or queued)
    _refuse_file_directory_clashes(archive, zarr_id, [p for p, _ in checked])
    with archive.db.write_session() as session:
        zarr = _lock_for_write(session, user, zarr_id)
        if _the_open_batch(session, zarr.id) is not None:
            raise UploadInProgress(
                f"Zarr {zarr.id} already has an upload batch open: complete it "
                "(POST .../upload/complete/) or cancel it (DELETE .../upload/) first"
            )
        batch = _new_upload_batch(session, zarr, user, checked)
        zarr.modified_at = utcnow()
        try:
            session.flush()
        except IntegrityError as exc:  # a concurrent request won the race
            raise UploadInProgress(f"Zarr {zarr.id} already has an upload batch open") from exc
        uid = batch.uid
        store = archive.store_for(zarr.dandiset.embargoed)
    expiry = archive.settings.presign_expiry
    return [
        UploadUrl(p, store.presign_put(staging_object_key(zarr_id, uid, p), e, expiry))
        for p, e in checked
    ]


def _queued_paths(archive: Archive, zarr_id: str) -> list[str]:
    """The paths written by the Zarr's verified batches that are not applied yet."""
    with archive.db.session() as session:
        return list(
            session.scalars(
                select(UploadBatchFile.path)
                .join(UploadBatch, UploadBatch.id == UploadBatchFile.batch_id)
                .where(
                    UploadBatch.zarr_id == zarr_id,
                    UploadBatch.kind == BatchKind.UPLOAD,
                    UploadBatch.state.in_(PENDING_STATES),
                )
            )
        )


def _refuse_file_directory_clashes(archive: Archive, zarr_id: str, paths: list[str]) -> None:
    """A file and a directory of one name (``a`` and ``a/b``), in the batch or against the
    Zarr's tree, are refused: S3 would hold both, but no tree (or manifest) can."""
    problems = [
        f"{p!r} is both a file and a directory in the batch"
        for p in find_file_directory_clashes(paths)
    ]
    # the verified batches not applied yet count as the Zarr's (read before the tree: a
    # batch applied in between is then in the tree)
    queued = set(_queued_paths(archive, zarr_id))
    queued_directories = affected_directories(sorted(queued))
    for path in paths:
        if path in queued_directories:
            problems.append(f"{path!r} is a directory of a batch being applied: it can't be a file")
        for parent in affected_directories([path]) - {""}:
            if parent in queued:
                problems.append(
                    f"{path!r} would make {parent!r} a directory, but a batch being applied "
                    "writes it as a file"
                )
    with archive.db.session() as session:
        zarr = get_zarr(session, None, zarr_id, check_read=False)
        store = archive.store_for(zarr.dandiset.embargoed)
    directories = sorted(affected_directories(paths))
    nodes = read_nodes(store, zarr_id, directories)
    for path in paths:
        directory, name = split_path(path)
        node = nodes.get(directory)
        if node is not None and name in node.directories:
            problems.append(f"{path!r} is a directory of the Zarr: it can't also be a file")
        for parent in affected_directories([path]) - {""}:
            above, parent_name = split_path(parent)
            above_node = nodes.get(above)
            if above_node is not None and parent_name in above_node.files:
                problems.append(
                    f"{path!r} would make {parent!r} a directory, but it is a file of the Zarr"
                )
    if problems:
        problems = sorted(set(problems))
        more = f" (and {len(problems) - 20} more)" if len(problems) > 20 else ""
        raise InvalidInput(
            "; ".join(problems[:20]) + more + ": delete the file first, or rename",
            detail={"message": "files and directories of the same name", "problems": problems},
        )


def complete_batch(
    archive: Archive, user: Caller | None, zarr_id: str, *, wait: bool = False
) -> None:
    """Verify the open batch's staged objects and queue it to be applied (in order).

    The staging area is verified without holding the Zarr's lock (only the batch's own URLs
    write it, and only with the announced content); the lock is taken to record the verified
    batch, if it is still the same open batch (same uid), as ``queued`` with the next
    ``seq``.  Then the apply job is queued and the call returns (the Zarr's
    ``upload_status`` says ``applying``); with *wait* (or without a job queue) the batch and
    every one before it are applied first.
    """
    zarr_id, status = _writable(archive, user, zarr_id)
    if not status.open and status.pending:
        # a retried complete whose batch was verified (its answer lost, or its apply
        # failed): the batch is queued; apply it (with *wait*) or make sure it will be
        if wait or not _schedule(archive, zarr_id):
            apply_pending(archive, zarr_id, wait=True)
        return
    with archive.db.session() as session:
        batch = _the_open_batch(session, zarr_id)
        if batch is None or batch.kind != BatchKind.UPLOAD:
            raise NoUploadInProgress(f"Zarr {zarr_id} has no upload batch open")
        uid = batch.uid
        expected = {f.path: f.etag for f in batch.files}
        store = archive.store_for(get_zarr(session, user, zarr_id).dandiset.embargoed)
    staged = _verify_staged(store, zarr_id, uid, expected)
    with archive.db.write_session() as session:
        zarr = _lock_for_write(session, user, zarr_id)
        batch = _the_open_batch(session, zarr.id)
        if batch is None or batch.uid != uid:
            raise NoUploadInProgress(
                f"Zarr {zarr.id}: the batch was completed or cancelled meanwhile by another request"
            )
        for f in batch.files:
            f.size, f.staged_version = staged[f.path]
        batch.state = BatchState.QUEUED
        batch.seq = _next_seq(session, zarr.id)
        seq = batch.seq
    # Recorded as verified: from here on the batch is applied, whatever happens to us.
    if wait or not _schedule(archive, zarr_id):
        apply_pending(archive, zarr_id, wait=True, until_seq=seq)


def _check_staged(
    store: ObjectStore, zarr_id: str, uid: str, expected: dict[str, str | None]
) -> tuple[dict[str, tuple[int, str | None]], list[dict[str, str | None]]]:
    """Every file of a batch that is staged with its md5 (``path -> (size, version id)``),
    and the problems (``{"path", "expected", "found"}``: missing, or another md5)."""
    prefix = staging_prefix(zarr_id, uid)
    latest: dict[str, tuple[str | None, int, str | None]] = {}
    for version in store.iter_versions(prefix):
        path = version.key[len(prefix) :]
        if version.is_latest and path in expected:
            latest[path] = (
                None if version.is_delete_marker else version.etag,
                version.size,
                version.version_id if version.version_id not in ("", "null") else None,
            )
    problems: list[dict[str, str | None]] = []
    staged: dict[str, tuple[int, str | None]] = {}
    for path, etag in sorted(expected.items()):
        found = latest.get(path)
        if found is None or found[0] != etag:
            problems.append({"path": path, "expected": etag, "found": found[0] if found else None})
        else:
            staged[path] = (found[1], found[2])
    return staged, problems


def _verify_staged(
    store: ObjectStore, zarr_id: str, uid: str, expected: dict[str, str | None]
) -> dict[str, tuple[int, str | None]]:
    """Check every file of a batch is staged with its md5; ``path -> (size, version id)``."""
    staged, problems = _check_staged(store, zarr_id, uid, expected)
    if problems:
        listed = ", ".join(
            f"{p['path']} (expected {p['expected']}, found {p['found'] or 'nothing'})"
            for p in problems[:10]
        )
        raise UploadVerificationFailed(
            f"{len(problems)} of {len(expected)} files of the batch are missing or differ in S3: "
            f"{listed}. Upload them again to their URLs and complete again, or cancel the batch.",
            detail={"message": "upload verification failed", "files": problems},
        )
    clashes = find_file_directory_clashes(sorted(expected))
    if clashes:  # only a batch extended through DANDI's files/ can hold them
        raise InvalidInput(
            f"{len(clashes)} files of the batch are also directories of other files of it: "
            f"{', '.join(clashes[:10])}; cancel the batch",
            detail={"message": "files and directories of the same name", "problems": clashes},
        )
    return staged


def cancel_batch(archive: Archive, user: Caller | None, zarr_id: str) -> None:
    """Cancel the open batch: forget it and drop its staging objects.

    Only the ``open`` (unverified) batch is cancelled: verified batches stay queued and are
    applied.  The Zarr's own objects are never touched (the batch wrote only its staging
    keys), so nothing needs restoring; the staging objects are removed after the commit,
    outside the lock.
    """
    zarr_id, status = _writable(archive, user, zarr_id)
    if status.pending:
        _kick(archive, zarr_id)
    with archive.db.write_session() as session:
        zarr = _lock_for_write(session, user, zarr_id)
        batch = _the_open_batch(session, zarr.id)
        if batch is None or batch.kind != BatchKind.UPLOAD:
            raise NoUploadInProgress(f"Zarr {zarr.id} has no upload batch open")
        uid = batch.uid
        store = archive.store_for(zarr.dandiset.embargoed)
        session.delete(batch)
        zarr.modified_at = utcnow()
        at_rest = not _has_pending(session, zarr.id)
    _drop_staging(store, zarr_id, uid)
    if at_rest:  # the Zarr is at rest again: its checksum may still lack a manifest
        queue_manifest(archive, zarr_id)


def delete_files(archive: Archive, user: Caller | None, zarr_id: str, paths: Sequence[str]) -> None:
    """Delete files; all must exist, else nothing is deleted.

    Allowed while an upload batch is open (it has not touched the Zarr yet); applied after
    every batch verified before it: those are applied first (waiting for another applier,
    up to :data:`WAIT_SECONDS`), then the paths are checked and deleted.
    """
    _check_batch_size(archive, len(paths), "deletion")
    checked = _validate_paths(paths)
    zarr_id, _status = _writable(archive, user, zarr_id)
    deadline = time.monotonic() + WAIT_SECONDS
    while True:
        apply_pending(archive, zarr_id, wait=True, timeout=max(0.0, deadline - time.monotonic()))
        with archive.db.write_session() as session:
            zarr = _lock_for_write(session, user, zarr_id)
            if _has_pending(session, zarr.id):
                continue  # a batch was verified meanwhile: it comes first
            current = file_lookup(archive.store_for(zarr.dandiset.embargoed), zarr.id, checked)
            missing = [p for p in checked if current[p] is None]
            if missing:
                raise InvalidInput(
                    f"{len(missing)} of the paths are not files of Zarr {zarr.id}: "
                    f"{', '.join(missing[:20])}; nothing was deleted",
                    detail={"message": "files not found; nothing was deleted", "missing": missing},
                )
            batch = UploadBatch(
                zarr_id=zarr.id,
                uid=uuid.uuid4().hex,
                kind=BatchKind.DELETE,
                state=BatchState.QUEUED,
                seq=_next_seq(session, zarr.id),
                created_by=user.id if user else None,
            )
            batch.files = [UploadBatchFile(path=p) for p in checked]
            session.add(batch)
            seq = batch.seq
            break
    apply_pending(archive, zarr_id, wait=True, until_seq=seq)


# -- DANDI's flow: POST files/ (open or extend the batch), finalize/ --------------------------
#: An open batch that DANDI's ``files/`` route extends holds at most this many times
#: ``max_batch_files`` files: an extension that would pass it first finalizes the open batch
#: (verifies and queues what was PUT) and opens a new one.  dandi-cli PUTs each group it
#: announced before announcing the next, so nothing it announced is lost to that.
DANDI_BATCH_FACTOR = 20


def md5_from_base64(value: str) -> str:
    """The hex md5 of a base64 ``Content-MD5`` value (DANDI's ``base64md5``)."""
    try:
        raw = base64.b64decode(value.encode("ascii"), validate=True)
    except (ValueError, UnicodeEncodeError):
        raw = b""
    if len(raw) != 16:
        raise InvalidDigest(
            f"{value[:60]!r} is not a base64 md5 (24 characters encoding 16 bytes, as in "
            "Content-MD5)"
        )
    return raw.hex()


def dandi_batch_limit(archive: Archive) -> int:
    """The most files of an open batch extended through DANDI's ``files/`` route."""
    return archive.settings.max_batch_files * DANDI_BATCH_FACTOR


@dataclass(frozen=True)
class DroppedFile:
    """A file an upload announced that ``finalize`` left out, and why."""

    path: str
    #: the md5 announced
    expected: str | None
    #: the md5 found in S3 (None: never PUT)
    found: str | None
    #: ``missing`` | ``differs`` | ``file_and_directory``
    reason: str


@dataclass(frozen=True)
class FinalizeReport:
    """What ``finalize`` did: the batch it verified and queued (None: no batch was open),
    how many files it kept, and what it dropped."""

    zarr_id: str
    batch: str | None
    files: int
    dropped: list[DroppedFile]


def _open_batch_files(session: Session, zarr_id: str) -> tuple[int, str, dict[str, str]] | None:
    """The open batch's id, uid and ``path -> md5`` (without loading ORM rows per file)."""
    row = session.execute(
        select(UploadBatch.id, UploadBatch.uid).where(
            UploadBatch.zarr_id == zarr_id, UploadBatch.state == BatchState.OPEN
        )
    ).first()
    if row is None:
        return None
    batch_id, uid = row
    files = session.execute(
        select(UploadBatchFile.path, UploadBatchFile.etag).where(
            UploadBatchFile.batch_id == batch_id
        )
    ).all()
    return batch_id, uid, {p: e or "" for p, e in files}


def extend_batch(
    archive: Archive, user: Caller | None, zarr_id: str, files: Sequence[tuple[str, str]]
) -> list[str]:
    """DANDI's ``POST /api/zarr/{id}/files/``: add *files* (``(path, md5)``) to the Zarr's
    open batch, opening one if there is none, and answer their presigned PUT URLs (signing
    ``Content-MD5``, for the batch's staging keys) in the order given.

    A path announced again (a retry, or a changed file) gets a new URL and its new md5.
    Each request holds at most ``max_batch_files`` files; an open batch that would pass
    :func:`dandi_batch_limit` is finalized first (see :data:`DANDI_BATCH_FACTOR`).
    """
    _check_batch_size(archive, len(files), "request")
    checked = _validate_files(files)
    zarr_id, status = _writable(archive, user, zarr_id)
    if status.pending:
        _kick(archive, zarr_id)
    _refuse_file_directory_clashes(archive, zarr_id, [p for p, _ in checked])
    limit = dandi_batch_limit(archive)
    with archive.db.session() as session:
        current = _open_batch_files(session, zarr_id)
    if current is not None:
        added = sum(1 for p, _ in checked if p not in current[2])
        if len(current[2]) + added > limit:
            report = finalize(archive, user, zarr_id)
            log.info(
                "Zarr %s: the open batch reached %d files: finalized (%d files, %d dropped)",
                zarr_id,
                limit,
                report.files,
                len(report.dropped),
            )
    with archive.db.write_session() as session:
        zarr = _lock_for_write(session, user, zarr_id)
        current = _open_batch_files(session, zarr.id)
        if current is None:
            batch = _new_upload_batch(session, zarr, user, checked)
            try:
                session.flush()
            except IntegrityError as exc:  # a concurrent request opened one
                raise UploadInProgress(
                    f"Zarr {zarr.id}: another request opened an upload batch meanwhile: try again"
                ) from exc
            uid = batch.uid
        else:
            batch_id, uid, known = current
            if len(known) + sum(1 for p, _ in checked if p not in known) > limit:
                raise BatchTooLarge(
                    f"Zarr {zarr.id}: the open upload batch would hold more than {limit} "
                    "files: finalize it (POST .../finalize/) first"
                )
            for path, md5 in checked:
                if path not in known:
                    session.add(UploadBatchFile(batch_id=batch_id, path=path, etag=md5))
                elif known[path] != md5:
                    session.execute(
                        update(UploadBatchFile)
                        .where(UploadBatchFile.batch_id == batch_id, UploadBatchFile.path == path)
                        .values(etag=md5)
                    )
        zarr.modified_at = utcnow()
        store = archive.store_for(zarr.dandiset.embargoed)
    expiry = archive.settings.presign_expiry
    return [store.presign_put(staging_object_key(zarr_id, uid, p), e, expiry) for p, e in checked]


#: How often ``finalize`` verifies again when the batch changed while it was verified.
FINALIZE_ROUNDS = 3


def finalize(archive: Archive, user: Caller | None, zarr_id: str) -> FinalizeReport:
    """DANDI's ``POST /api/zarr/{id}/finalize/``: end the open batch, always.

    Every file it announced is checked in S3 (one listing of its staging area): files
    never PUT, or PUT with another md5 than the last one announced, and files that are also
    a directory of another file of the batch are **dropped** (logged, and named in the
    report); the rest is recorded verified and queued, then applied like ``upload/complete/``
    (copies and an incremental update of the ``.checksum`` tree; ``status`` is
    ``Ingesting`` until it is applied, then ``Complete``).  A batch left empty is forgotten.
    With no batch open, nothing to do: the answer says so (the Zarr is, or becomes,
    ``Complete``).
    """
    zarr_id, status = _writable(archive, user, zarr_id)
    if status.pending:
        _kick(archive, zarr_id)
    for _round in range(FINALIZE_ROUNDS):
        with archive.db.session() as session:
            current = _open_batch_files(session, zarr_id)
            store = archive.store_for(get_zarr(session, user, zarr_id).dandiset.embargoed)
        if current is None:
            return FinalizeReport(zarr_id, None, 0, [])
        _batch_id, uid, expected = current
        staged, problems = _check_staged(store, zarr_id, uid, dict(expected))
        dropped = [
            DroppedFile(
                str(p["path"]),
                p["expected"],
                p["found"],
                "missing" if p["found"] is None else "differs",
            )
            for p in problems
        ]
        for path in find_file_directory_clashes(sorted(staged)):
            dropped.append(DroppedFile(path, expected[path], expected[path], "file_and_directory"))
            del staged[path]
        with archive.db.write_session() as session:
            zarr = _lock_for_write(session, user, zarr_id)
            batch = _the_open_batch(session, zarr.id)
            if batch is None or batch.uid != uid:
                continue  # finalized or cancelled meanwhile: look again
            if {f.path: f.etag or "" for f in batch.files} != expected:
                continue  # extended meanwhile: verify again
            batch.files = [f for f in batch.files if f.path in staged]
            for f in batch.files:
                f.size, f.staged_version = staged[f.path]
            zarr.modified_at = utcnow()
            if batch.files:
                batch.state = BatchState.QUEUED
                batch.seq = _next_seq(session, zarr.id)
                at_rest = False
            else:
                session.delete(batch)
                at_rest = not _has_pending(session, zarr.id)
        break
    else:
        raise Conflict(
            f"Zarr {zarr_id}: its upload batch kept changing while it was finalized: "
            "finalize again when no upload is announcing files"
        )
    if dropped:
        log.warning(
            "Zarr %s: finalize dropped %d of %d files of batch %s (never PUT, another md5, "
            "or a file that is also a directory), e.g. %s",
            zarr_id,
            len(dropped),
            len(expected),
            uid,
            ", ".join(f"{d.path} ({d.reason})" for d in dropped[:5]),
        )
    if staged:
        if not _schedule(archive, zarr_id):
            apply_pending(archive, zarr_id, wait=True)
    else:
        _drop_staging(store, zarr_id, uid)
        if at_rest:
            queue_manifest(archive, zarr_id)
    return FinalizeReport(zarr_id, uid, len(staged), dropped)

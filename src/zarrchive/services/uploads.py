"""Batched uploads, their verification and cancellation, and file deletion.

Every write to a Zarr runs under its row lock (``write_session`` +
``SELECT ... FOR UPDATE``).  A batch that passed verification is marked
``applying`` and committed *before* any ``.checksum`` node is touched, so a
crash mid-update is noticed by the next write to the Zarr, which finishes it
(the tree update is idempotent).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass

from sqlalchemy import select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from zarrchive.checksum import validate_md5
from zarrchive.db.models import UploadBatch, UploadBatchFile, User, Zarr, utcnow
from zarrchive.errors import (
    BatchTooLarge,
    Conflict,
    InvalidInput,
    NotFound,
    NoUploadInProgress,
    StorageError,
    UploadInProgress,
    UploadVerificationFailed,
    ZarrchiveError,
)
from zarrchive.paths import validate_path
from zarrchive.services.auth import require_owner
from zarrchive.services.runtime import Archive
from zarrchive.services.tree_updater import FileChange, apply_changes, file_lookup
from zarrchive.services.zarrs import ensure_writable, get_zarr
from zarrchive.storage.keys import zarr_object_key
from zarrchive.storage.objects import ObjectStore

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class UploadUrl:
    path: str
    upload_url: str


def _check_and_recover(archive: Archive, user: User | None, zarr_id: str) -> str:
    """Refuse (404/403) before touching anything, then finish an interrupted update.

    Returns the normalised Zarr id.
    """
    with archive.db.session() as session:
        zarr = get_zarr(session, user, zarr_id)
        require_owner(user, zarr.dandiset)
        ensure_writable(session, zarr)
        zarr_id = zarr.id
        batch = open_batch(session, zarr)
        interrupted = batch is not None and batch.state == "applying"
    if interrupted:  # rare: only then take the write lock for the repair
        finish_interrupted(archive, zarr_id)
    return zarr_id


def _lock_for_write(session: Session, user: User | None, zarr_id: str) -> Zarr:
    zarr = get_zarr(session, user, zarr_id, lock=True)
    require_owner(user, zarr.dandiset)
    ensure_writable(session, zarr)
    if zarr.dandiset.embargo_status == "unembargoing":
        raise Conflict(
            f"dandiset {zarr.dandiset.identifier} is being unembargoed (its objects are moving "
            "to the public bucket): try again when that is done"
        )
    return zarr


def open_batch(session: Session, zarr: Zarr) -> UploadBatch | None:
    return session.scalar(select(UploadBatch).where(UploadBatch.zarr_id == zarr.id))


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


# -- finishing interrupted work ------------------------------------------------------
def _finish_applying(archive: Archive, session: Session, zarr: Zarr, batch: UploadBatch) -> None:
    """Apply a verified batch (or a file deletion) to S3's tree and the database."""
    changes: dict[str, FileChange] = {}
    store = archive.store_for(zarr.dandiset)
    if batch.kind == "delete":
        store.delete_many(zarr_object_key(zarr.id, f.path) for f in batch.files)
        changes = {f.path: None for f in batch.files}
    else:
        for f in batch.files:
            assert f.etag is not None and f.size is not None
            changes[f.path] = (f.etag, f.size)
    state = apply_changes(store, zarr.id, changes)
    zarr.checksum, zarr.file_count, zarr.size = state.checksum, state.file_count, state.size
    zarr.modified_at = utcnow()
    session.delete(batch)
    session.flush()


def finish_interrupted(archive: Archive, zarr_id: str, *, expected: bool = False) -> bool:
    """Finish a verified batch or deletion of *zarr_id* that a crash interrupted.

    Runs in its own transaction under the Zarr's lock; True if it changed the
    checksum (the manifest job is then queued).
    """
    with archive.db.write_session() as session:
        zarr = get_zarr(session, None, zarr_id, lock=True, check_read=False)
        batch = open_batch(session, zarr)
        if batch is None or batch.state != "applying":
            return False
        if not expected:
            log.warning("Zarr %s: finishing interrupted %s batch %s", zarr.id, batch.kind, batch.id)
        _finish_applying(archive, session, zarr, batch)
    queue_manifest(archive, zarr.id)
    return True


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
def upload_in_progress(archive: Archive, user: User | None, zarr_id: str) -> bool:
    with archive.db.session() as session:
        zarr = get_zarr(session, user, zarr_id)
        batch = open_batch(session, zarr)
        return batch is not None and batch.kind == "upload"


def start_batch(
    archive: Archive, user: User | None, zarr_id: str, files: Sequence[tuple[str, str]]
) -> list[UploadUrl]:
    """Open a batch for *files* (``(path, md5)``) and return presigned PUT URLs."""
    _check_batch_size(archive, len(files), "batch")
    checked = _validate_files(files)
    zarr_id = _check_and_recover(archive, user, zarr_id)
    with archive.db.write_session() as session:
        zarr = _lock_for_write(session, user, zarr_id)
        if open_batch(session, zarr) is not None:
            raise UploadInProgress(
                f"Zarr {zarr.id} already has an upload batch open: complete it "
                "(POST .../upload/complete/) or cancel it (DELETE .../upload/) first"
            )
        batch = UploadBatch(
            zarr_id=zarr.id, kind="upload", state="open", created_by=user.id if user else None
        )
        batch.files = [UploadBatchFile(path=p, etag=e) for p, e in checked]
        session.add(batch)
        zarr.modified_at = utcnow()
        try:
            session.flush()
        except IntegrityError as exc:  # a concurrent request won the race
            raise UploadInProgress(f"Zarr {zarr.id} already has an upload batch open") from exc
        store = archive.store_for(zarr.dandiset)
    expiry = archive.settings.presign_expiry
    return [
        UploadUrl(p, store.presign_put(zarr_object_key(zarr_id, p), e, expiry)) for p, e in checked
    ]


def complete_batch(archive: Archive, user: User | None, zarr_id: str) -> Zarr:
    """Verify the open batch in S3 and fold it into the tree hash.

    The objects are verified without holding the Zarr's lock (only the batch's own
    URLs can write them, and only with the announced content); the lock is taken to
    record the verified batch, if it is still the same open batch, and to apply it.
    """
    zarr_id = _check_and_recover(archive, user, zarr_id)
    with archive.db.session() as session:
        zarr = get_zarr(session, user, zarr_id)
        batch = open_batch(session, zarr)
        if batch is None or batch.kind != "upload" or batch.state != "open":
            raise NoUploadInProgress(f"Zarr {zarr.id} has no upload batch open")
        batch_id = batch.id
        expected = {f.path: f.etag for f in batch.files}
        store = archive.store_for(zarr.dandiset)
    sizes = _verify(store, zarr_id, expected)
    with archive.db.write_session() as session:
        zarr = _lock_for_write(session, user, zarr_id)
        batch = open_batch(session, zarr)
        if batch is None or batch.id != batch_id or batch.state != "open":
            raise NoUploadInProgress(
                f"Zarr {zarr.id}: the batch was completed or cancelled meanwhile by another request"
            )
        for f in batch.files:
            f.size = sizes[f.path]
        batch.state = "applying"
    # Recorded as verified: from here on a crash is repaired by the next write.
    finish_interrupted(archive, zarr_id, expected=True)
    with archive.db.session() as session:
        return get_zarr(session, user, zarr_id)


def _verify(store: ObjectStore, zarr_id: str, expected: dict[str, str | None]) -> dict[str, int]:
    """Check every object of a batch is in S3 with its md5; returns the sizes."""
    keys = {path: zarr_object_key(zarr_id, path) for path in expected}
    found = store.find(keys.values())
    problems: list[dict[str, str | None]] = []
    sizes: dict[str, int] = {}
    for path, etag in sorted(expected.items()):
        head = found[keys[path]]
        if head is None or head.etag != etag:
            problems.append({"path": path, "expected": etag, "found": head.etag if head else None})
        else:
            sizes[path] = head.size
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
    return sizes


def cancel_batch(archive: Archive, user: User | None, zarr_id: str) -> None:
    """Cancel the open batch: remove what it uploaded, restoring overwritten files."""
    zarr_id = _check_and_recover(archive, user, zarr_id)
    with archive.db.write_session() as session:
        zarr = _lock_for_write(session, user, zarr_id)
        batch = open_batch(session, zarr)
        if batch is None or batch.kind != "upload":
            raise NoUploadInProgress(f"Zarr {zarr.id} has no upload batch open")
        paths = [f.path for f in batch.files]
        store = archive.store_for(zarr.dandiset)
        current = file_lookup(store, zarr.id, paths)
        store.map(lambda p: _restore(store, zarr_id, p, current[p]), paths)
        session.delete(batch)
        zarr.modified_at = utcnow()
    # The Zarr is at rest again: its checksum may still lack a manifest.
    queue_manifest(archive, zarr_id)


def _restore(
    store: ObjectStore, zarr_id: str, path: str, tree_file: tuple[str, int] | None
) -> None:
    """Delete the versions of *path* newer than the content the tree records.

    Only batches write Zarr objects, so every version above the one holding the
    tree's md5 (or, for a path the tree lacks, every version above the last
    delete marker) was written by the batch being cancelled.  Older versions are
    never removed.
    """
    key = zarr_object_key(zarr_id, path)
    for _ in range(100):
        latest = store.latest_version(key)
        if latest is None or latest.is_delete_marker:
            if tree_file is not None:
                log.error("Zarr %s: %s is in the tree but absent from S3", zarr_id, path)
            return
        if tree_file is not None and latest.etag == tree_file[0]:
            return
        store.delete_version(key, latest.version_id)
    raise StorageError(f"could not restore {key!r}: too many versions to remove")


def delete_files(archive: Archive, user: User | None, zarr_id: str, paths: Sequence[str]) -> Zarr:
    """Delete files; all must exist, else nothing is deleted."""
    _check_batch_size(archive, len(paths), "deletion")
    checked = _validate_paths(paths)
    zarr_id = _check_and_recover(archive, user, zarr_id)
    with archive.db.write_session() as session:
        zarr = _lock_for_write(session, user, zarr_id)
        if open_batch(session, zarr) is not None:
            raise UploadInProgress(
                f"Zarr {zarr.id} has an upload batch open: complete or cancel it before deleting"
            )
        current = file_lookup(archive.store_for(zarr.dandiset), zarr.id, checked)
        missing = [p for p in checked if current[p] is None]
        if missing:
            raise NotFound(
                f"{len(missing)} of the paths are not files of Zarr {zarr.id}: "
                f"{', '.join(missing[:20])}; nothing was deleted",
                detail={"message": "files not found; nothing was deleted", "missing": missing},
            )
        batch = UploadBatch(
            zarr_id=zarr.id, kind="delete", state="applying", created_by=user.id if user else None
        )
        batch.files = [UploadBatchFile(path=p) for p in checked]
        session.add(batch)
    finish_interrupted(archive, zarr_id, expected=True)
    with archive.db.session() as session:
        return get_zarr(session, user, zarr_id)

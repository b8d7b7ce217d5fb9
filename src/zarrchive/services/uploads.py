"""Batched uploads, their verification and cancellation, and file deletion.

The life of a batch (one per Zarr at a time, enforced by the database):

1. ``start_batch``: under the Zarr's row lock, record the batch (state ``open``, a ``uid``
   unique forever) and answer presigned PUT URLs for its **staging keys**
   ``zarr-staging/{zarr_id}/{uid}/{path}`` (signing ``Content-MD5``).  No URL ever names a
   key of the Zarr itself, so no URL, late or replayed, can change what a Zarr shows.
2. ``complete_batch``: list the batch's staging prefix (one listing, no lock) and check every
   file is there with its md5; then, under the lock and only if the open batch is still the
   one verified (same uid), record each staging object's version and size and mark the batch
   ``applying`` (committed: from here on the batch is finished by whoever comes next).
3. ``finish_interrupted`` applies an ``applying`` batch: copy each staged version to
   ``zarr/{zarr_id}/{path}`` (server-side, **outside** the database lock, so SQLite's writers
   are not stalled), then under the lock rewrite the affected ``.checksum`` nodes, store the
   root and delete the batch row; after the commit drop the staging objects (best effort:
   leftovers are garbage that :func:`purge_stale_staging` removes).  Every step is idempotent:
   a crash anywhere leaves the Zarr exactly before or after the batch, and the next write to
   the Zarr (or ``admin fsck``) finishes it.
4. ``cancel_batch``: delete the batch row under the lock, then its staging objects; the Zarr's
   own objects are never touched.

File deletion is a batch of kind ``delete`` recorded ``applying`` at once: delete markers
(object versions are kept), then the tree update, as above.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field

from sqlalchemy import select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from zarrchive.checksum import validate_md5
from zarrchive.db.models import (
    BatchKind,
    BatchState,
    UploadBatch,
    UploadBatchFile,
    User,
    Zarr,
    utcnow,
)
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
from zarrchive.paths import find_file_directory_clashes, split_path, validate_path
from zarrchive.services.auth import require_owner
from zarrchive.services.runtime import Archive
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


@dataclass(frozen=True)
class UploadUrl:
    path: str
    upload_url: str


def _writable(
    archive: Archive, user: User | None, zarr_id: str
) -> tuple[str, tuple[str, str] | None]:
    """Refuse (404/403) unless *user* may write the Zarr; its normalised id and the
    ``(kind, state)`` of its batch, if it has one."""
    with archive.db.session() as session:
        zarr = get_zarr(session, user, zarr_id)
        require_owner(user, zarr.dandiset)
        ensure_writable(session, zarr)
        batch = open_batch(session, zarr)
        return zarr.id, (batch.kind, batch.state) if batch is not None else None


def _check_and_recover(archive: Archive, user: User | None, zarr_id: str) -> str:
    """Refuse (404/403) before touching anything, then finish an interrupted update.

    Returns the normalised Zarr id.
    """
    zarr_id, current = _writable(archive, user, zarr_id)
    if (
        current is not None and current[1] == BatchState.APPLYING
    ):  # rare: only then take the write lock
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


# -- applying a verified batch -----------------------------------------------------------
@dataclass(frozen=True)
class _Applying:
    """What applying a batch needs, read from the database (no ORM object outlives it)."""

    zarr_id: str
    uid: str
    kind: str
    #: upload: path -> (md5, size, staged version id); delete: the paths
    files: dict[str, tuple[str, int, str | None]] = field(default_factory=dict)
    paths: list[str] = field(default_factory=list)


def _read_applying(session: Session, zarr: Zarr) -> _Applying | None:
    batch = open_batch(session, zarr)
    if batch is None or batch.state != BatchState.APPLYING:
        return None
    applying = _Applying(zarr.id, batch.uid, batch.kind)
    for f in batch.files:
        applying.paths.append(f.path)
        if batch.kind == BatchKind.UPLOAD:
            assert f.etag is not None and f.size is not None
            applying.files[f.path] = (f.etag, f.size, f.staged_version)
    return applying


def _copy_into_place(store: ObjectStore, applying: _Applying) -> None:
    """Copy every staged object of the batch to its key in the Zarr (idempotent)."""

    def copy(item: tuple[str, tuple[str, int, str | None]]) -> None:
        path, (md5, _size, version) = item
        source = staging_object_key(applying.zarr_id, applying.uid, path)
        etag = store.copy_within(source, zarr_object_key(applying.zarr_id, path), version)
        if etag != md5:
            raise StorageError(
                f"copying {source!r} into Zarr {applying.zarr_id} gave ETag {etag!r}, not the "
                f"verified md5 {md5}: S3 is not behaving; the batch stays applying and the "
                "next write to the Zarr retries it"
            )

    store.map(copy, list(applying.files.items()))


def finish_interrupted(archive: Archive, zarr_id: str, *, expected: bool = False) -> bool:
    """Apply *zarr_id*'s verified batch or deletion (recorded ``applying``), if it has one.

    Called by ``complete`` and file deletion (*expected*), and by every later write, which
    thereby finishes a batch that a crash interrupted.  True if this call applied it (the
    manifest job is then queued).
    """
    with archive.db.session() as session:
        zarr = get_zarr(session, None, zarr_id, check_read=False)
        zarr_id = zarr.id
        applying = _read_applying(session, zarr)
        store = archive.store_for(zarr.dandiset)
    if applying is None:
        return False
    if not expected:
        log.warning(
            "Zarr %s: finishing interrupted %s batch %s", zarr_id, applying.kind, applying.uid
        )
    # S3 work outside the database lock: only this batch's objects, all idempotent.
    if applying.kind == BatchKind.DELETE:
        store.delete_many(zarr_object_key(zarr_id, p) for p in applying.paths)
        changes: dict[str, FileChange] = dict.fromkeys(applying.paths)
    else:
        _copy_into_place(store, applying)
        changes = {p: (md5, size) for p, (md5, size, _v) in applying.files.items()}
    with archive.db.write_session() as session:
        zarr = get_zarr(session, None, zarr_id, lock=True, check_read=False)
        batch = open_batch(session, zarr)
        if batch is None or batch.uid != applying.uid or batch.state != BatchState.APPLYING:
            return False  # another request applied it meanwhile
        state = apply_changes(store, zarr_id, changes)
        zarr.checksum, zarr.file_count, zarr.size = state.checksum, state.file_count, state.size
        zarr.modified_at = utcnow()
        session.delete(batch)
    if applying.kind == BatchKind.UPLOAD:
        _drop_staging(store, zarr_id, applying.uid)
    queue_manifest(archive, zarr_id)
    return True


def _drop_staging(store: ObjectStore, zarr_id: str, uid: str) -> None:
    """Remove a finished batch's staging objects for good (best effort: garbage if it fails)."""
    try:
        store.purge(staging_prefix(zarr_id, uid))
    except StorageError:
        log.warning("Zarr %s: could not remove the staging objects of batch %s", zarr_id, uid)


def purge_stale_staging(archive: Archive, zarr_id: str) -> int:
    """Remove the staging objects of every batch of *zarr_id* that is no longer open (e.g.
    written by a URL replayed after its batch ended); returns how many batches' areas."""
    with archive.db.session() as session:
        zarr = get_zarr(session, None, zarr_id, check_read=False)
        zarr_id = zarr.id
        batch = open_batch(session, zarr)
        live = batch.uid if batch is not None else None
        store = archive.store_for(zarr.dandiset)
    root = staging_zarr_prefix(zarr_id)
    stale = [p for p in store.iter_prefixes(root) if p[len(root) :].rstrip("/") != live]
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
def upload_in_progress(archive: Archive, user: User | None, zarr_id: str) -> bool:
    with archive.db.session() as session:
        zarr = get_zarr(session, user, zarr_id)
        batch = open_batch(session, zarr)
        return batch is not None and batch.kind == BatchKind.UPLOAD


def start_batch(
    archive: Archive, user: User | None, zarr_id: str, files: Sequence[tuple[str, str]]
) -> list[UploadUrl]:
    """Open a batch for *files* (``(path, md5)``) and return presigned PUT URLs."""
    _check_batch_size(archive, len(files), "batch")
    checked = _validate_files(files)
    zarr_id = _check_and_recover(archive, user, zarr_id)
    _refuse_file_directory_clashes(archive, zarr_id, [p for p, _ in checked])
    with archive.db.write_session() as session:
        zarr = _lock_for_write(session, user, zarr_id)
        if open_batch(session, zarr) is not None:
            raise UploadInProgress(
                f"Zarr {zarr.id} already has an upload batch open: complete it "
                "(POST .../upload/complete/) or cancel it (DELETE .../upload/) first"
            )
        batch = UploadBatch(
            zarr_id=zarr.id,
            uid=uuid.uuid4().hex,
            kind=BatchKind.UPLOAD,
            state=BatchState.OPEN,
            created_by=user.id if user else None,
        )
        batch.files = [UploadBatchFile(path=p, etag=e) for p, e in checked]
        session.add(batch)
        zarr.modified_at = utcnow()
        try:
            session.flush()
        except IntegrityError as exc:  # a concurrent request won the race
            raise UploadInProgress(f"Zarr {zarr.id} already has an upload batch open") from exc
        uid = batch.uid
        store = archive.store_for(zarr.dandiset)
    expiry = archive.settings.presign_expiry
    return [
        UploadUrl(p, store.presign_put(staging_object_key(zarr_id, uid, p), e, expiry))
        for p, e in checked
    ]


def _refuse_file_directory_clashes(archive: Archive, zarr_id: str, paths: list[str]) -> None:
    """A file and a directory of one name (``a`` and ``a/b``), in the batch or against the
    Zarr's tree, are refused: S3 would hold both, but no tree (or manifest) can."""
    problems = [
        f"{p!r} is both a file and a directory in the batch"
        for p in find_file_directory_clashes(paths)
    ]
    with archive.db.session() as session:
        zarr = get_zarr(session, None, zarr_id, check_read=False)
        store = archive.store_for(zarr.dandiset)
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


def complete_batch(archive: Archive, user: User | None, zarr_id: str) -> Zarr:
    """Verify the open batch's staged objects and apply it (copy into place, tree hash).

    The staging area is verified without holding the Zarr's lock (only the batch's own URLs
    write it, and only with the announced content); the lock is taken to record the verified
    batch, if it is still the same open batch (same uid), as ``applying``.
    """
    zarr_id, current = _writable(archive, user, zarr_id)
    if current == (BatchKind.UPLOAD, BatchState.APPLYING):
        # a complete that verified the batch and died (or failed) while applying it, retried:
        # finish that batch, which is the one the caller completes (one batch per Zarr)
        finish_interrupted(archive, zarr_id, expected=True)
        with archive.db.session() as session:
            return get_zarr(session, user, zarr_id)
    zarr_id = _check_and_recover(archive, user, zarr_id)
    with archive.db.session() as session:
        zarr = get_zarr(session, user, zarr_id)
        batch = open_batch(session, zarr)
        if batch is None or batch.kind != BatchKind.UPLOAD or batch.state != BatchState.OPEN:
            raise NoUploadInProgress(f"Zarr {zarr.id} has no upload batch open")
        uid = batch.uid
        expected = {f.path: f.etag for f in batch.files}
        store = archive.store_for(zarr.dandiset)
    staged = _verify_staged(store, zarr_id, uid, expected)
    with archive.db.write_session() as session:
        zarr = _lock_for_write(session, user, zarr_id)
        batch = open_batch(session, zarr)
        if batch is None or batch.uid != uid or batch.state != BatchState.OPEN:
            raise NoUploadInProgress(
                f"Zarr {zarr.id}: the batch was completed or cancelled meanwhile by another request"
            )
        for f in batch.files:
            f.size, f.staged_version = staged[f.path]
        batch.state = BatchState.APPLYING
    # Recorded as verified: from here on a crash is repaired by the next write.
    finish_interrupted(archive, zarr_id, expected=True)
    with archive.db.session() as session:
        return get_zarr(session, user, zarr_id)


def _verify_staged(
    store: ObjectStore, zarr_id: str, uid: str, expected: dict[str, str | None]
) -> dict[str, tuple[int, str | None]]:
    """Check every file of a batch is staged with its md5; ``path -> (size, version id)``."""
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
    return staged


def cancel_batch(archive: Archive, user: User | None, zarr_id: str) -> None:
    """Cancel the open batch: forget it and drop its staging objects.

    The Zarr's own objects are never touched (the batch wrote only its staging keys), so
    nothing needs restoring; the staging objects are removed after the commit, outside the
    lock.
    """
    zarr_id = _check_and_recover(archive, user, zarr_id)
    with archive.db.write_session() as session:
        zarr = _lock_for_write(session, user, zarr_id)
        batch = open_batch(session, zarr)
        if batch is None or batch.kind != BatchKind.UPLOAD or batch.state != BatchState.OPEN:
            raise NoUploadInProgress(f"Zarr {zarr.id} has no upload batch open")
        uid = batch.uid
        store = archive.store_for(zarr.dandiset)
        session.delete(batch)
        zarr.modified_at = utcnow()
    _drop_staging(store, zarr_id, uid)
    # The Zarr is at rest again: its checksum may still lack a manifest.
    queue_manifest(archive, zarr_id)


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
            zarr_id=zarr.id,
            uid=uuid.uuid4().hex,
            kind=BatchKind.DELETE,
            state=BatchState.APPLYING,
            created_by=user.id if user else None,
        )
        batch.files = [UploadBatchFile(path=p) for p in checked]
        session.add(batch)
    finish_interrupted(archive, zarr_id, expected=True)
    with archive.db.session() as session:
        return get_zarr(session, user, zarr_id)

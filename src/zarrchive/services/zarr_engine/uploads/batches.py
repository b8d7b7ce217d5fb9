"""The batch lifecycle: open, complete (verify and queue), cancel; and deleting files (see
:mod:`zarrchive.services.zarr_engine.uploads`, steps 1, 2, 4 and 5)."""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

from sqlalchemy import select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from zarrchive.content_types import zarr_content_type
from zarrchive.db.models import (
    PENDING_STATES,
    BatchKind,
    BatchState,
    UploadBatch,
    UploadBatchDirectory,
    UploadBatchFile,
    utcnow,
)
from zarrchive.errors import (
    Conflict,
    InvalidInput,
    NoUploadInProgress,
    UploadInProgress,
    UploadVerificationFailed,
)
from zarrchive.paths import find_file_directory_clashes, split_path
from zarrchive.services.identity.auth import Caller
from zarrchive.services.runtime import Archive
from zarrchive.services.zarr_engine.tree_updater import (
    affected_directories,
    read_nodes,
)
from zarrchive.services.zarr_engine.uploads import directory_delete
from zarrchive.services.zarr_engine.uploads.apply import (
    WAIT_SECONDS,
    apply_pending,
    apply_soon,
    queue_manifest,
    schedule_apply,
)
from zarrchive.services.zarr_engine.uploads.directory_delete import (
    encode_targets,
    parse_targets,
    resolve_targets,
)
from zarrchive.services.zarr_engine.uploads.multipart import BigFile, abort_uploads, assemble
from zarrchive.services.zarr_engine.uploads.parts import MAX_OBJECT_SIZE, part_count, part_size_for
from zarrchive.services.zarr_engine.uploads.records import (
    IS_THE_OPEN_BATCH,
    OpenedBatch,
    UploadStatus,
    UploadUrl,
    check_batch_size,
    check_writable,
    has_pending,
    lock_for_write,
    lock_writable,
    new_upload_batch,
    next_seq,
    promote_next,
    the_next_batch,
    the_open_batch,
    upload_status,
    validate_batch_files,
    writable_ref,
    writable_zarr,
)
from zarrchive.services.zarr_engine.uploads.staging import check_staged, drop_staging
from zarrchive.services.zarr_engine.zarrs import ZarrRef, get_zarr
from zarrchive.storage.keys import staging_object_key
from zarrchive.storage.protocol import ObjectStoreProtocol

log = logging.getLogger(__name__)


# -- the operations --------------------------------------------------------------------
def upload_in_progress(archive: Archive, user: Caller | None, zarr_id: str) -> bool:
    """True while the Zarr has an open upload batch."""
    with archive.db.session() as session:
        zarr = get_zarr(session, user, zarr_id)
        return upload_status(session, zarr.id).open


def start_batch(
    archive: Archive,
    user: Caller | None,
    zarr_id: str,
    files: Sequence[tuple[str, str]],
    sizes: Mapping[str, int] | None = None,
    *,
    resume: bool = False,
    after: str | None = None,
) -> OpenedBatch:
    """Open a batch for *files* (``(path, md5)``) and return its uid and presigned PUT URLs.

    *sizes* declares files' sizes (bytes): those above the archive's multipart threshold
    are uploaded in parts (their answer gives the part size and count; the part URLs come
    from :func:`~zarrchive.services.zarr_engine.uploads.multipart.part_urls`), the others' staged size
    is checked at ``complete``.  With *resume*, an open batch of exactly these files (paths,
    md5s and sizes) opened by the same user is answered again (fresh URLs; parts already
    sent stay) instead of refused.  Allowed while earlier batches are queued (verified, not
    applied yet): they are applied in order, before this one.

    With *after* (the uid of the Zarr's open batch, opened by the same user) the batch is
    opened ahead as that batch's *next* batch (see :func:`_start_next_batch`).
    """
    check_batch_size(archive, len(files), "batch")
    checked = validate_batch_files(files)
    declared = _declared_sizes(archive, [p for p, _ in checked], sizes or {})
    zarr, status = writable_ref(archive, user, zarr_id)  # read once, passed down
    if after is not None:
        return _start_next_batch(
            archive, user, zarr, status, after, checked, declared, resume=resume
        )
    if status.open and resume:
        again = _same_open_batch(archive, user, zarr, checked, declared)
        if again is not None:
            return again
    if status.open:
        raise _open_already(zarr.id)
    if status.pending:
        apply_soon(archive, zarr.id)  # a batch left behind by a crash is finished (or queued)
    refuse_file_directory_clashes(archive, zarr, [p for p, _ in checked])
    return _record_batch(archive, user, zarr, checked, declared)


def _start_next_batch(
    archive: Archive,
    user: Caller | None,
    zarr: ZarrRef,
    status: UploadStatus,
    after: str,
    checked: list[tuple[str, str]],
    declared: Mapping[str, tuple[int, int | None]],
    *,
    resume: bool = False,
) -> OpenedBatch:
    """Open a batch ahead, as the next one of the open batch *after*: the uploader PUTs its
    files while the batch before drains and is completed, and no PUT waits on a batch
    boundary.

    Everything ``open`` does is done now: the rows, the file/directory clash check (against
    the tree, the queued batches and the files of the batch it follows) and the URLs, under
    its own uid.  But it is not the Zarr's open batch until *after* is completed (queued):
    ``complete`` and ``cancel`` act on *after*, and cancelling *after* cancels it too.  At
    most one batch follows the open batch; *after* must be the open batch and opened by the
    same user (else 409: open it again once *after* is completed).  With *resume*, a next
    batch of exactly these files is answered again.
    """
    if status.pending:
        apply_soon(archive, zarr.id)
    with archive.db.session() as session:
        before = _followed_batch(session, user, zarr.id, after)
        following = the_next_batch(session, before)
        if following is not None:
            if resume and _holds_exactly(following, user, checked, declared):
                uid = following.uid
                store = archive.store_for(zarr.embargoed)
                return OpenedBatch(uid, _urls(archive, store, zarr.id, uid, checked, declared))
            raise _next_taken(zarr.id, after)
        theirs = [f.path for f in before.files]
    refuse_file_directory_clashes(archive, zarr, [p for p, _ in checked], following=theirs)
    return _record_batch(archive, user, zarr, checked, declared, after=after)


def _record_batch(
    archive: Archive,
    user: Caller | None,
    zarr: ZarrRef,
    checked: list[tuple[str, str]],
    declared: Mapping[str, tuple[int, int | None]],
    *,
    after: str | None = None,
) -> OpenedBatch:
    """Record a checked batch under the Zarr's lock, as its open batch or (*after*) as the
    next batch of the open batch *after*, and sign its URLs.  409 if that place was taken
    meanwhile: looked at again under the lock, and kept by the partial unique indexes."""
    with archive.db.write_session() as session:
        row = lock_writable(session, zarr)  # (the caller was checked: writable_ref)
        follows: int | None = None
        if after is None:
            taken = _open_already(zarr.id)
            if the_open_batch(session, zarr.id) is not None:
                raise taken
        else:
            taken = _next_taken(zarr.id, after)
            before = _followed_batch(session, user, zarr.id, after)
            if the_next_batch(session, before) is not None:
                raise taken
            follows = before.id
        batch = new_upload_batch(session, row, user, checked, declared, follows=follows)
        row.modified_at = utcnow()
        try:
            session.flush()
        except IntegrityError as exc:  # a concurrent request won the race
            raise taken from exc
        uid = batch.uid
        store = archive.store_for(row.dandiset.embargoed)  # as it is under the lock
    return OpenedBatch(uid, _urls(archive, store, zarr.id, uid, checked, declared))


def _open_already(zarr_id: str) -> UploadInProgress:
    return UploadInProgress(
        f"Zarr {zarr_id} already has an upload batch open: complete it "
        "(POST .../upload/complete/) or cancel it (DELETE .../upload/) first"
    )


def _next_taken(zarr_id: str, after: str) -> UploadInProgress:
    return UploadInProgress(
        f"Zarr {zarr_id}: a next batch already follows batch {after}: complete {after} "
        "first, then open again"
    )


def _followed_batch(session: Session, user: Caller | None, zarr_id: str, uid: str) -> UploadBatch:
    """The open batch *uid* a next batch may follow (opened by *user*), else 409."""
    batch = the_open_batch(session, zarr_id)
    if batch is None or batch.uid != uid or batch.kind != BatchKind.UPLOAD:
        raise UploadInProgress(
            f"Zarr {zarr_id}: batch {uid} is not its open upload batch (completed, cancelled "
            "or never opened): open the next batch without 'after'"
        )
    if batch.created_by != (user.id if user else None):
        raise UploadInProgress(
            f"Zarr {zarr_id}: the open batch {uid} was opened by someone else: only its "
            "uploader may open a batch after it"
        )
    return batch


def _holds_exactly(
    batch: UploadBatch,
    user: Caller | None,
    checked: list[tuple[str, str]],
    declared: Mapping[str, tuple[int, int | None]],
) -> bool:
    """True if *user* opened *batch* and it holds exactly *checked* with the same declared
    sizes (a retried ``open`` that went through, or an interrupted run's batch)."""
    if batch.kind != BatchKind.UPLOAD or batch.created_by != (user.id if user else None):
        return False
    theirs = {(f.path, f.etag, f.size, f.part_size) for f in batch.files}
    ours = {(p, e, *declared.get(p, (None, None))) for p, e in checked}
    return theirs == ours


def _declared_sizes(
    archive: Archive, paths: list[str], sizes: Mapping[str, int]
) -> dict[str, tuple[int, int | None]]:
    """``path -> (size, part size or None)`` of the files with a declared size (checked: 0 to
    5 TiB; part size by :func:`~.parts.part_size_for` above the multipart threshold)."""
    threshold = archive.settings.multipart_threshold
    unknown = sorted(set(sizes) - set(paths))
    if unknown:
        raise InvalidInput(f"sizes given for paths not in the batch: {', '.join(unknown[:10])}")
    declared: dict[str, tuple[int, int | None]] = {}
    problems: list[str] = []
    for path in paths:
        if path not in sizes:
            continue
        size = sizes[path]
        if not 0 <= size <= MAX_OBJECT_SIZE:
            problems.append(f"{path!r}: size {size} is not between 0 and {MAX_OBJECT_SIZE} (5 TiB)")
            continue
        declared[path] = (size, part_size_for(size, threshold) if size > threshold else None)
    if problems:
        raise InvalidInput("; ".join(problems[:20]))
    return declared


def _urls(
    archive: Archive,
    store: ObjectStoreProtocol,
    zarr_id: str,
    uid: str,
    checked: list[tuple[str, str]],
    declared: Mapping[str, tuple[int, int | None]],
) -> list[UploadUrl]:
    expiry = archive.settings.presign_expiry
    urls: list[UploadUrl] = []
    for path, md5 in checked:
        size, part_size = declared.get(path, (0, None))
        if part_size is not None:
            urls.append(UploadUrl(path, None, part_size, part_count(size, part_size)))
        else:
            key = staging_object_key(zarr_id, uid, path)
            url = store.presign_put(key, md5, expiry, zarr_content_type(path))
            urls.append(UploadUrl(path, url))
    return urls


def _same_open_batch(
    archive: Archive,
    user: Caller | None,
    zarr: ZarrRef,
    checked: list[tuple[str, str]],
    declared: Mapping[str, tuple[int, int | None]],
) -> OpenedBatch | None:
    """The open batch again (fresh URLs), if it holds exactly *checked* with the same
    declared sizes and *user* opened it; else None."""
    with archive.db.session() as session:
        batch = the_open_batch(session, zarr.id)
        if batch is None or not _holds_exactly(batch, user, checked, declared):
            return None
        uid = batch.uid
    store = archive.store_for(zarr.embargoed)
    return OpenedBatch(uid, _urls(archive, store, zarr.id, uid, checked, declared))


#: Paths checked against the queued batches per query.
_CLASH_CHUNK = 200


def _queued_clashes(archive: Archive, zarr_id: str, paths: list[str]) -> list[str]:
    """The clashes of *paths* with the files of the Zarr's verified batches not applied
    yet: a path that is a directory of a queued file, or a queued file that is a directory
    of a path.

    Bounded by the batch, not by the backlog: names are looked up by equality, a chunk at a
    time (``upload_batch_files.path`` is indexed; ``upload_batch_directories`` holds the
    directories of the queued batches), then the batches found are kept if they are the
    Zarr's pending uploads.  (Two steps: with a join, SQLite walks the Zarr's batches and
    probes each one, a cost that grows with the backlog.)  Equality is byte equality on
    both databases, whatever their collation."""
    found: list[tuple[str, int, bool]] = []  # (name, batch id, a file of the batch)
    with archive.db.session() as session:
        for table, names, is_file in (
            (UploadBatchFile, sorted(affected_directories(paths) - {""}), True),
            (UploadBatchDirectory, sorted(set(paths)), False),
        ):
            for start in range(0, len(names), _CLASH_CHUNK):
                rows = session.execute(
                    select(table.path, table.batch_id).where(
                        table.path.in_(names[start : start + _CLASH_CHUNK])
                    )
                )
                found.extend((name, batch_id, is_file) for name, batch_id in rows)
        ids = sorted({batch_id for _name, batch_id, _file in found})
        pending: set[int] = set()
        for start in range(0, len(ids), _CLASH_CHUNK):
            pending.update(
                session.scalars(
                    select(UploadBatch.id).where(
                        UploadBatch.id.in_(ids[start : start + _CLASH_CHUNK]),
                        UploadBatch.zarr_id == zarr_id,
                        UploadBatch.kind.in_((BatchKind.UPLOAD, BatchKind.RESTORE)),
                        UploadBatch.state.in_(PENDING_STATES),
                    )
                )
            )
    queued_files = {name for name, batch_id, is_file in found if is_file and batch_id in pending}
    queued_dirs = {name for name, batch_id, is_file in found if not is_file and batch_id in pending}
    problems: list[str] = []
    for path in paths:
        if path in queued_dirs:
            problems.append(f"{path!r} is a directory of a batch being applied: it can't be a file")
        for parent in affected_directories([path]) - {""}:
            if parent in queued_files:
                problems.append(
                    f"{path!r} would make {parent!r} a directory, but a batch being "
                    "applied writes it as a file"
                )
    return problems


def record_directories(session: Session, batch: UploadBatch) -> None:
    """Record the directories of *batch*'s files, when it is queued (see
    :class:`~zarrchive.db.models.UploadBatchDirectory`)."""
    queue_directories(session, batch.id, [f.path for f in batch.files])


def queue_directories(session: Session, batch_id: int, paths: list[str]) -> None:
    """Record the directories of the files *paths* of the batch *batch_id*, queued."""
    directories = affected_directories(paths) - {""}
    session.add_all(UploadBatchDirectory(batch_id=batch_id, path=d) for d in sorted(directories))


def refuse_file_directory_clashes(
    archive: Archive, zarr: ZarrRef, paths: list[str], *, following: list[str] | None = None
) -> None:
    """A file and a directory of one name (``a`` and ``a/b``), in the batch or against the
    Zarr's tree, are refused: S3 would hold both, but no tree (or manifest) can.  A batch
    opened ahead is also checked against the files of the batch it follows (*following*),
    which will be queued before it."""
    problems = [
        f"{p!r} is both a file and a directory in the batch"
        for p in find_file_directory_clashes(paths)
    ]
    if following:
        their_files = set(following)
        their_directories = affected_directories(following) - {""}
        problems.extend(
            f"{p!r} is a directory of the batch this one follows: it can't be a file"
            for p in paths
            if p in their_directories
        )
        problems.extend(
            f"{d!r} is a file of the batch this one follows: it can't be a directory"
            for d in sorted((affected_directories(paths) - {""}) & their_files)
        )
    # the verified batches not applied yet count as the Zarr's (read before the tree: a
    # batch applied in between is then in the tree)
    problems.extend(_queued_clashes(archive, zarr.id, paths))
    nodes = read_nodes(
        archive.store_for(zarr.embargoed), zarr.id, sorted(affected_directories(paths))
    )
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
    archive: Archive,
    user: Caller | None,
    zarr_id: str,
    *,
    wait: bool = False,
    verify_on_apply: bool = False,
) -> str | None:
    """Verify the open batch's staged objects and queue it to be applied (in order); returns
    the batch's uid (None: no batch was open, a retried ``complete`` whose batch was queued).

    The Zarr and its open batch are read once, in the session that checks the caller may
    write (a :class:`~zarrchive.services.zarr_engine.zarrs.ZarrRef` and an
    :class:`OpenUpload`, passed down).  The staging area is verified without holding the
    Zarr's lock (only the batch's own URLs write it, and only with the announced content);
    the lock is taken to record the verified batch, if it is still the same open batch with
    the same files, as ``queued`` with the next ``seq``.  Then the apply job is queued and the call returns (the Zarr's
    ``upload_status`` says ``applying``); with *wait* (or without a job queue) the batch and
    every one before it are applied first.

    With *verify_on_apply* (a batch without files uploaded in parts, whose every file's
    size was declared) the batch is queued at once, unverified: the applier lists its
    staging area before any copy (:func:`~.apply.verify_claimed`) and refuses it whole,
    recorded in :class:`~zarrchive.db.models.RefusedUpload`, if a file is missing or differs;
    nothing of the batch is visible before that.  The answer is then a few database writes,
    however slow the S3 listing; the uploader learns of a refusal from ``.../upload/refused/``
    (by the uid returned here) once the Zarr is at rest.
    """
    with archive.db.session() as session:
        zarr, status = check_writable(session, user, zarr_id)
        # the batch to verify, read once (with *verify_on_apply*, under the lock instead)
        opened = _open_upload(session, zarr.id) if status.open and not verify_on_apply else None
    if not status.open and status.pending:
        # a retried complete whose batch was verified (its answer lost, or its apply
        # failed): the batch is queued; apply it (with *wait*) or make sure it will be
        if wait or not schedule_apply(archive, zarr.id):
            apply_pending(archive, zarr.id, wait=True)
        return None
    if verify_on_apply:
        queued = _queue_unverified(archive, zarr)
        if not isinstance(queued, OpenUpload):
            uid, seq = queued
            if wait or not schedule_apply(archive, zarr.id):
                apply_pending(archive, zarr.id, wait=True, until_seq=seq)
            return uid
        opened = queued  # it can't be: verified now
    if opened is None:
        raise NoUploadInProgress(f"Zarr {zarr.id} has no upload batch open")
    store = archive.store_for(zarr.embargoed)
    _assembled, part_problems = assemble(store, zarr.id, opened.uid, opened.big)
    staged = _verify_staged(
        store, zarr.id, opened.uid, opened.expected, opened.declared, part_problems
    )
    with archive.db.write_session() as session:
        lock_writable(session, zarr)
        seq = _queue_verified(session, zarr.id, opened, staged)
    # Recorded as verified: from here on the batch is applied, whatever happens to us.
    if wait or not schedule_apply(archive, zarr.id):
        apply_pending(archive, zarr.id, wait=True, until_seq=seq)
    return opened.uid


@dataclass(frozen=True)
class OpenUpload:
    """The Zarr's open upload batch as ``complete`` verifies it, read once: its identity
    (row id and uid), each file's announced md5 (*expected*) and declared ``(size, in
    parts)``, and its files uploaded in parts."""

    id: int
    uid: str
    expected: dict[str, str | None]
    declared: dict[str, tuple[int | None, bool]]
    big: list[BigFile]

    @classmethod
    def of(cls, batch: UploadBatch) -> OpenUpload:
        return cls(
            id=batch.id,
            uid=batch.uid,
            expected={f.path: f.etag for f in batch.files},
            declared={f.path: (f.size, f.part_size is not None) for f in batch.files},
            big=big_files(batch),
        )


def _open_upload(session: Session, zarr_id: str) -> OpenUpload | None:
    batch = the_open_batch(session, zarr_id)
    if batch is None or batch.kind != BatchKind.UPLOAD:
        return None
    return OpenUpload.of(batch)


def _queue_verified(
    session: Session,
    zarr_id: str,
    opened: OpenUpload,
    staged: Mapping[str, tuple[int, str | None]],
) -> int:
    """Under the Zarr's lock: record *opened*, verified (*staged*: each file's size and
    staged version), as ``queued`` with the next ``seq``, if it is still the open batch
    with the files verified; returns its ``seq``.

    The batch is not read again: its row is queued only if it is still the Zarr's open
    batch (one conditional UPDATE), and its files are compared (path and md5) with those
    verified, since DANDI's ``files/`` may have added or changed some meanwhile."""
    seq = next_seq(session, zarr_id)
    queued = session.execute(
        update(UploadBatch)
        .where(UploadBatch.id == opened.id, IS_THE_OPEN_BATCH)
        .values(state=BatchState.QUEUED, seq=seq)
        .execution_options(synchronize_session=False)
    )
    if queued.rowcount != 1:  # type: ignore[attr-defined]
        raise NoUploadInProgress(
            f"Zarr {zarr_id}: the batch was completed or cancelled meanwhile by another request"
        )
    files = session.execute(
        select(UploadBatchFile.path, UploadBatchFile.etag).where(
            UploadBatchFile.batch_id == opened.id
        )
    )
    if {path: etag for path, etag in files} != opened.expected:
        raise Conflict(
            f"Zarr {zarr_id}: files were announced to the batch while it was verified: "
            "complete again"
        )
    session.execute(
        update(UploadBatchFile),
        [
            {
                "batch_id": opened.id,
                "path": path,
                "size": size,
                "staged_version": version,
                "multipart_upload_id": None,  # assembled: the upload is gone
            }
            for path, (size, version) in staged.items()
        ],
    )
    queue_directories(session, opened.id, list(opened.expected))
    promote_next(session, opened.id)
    return seq


def _queue_unverified(archive: Archive, zarr: ZarrRef) -> tuple[str, int] | OpenUpload:
    """Queue the open batch unverified (``verify_on_apply``): ``(uid, seq)``; or, when it
    can't be (a file uploaded in parts, or one without a declared size), the batch as read
    here, to verify now."""
    with archive.db.write_session() as session:
        lock_writable(session, zarr)
        batch = the_open_batch(session, zarr.id)
        if batch is None or batch.kind != BatchKind.UPLOAD:
            raise NoUploadInProgress(f"Zarr {zarr.id} has no upload batch open")
        if any(f.part_size is not None or f.size is None for f in batch.files):
            return OpenUpload.of(batch)
        clashes = find_file_directory_clashes(sorted(f.path for f in batch.files))
        if clashes:  # only a batch extended through DANDI's files/ can hold them
            return OpenUpload.of(batch)  # (refused by the check now, which names them)
        batch.state = BatchState.QUEUED
        batch.verify_on_apply = True
        batch.seq = next_seq(session, zarr.id)
        record_directories(session, batch)
        promote_next(session, batch)
        return batch.uid, batch.seq


def big_files(batch: UploadBatch) -> list[BigFile]:
    return [
        BigFile(f.path, f.size, f.part_size, f.multipart_upload_id)
        for f in batch.files
        if f.part_size is not None and f.size is not None
    ]


def _verify_staged(
    store: ObjectStoreProtocol,
    zarr_id: str,
    uid: str,
    expected: dict[str, str | None],
    declared: Mapping[str, tuple[int | None, bool]] | None = None,
    part_problems: list[dict[str, str | None]] | None = None,
) -> dict[str, tuple[int, str | None]]:
    """Check every file of a batch is staged with its md5; ``path -> (size, version id)``."""
    staged, problems = check_staged(store, zarr_id, uid, expected, declared)
    if part_problems:
        named = {p["path"] for p in part_problems}
        problems = sorted(
            [*part_problems, *(p for p in problems if p["path"] not in named)],
            key=lambda p: str(p["path"]),
        )
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
    """Cancel the open batch (and the next batch opened ahead to follow it): forget them
    and drop their staging objects.

    Only the ``open`` (unverified) batch is cancelled: verified batches stay queued and are
    applied.  The Zarr's own objects are never touched (the batch wrote only its staging
    keys), so nothing needs restoring; the staging objects are removed after the commit,
    outside the lock.
    """
    zarr_id, status = writable_zarr(archive, user, zarr_id)
    if status.pending:
        apply_soon(archive, zarr_id)
    with archive.db.write_session() as session:
        zarr = lock_for_write(session, user, zarr_id)
        batch = the_open_batch(session, zarr.id)
        if batch is None or batch.kind != BatchKind.UPLOAD:
            raise NoUploadInProgress(f"Zarr {zarr.id} has no upload batch open")
        cancelled = [b for b in (the_next_batch(session, batch), batch) if b is not None]
        dropped = [(b.uid, big_files(b)) for b in cancelled]
        store = archive.store_for(zarr.dandiset.embargoed)
        for b in cancelled:
            session.delete(b)
            session.flush()  # the next batch first: it names the open one
        zarr.modified_at = utcnow()
        at_rest = not has_pending(session, zarr.id)
    for uid, big in dropped:
        abort_uploads(store, zarr_id, uid, big)
        drop_staging(store, zarr_id, uid)
    if at_rest:  # the Zarr is at rest again: its checksum may still lack a manifest
        queue_manifest(archive, zarr_id)


@dataclass(frozen=True)
class Deletion:
    """What a deletion request did: *files* files (inside *directories* named directories,
    or named), and whether they are gone already (*applied*) or the background job deletes
    them (the Zarr is ``applying`` until then)."""

    zarr_id: str
    files: int
    directories: int
    applied: bool


def delete_files(
    archive: Archive, user: Caller | None, zarr_id: str, paths: Sequence[str]
) -> Deletion:
    """Delete files and whole directories; all must exist, else nothing is deleted.

    A path names a file, or a directory (with or without a trailing ``/``: with one, only a
    directory will do): every file below it is deleted, and the tree updated once (see
    :mod:`.directory_delete`).  The root can't be named.  Allowed while an upload batch is
    open (it has not touched the Zarr yet); applied after every batch verified before it:
    those are applied first (waiting for another applier, up to :data:`WAIT_SECONDS`), then
    the paths are checked and a ``delete`` batch queued.  At most
    :data:`~.directory_delete.INLINE_DELETE_FILES` files are deleted before the answer (as
    DANDI does); more are left to the apply job, when the archive has a job queue.
    """
    check_batch_size(archive, len(paths), "deletion")
    targets = parse_targets(paths)
    zarr_id, _status = writable_zarr(archive, user, zarr_id)
    deadline = time.monotonic() + WAIT_SECONDS
    while True:
        try:
            apply_pending(
                archive, zarr_id, wait=True, timeout=max(0.0, deadline - time.monotonic())
            )
        except UploadVerificationFailed as exc:  # an earlier batch, recorded as refused
            log.warning("%s", exc.message)
        with archive.db.write_session() as session:
            zarr = lock_for_write(session, user, zarr_id)
            if has_pending(session, zarr.id):
                continue  # a batch was verified meanwhile: it comes first
            store = archive.store_for(zarr.dandiset.embargoed)
            resolved = resolve_targets(store, zarr.id, targets)
            batch = UploadBatch(
                zarr_id=zarr.id,
                uid=uuid.uuid4().hex,
                kind=BatchKind.DELETE,
                state=BatchState.QUEUED,
                seq=next_seq(session, zarr.id),
                created_by=user.id if user else None,
            )
            batch.files = [UploadBatchFile(path=p) for p in encode_targets(resolved)]
            session.add(batch)
            seq = batch.seq
            break
    deletion = Deletion(zarr_id, resolved.file_count, len(resolved.directories), True)
    if resolved.file_count > directory_delete.INLINE_DELETE_FILES and schedule_apply(
        archive, zarr_id
    ):
        return replace(deletion, applied=False)
    apply_pending(archive, zarr_id, wait=True, until_seq=seq)
    return deletion

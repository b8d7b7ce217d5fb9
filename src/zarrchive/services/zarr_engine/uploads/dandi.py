"""DANDI's upload flow: ``POST files/`` opens or extends the batch, ``finalize/`` ends it."""

from __future__ import annotations

import base64
import logging
from collections.abc import Sequence
from dataclasses import dataclass

from sqlalchemy import select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from zarrchive.db.models import (
    BatchState,
    UploadBatch,
    UploadBatchFile,
    utcnow,
)
from zarrchive.errors import (
    BatchTooLarge,
    Conflict,
    InvalidDigest,
    UploadInProgress,
)
from zarrchive.paths import find_file_directory_clashes
from zarrchive.services.identity.auth import Caller
from zarrchive.services.runtime import Archive
from zarrchive.services.zarr_engine.uploads.apply import (
    apply_pending,
    apply_soon,
    queue_manifest,
    schedule_apply,
)
from zarrchive.services.zarr_engine.uploads.batches import (
    big_files,
    record_directories,
    refuse_file_directory_clashes,
)
from zarrchive.services.zarr_engine.uploads.multipart import abort_uploads
from zarrchive.services.zarr_engine.uploads.records import (
    IS_THE_OPEN_BATCH,
    check_batch_size,
    has_pending,
    lock_writable,
    new_upload_batch,
    next_seq,
    promote_next,
    the_open_batch,
    validate_batch_files,
    writable_ref,
)
from zarrchive.services.zarr_engine.uploads.staging import check_staged, drop_staging
from zarrchive.storage.keys import (
    staging_object_key,
)

log = logging.getLogger(__name__)

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
            UploadBatch.zarr_id == zarr_id, IS_THE_OPEN_BATCH
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
    check_batch_size(archive, len(files), "request")
    checked = validate_batch_files(files)
    ref, status = writable_ref(archive, user, zarr_id)  # read once, passed down
    zarr_id = ref.id
    if status.pending:
        apply_soon(archive, zarr_id)
    refuse_file_directory_clashes(archive, ref, [p for p, _ in checked])
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
        zarr = lock_writable(session, ref)
        current = _open_batch_files(session, zarr.id)
        if current is None:
            batch = new_upload_batch(session, zarr, user, checked)
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
    A big file dropped (one uploaded in parts, through ``upload/``, and not assembled) has
    its S3 multipart upload aborted, as cancelling the batch does.
    With no batch open, nothing to do: the answer says so (the Zarr is, or becomes,
    ``Complete``).
    """
    ref, status = writable_ref(archive, user, zarr_id)  # read once, passed down
    zarr_id = ref.id
    if status.pending:
        apply_soon(archive, zarr_id)
    store = archive.store_for(ref.embargoed)
    for _round in range(FINALIZE_ROUNDS):
        with archive.db.session() as session:
            current = _open_batch_files(session, zarr_id)
        if current is None:
            return FinalizeReport(zarr_id, None, 0, [])
        _batch_id, uid, expected = current
        staged, problems = check_staged(store, zarr_id, uid, dict(expected))
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
            zarr = lock_writable(session, ref)
            batch = the_open_batch(session, zarr.id)
            if batch is None or batch.uid != uid:
                continue  # finalized or cancelled meanwhile: look again
            if {f.path: f.etag or "" for f in batch.files} != expected:
                continue  # extended meanwhile: verify again
            unfinished = [b for b in big_files(batch) if b.path not in staged]
            batch.files = [f for f in batch.files if f.path in staged]
            for f in batch.files:
                f.size, f.staged_version = staged[f.path]
            zarr.modified_at = utcnow()
            if batch.files:
                batch.state = BatchState.QUEUED
                batch.seq = next_seq(session, zarr.id)
                record_directories(session, batch)
                at_rest = False
            else:
                session.delete(batch)
                at_rest = not has_pending(session, zarr.id)
            promote_next(session, batch)  # (a batch our uploader opened ahead of it)
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
    abort_uploads(store, zarr_id, uid, unfinished)  # (after the commit: the batch ended)
    if staged:
        if not schedule_apply(archive, zarr_id):
            apply_pending(archive, zarr_id, wait=True)
    else:
        drop_staging(store, zarr_id, uid)
        if at_rest:
            queue_manifest(archive, zarr_id)
    return FinalizeReport(zarr_id, uid, len(staged), dropped)

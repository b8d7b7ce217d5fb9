"""The batch records of a Zarr: its upload status, the lookups and checks the batch lifecycle,
the apply engine and DANDI's flow share (see :mod:`zarrchive.services.zarr_engine.uploads`)."""

from __future__ import annotations

import logging
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from sqlalchemy import and_, func, select, update
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
)
from zarrchive.errors import (
    BatchTooLarge,
    Conflict,
    InvalidInput,
    ZarrchiveError,
)
from zarrchive.paths import validate_path
from zarrchive.services.identity.auth import Caller, require_owner
from zarrchive.services.runtime import Archive
from zarrchive.services.zarr_engine.zarrs import ZarrRef, ensure_writable, get_zarr
from zarrchive.wire.zarrs import UploadState

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class UploadUrl:
    path: str
    #: None for a file uploaded in parts (ask ``.../upload/parts/`` for their URLs).
    upload_url: str | None
    part_size: int | None = None
    part_count: int | None = None


@dataclass(frozen=True)
class OpenedBatch:
    """The batch :func:`~.batches.start_batch` opened (or answered again): its uid, and its
    files' URLs."""

    uid: str
    urls: list[UploadUrl]


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


def check_writable(
    session: Session, user: Caller | None, zarr_id: str
) -> tuple[ZarrRef, UploadStatus]:
    """Refuse (404/403) unless *user* may write the Zarr: the Zarr as the rest of the request
    needs it (:class:`~zarrchive.services.zarr_engine.zarrs.ZarrRef`: pass it down, don't
    read the row again) and its batches."""
    zarr = get_zarr(session, user, zarr_id)
    require_owner(user, zarr.dandiset)
    ensure_writable(session, zarr)
    return ZarrRef.of(zarr), upload_status(session, zarr.id)


def writable_ref(
    archive: Archive, user: Caller | None, zarr_id: str
) -> tuple[ZarrRef, UploadStatus]:
    """Refuse (404/403) unless *user* may write the Zarr (:func:`check_writable`, in a
    session of its own); the Zarr to pass down and its batches."""
    with archive.db.session() as session:
        return check_writable(session, user, zarr_id)


def writable_zarr(archive: Archive, user: Caller | None, zarr_id: str) -> tuple[str, UploadStatus]:
    """Refuse (404/403) unless *user* may write the Zarr; its normalised id and its batches."""
    zarr, status = writable_ref(archive, user, zarr_id)
    return zarr.id, status


def lock_for_write(session: Session, user: Caller | None, zarr_id: str) -> Zarr:
    """The Zarr's row lock, if *user* may write it (the checks of :func:`check_writable`, made
    under the lock)."""
    zarr = get_zarr(session, user, zarr_id, lock=True)
    require_owner(user, zarr.dandiset)
    return _writable_under_lock(session, zarr)


def lock_writable(session: Session, zarr: ZarrRef) -> Zarr:
    """The Zarr's row lock, for a request that checked its caller may write it already
    (:func:`check_writable`): what may have changed since is checked again under the lock
    (a publication froze it, its asset went to the trash, an unembargo began), who the
    caller is is not."""
    return _writable_under_lock(
        session, get_zarr(session, None, zarr.id, lock=True, check_read=False)
    )


def _writable_under_lock(session: Session, zarr: Zarr) -> Zarr:
    ensure_writable(session, zarr)
    if zarr.dandiset.embargo_status == EmbargoStatus.UNEMBARGOING:
        raise Conflict(
            f"dandiset {zarr.dandiset.identifier} is being unembargoed (its objects are moving "
            "to the public bucket): try again when that is done"
        )
    return zarr


def new_upload_batch(
    session: Session,
    zarr: Zarr,
    user: Caller | None,
    files: list[tuple[str, str]],
    sizes: Mapping[str, tuple[int, int | None]] | None = None,
    *,
    follows: int | None = None,
) -> UploadBatch:
    """An open upload batch of *files* (``(path, md5)``), with an identity unique forever;
    *sizes* gives the declared ``(size, part size)`` of some (part size: uploaded in parts);
    *follows*: the id of the open batch this one is opened ahead of."""
    batch = UploadBatch(
        zarr_id=zarr.id,
        uid=uuid.uuid4().hex,
        kind=BatchKind.UPLOAD,
        state=BatchState.OPEN,
        created_by=user.id if user else None,
        follows=follows,
    )
    declared = sizes or {}
    batch.files = [
        UploadBatchFile(
            path=p,
            etag=e,
            size=declared[p][0] if p in declared else None,
            part_size=declared[p][1] if p in declared else None,
        )
        for p, e in files
    ]
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


#: The rows that are a Zarr's open batch (``db.models.OPEN_BATCH_WHERE``): an ``open`` row
#: that follows none (one that does is the next batch, opened ahead).
IS_THE_OPEN_BATCH = and_(UploadBatch.state == BatchState.OPEN, UploadBatch.follows.is_(None))


def the_open_batch(session: Session, zarr_id: str) -> UploadBatch | None:
    """The Zarr's ``open`` upload batch (at most one: the database says so); a next batch
    opened ahead is not it (see :func:`the_next_batch`)."""
    return session.scalar(
        select(UploadBatch).where(UploadBatch.zarr_id == zarr_id, IS_THE_OPEN_BATCH)
    )


def the_next_batch(session: Session, batch: UploadBatch) -> UploadBatch | None:
    """The batch opened ahead to follow the open *batch* (at most one), or None."""
    return session.scalar(select(UploadBatch).where(UploadBatch.follows == batch.id))


def promote_next(session: Session, batch: UploadBatch | int) -> None:
    """*batch* (or its id), the open batch, has just been queued: the batch opened ahead to
    follow it (if any) becomes the Zarr's open batch, in the same transaction."""
    batch_id = batch if isinstance(batch, int) else batch.id
    session.flush()  # the open batch is no longer open before its successor is
    session.execute(update(UploadBatch).where(UploadBatch.follows == batch_id).values(follows=None))


def has_pending(session: Session, zarr_id: str) -> bool:
    return (
        session.scalar(
            select(UploadBatch.id)
            .where(UploadBatch.zarr_id == zarr_id, UploadBatch.state.in_(PENDING_STATES))
            .limit(1)
        )
        is not None
    )


def next_seq(session: Session, zarr_id: str) -> int:
    """The next apply order number of the Zarr (call under its row lock)."""
    last = session.scalar(select(func.max(UploadBatch.seq)).where(UploadBatch.zarr_id == zarr_id))
    return (last or 0) + 1


def check_batch_size(archive: Archive, count: int, what: str) -> None:
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


def validate_batch_files(files: Sequence[tuple[str, str]]) -> list[tuple[str, str]]:
    """``(path, md5)`` pairs, checked."""
    return [(p, e) for p, e in _validate(files) if e is not None]


def _validate_paths(paths: Sequence[str]) -> list[str]:
    """Paths, checked."""
    return [p for p, _ in _validate([(p, None) for p in paths])]

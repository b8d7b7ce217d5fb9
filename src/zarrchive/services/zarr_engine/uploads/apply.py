"""The apply engine: verified batches copied into place and the tree updated, in ``seq`` order,
under claims with a lease (see :mod:`zarrchive.services.zarr_engine.uploads`, step 3)."""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import wait as futures_wait
from dataclasses import dataclass, field
from datetime import timedelta

from sqlalchemy import select, update

from zarrchive.content_types import zarr_content_type
from zarrchive.db.models import (
    PENDING_STATES,
    BatchKind,
    BatchState,
    RefusedUpload,
    UploadBatch,
    utcnow,
)
from zarrchive.errors import (
    ArchiveBusy,
    NotFound,
    StorageError,
    UploadVerificationFailed,
    ZarrchiveError,
)
from zarrchive.jobs.lanes import JobLane
from zarrchive.services.dandi.changes import zarr_batch_applied
from zarrchive.services.runtime import Archive, current_archive
from zarrchive.services.zarr_engine.manifest_changes import WrittenObject, record_applied_changes
from zarrchive.services.zarr_engine.tree_updater import (
    FileChange,
    apply_changes,
)
from zarrchive.services.zarr_engine.uploads import directory_delete
from zarrchive.services.zarr_engine.uploads.import_copy import (
    ImportedSource,
    SourceRefused,
    copied_in_parts,
    copy_imported,
    load_sources,
    prepare_imported_copy,
)
from zarrchive.services.zarr_engine.uploads.import_undo import undo_unrecorded
from zarrchive.services.zarr_engine.uploads.multipart import (
    COPY_FILES_PARALLEL,
    ClaimKeeper,
    PreparedCopy,
    finish_verified_copy,
    prepare_verified_copy,
)
from zarrchive.services.zarr_engine.uploads.parts import part_size_for
from zarrchive.services.zarr_engine.uploads.records import has_pending, upload_status
from zarrchive.services.zarr_engine.uploads.staging import check_staged_and_sources, drop_staging
from zarrchive.services.zarr_engine.zarrs import ZarrRef, get_zarr
from zarrchive.storage.keys import (
    staging_object_key,
    zarr_object_key,
)
from zarrchive.storage.objects import ObjectStore, WrittenVersion
from zarrchive.storage.protocol import ObjectStoreProtocol

log = logging.getLogger(__name__)

#: How long an applier's claim on a batch lasts without renewal (it renews every chunk).
CLAIM_SECONDS = 15.0
#: Copies between renewals of the claim.
COPY_CHUNK = 250
#: How often an applier waiting for its last staging drops looks for a newly queued batch.
DROP_POLL_SECONDS = 0.1
#: Applied batches whose staging areas an applier leaves in place while more batches wait
#: (they are dropped as soon as none does).
HELD_DROPS = 16
#: How long the apply job, having caught up with an upload that is still going on (a batch
#: of the Zarr is open), waits for its next batch before it drops the staging areas it
#: holds: the uploader queues its batches back to back, and a drop started in the gap
#: (SeaweedFS spends about a third of a PUT's CPU on each versioned delete) competes with
#: that upload's PUTs and copies.
DROP_GRACE_SECONDS = 1.0
#: How long a request that must apply now (``wait``) waits for another applier.
WAIT_SECONDS = 60.0
#: The import string of the apply job.
APPLY_JOB = "zarrchive.services.zarr_engine.uploads:apply_pending_job"


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
    #: upload: the files uploaded in parts (path -> part size): their md5 is verified here
    part_sizes: dict[str, int] = field(default_factory=dict)
    #: upload: queued unverified (``verify_on_apply``): the staged objects are checked here,
    #: before any copy (:func:`verify_claimed`)
    verify: bool = False
    #: upload: the files imported server-side (path -> their source, copied straight into
    #: place: :mod:`.import_copy`), found by :func:`verify_claimed`
    imports: dict[str, ImportedSource] = field(default_factory=dict)

    def source_key(self, path: str) -> str:
        """The key the file at *path* is copied from (at its ``files`` version): the staging
        area's, or for a restore batch the Zarr's own (the version an earlier manifest
        recorded, in ``staged_version``)."""
        if self.kind == BatchKind.RESTORE:
            return zarr_object_key(self.zarr_id, path)
        return staging_object_key(self.zarr_id, self.uid, path)


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
        claimed = _Claimed(zarr.id, batch.uid, batch.kind, batch.seq, verify=batch.verify_on_apply)
        for f in batch.files:
            claimed.paths.append(f.path)
            if batch.kind in (BatchKind.UPLOAD, BatchKind.RESTORE):
                assert f.etag is not None and f.size is not None
                claimed.files[f.path] = (f.etag, f.size, f.staged_version)
                if f.part_size is not None:
                    claimed.part_sizes[f.path] = f.part_size
        return claimed


def _next_to_check(archive: Archive, claimed: _Claimed) -> _Claimed | None:
    """The Zarr's batch queued right after *claimed*, if it waits for the check of its
    staged files (``verify_on_apply``); read, not claimed."""
    with archive.db.session() as session:
        batch = session.scalars(
            select(UploadBatch)
            .where(
                UploadBatch.zarr_id == claimed.zarr_id,
                UploadBatch.state == BatchState.QUEUED,
                UploadBatch.seq > claimed.seq,
            )
            .order_by(UploadBatch.seq)
            .limit(1)
        ).first()
        if batch is None or not batch.verify_on_apply or batch.kind != BatchKind.UPLOAD:
            return None
        assert batch.seq is not None
        ahead = _Claimed(claimed.zarr_id, batch.uid, batch.kind, batch.seq, verify=True)
        for f in batch.files:
            if f.etag is None or f.size is None:
                return None
            ahead.files[f.path] = (f.etag, f.size, None)
        return ahead


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


class _Refused(Exception):
    """Files uploaded in parts whose content is not their declared md5, or files of a batch
    queued unverified that are missing or differ in the staging area."""

    def __init__(self, problems: list[tuple[str, str, str]]) -> None:
        super().__init__(problems)
        #: ``(path, declared md5 or size, found md5 or size or "missing")``
        self.problems = problems


#: What :func:`check_staged` answers: ``path -> (size, version id)``, and the problems; and
#: the batch's imported files (``path -> source``: not staged, copied from their source).
_Checked = tuple[
    dict[str, tuple[int, str | None]], list[dict[str, str | None]], dict[str, ImportedSource]
]


def _check_claimed(store: ObjectStoreProtocol, claimed: _Claimed) -> _Checked:
    expected: dict[str, str | None] = {p: md5 for p, (md5, _n, _v) in claimed.files.items()}
    declared = {p: (size, False) for p, (_m, size, _v) in claimed.files.items()}
    return check_staged_and_sources(store, claimed.zarr_id, claimed.uid, expected, declared)


def verify_claimed(
    store: ObjectStoreProtocol, claimed: _Claimed, checked: _Checked | None = None
) -> None:
    """Check the staged objects of a batch queued unverified (``verify_on_apply``): every
    file present with its declared md5 and size (one listing of the staging area, as
    ``complete`` does otherwise), and pin the versions found, which the copies then read.
    Raises :class:`_Refused` naming every file that is not (nothing was copied yet).

    *checked*: that listing, made ahead by this applier (:class:`_Ahead`) while it copied
    the batch before (the batch was queued then: every file of it had been sent).

    Files imported server-side (:mod:`.import_copy`) are not staged: their sources are
    recorded in the staging area, read here into ``imports``; their copies check them."""
    staged, problems, imports = checked if checked is not None else _check_claimed(store, claimed)
    if problems:
        raise _Refused(
            [(str(p["path"]), str(p["expected"]), p["found"] or "missing") for p in problems]
        )
    for path, (size, version) in staged.items():
        claimed.files[path] = (claimed.files[path][0], size, version)
    claimed.imports.clear()
    claimed.imports.update(imports)


def _copy_into_place(
    archive: Archive, store: ObjectStoreProtocol, claimed: _Claimed, token: str | None
) -> list[WrittenObject] | None:
    """Copy every staged object of the batch to its key in the Zarr (idempotent), renewing
    the claim between chunks; returns each new version as S3 answered (for the manifest
    records: :func:`record_applied_changes`), or ``None`` when an answer lacked its version
    id or LastModified (an unversioned bucket: the batch goes unrecorded, the next manifest
    is listed).

    Files uploaded in parts go first, each as a multipart copy hashed as it is copied
    (:mod:`.multipart`); they become visible only once every one of them has its declared
    md5 (else every such copy is discarded and :class:`_Refused` raised: nothing of the
    batch has changed).  Then the other files, one ``CopyObject`` each.

    Every call copies every file again, so an applier that takes a crashed (or stalled)
    one's batch over makes new versions and returns those: what it records is what its
    own copies made, the newest versions of the keys.  (A stalled applier's copies still
    in flight when its claim was taken over may land after the taker's: the key's current
    version is then the stalled one's, with the same bytes, while the manifest names the
    taker's, which exists with the same bytes; ``zarrchive manifest audit`` and fsck report
    such a difference, and ``fsck --repair`` rewrites an unpinned manifest from a listing.)

    *token* ``None``: the batch is copied ahead (:class:`_Ahead`), not claimed yet: no
    claim to renew."""

    def copy(item: tuple[str, tuple[str, int, str | None]]) -> WrittenObject | None:
        path, (md5, size, version) = item
        source = claimed.source_key(path)
        # the archive's type, whatever the uploader sent (DANDI's PUTs sign none)
        written = store.copy_within(
            source,
            zarr_object_key(claimed.zarr_id, path),
            version,
            content_type=zarr_content_type(path),
        )
        if written.etag != md5:
            raise StorageError(
                f"copying {source!r} into Zarr {claimed.zarr_id} gave ETag {written.etag!r}, "
                f"not the verified md5 {md5}: S3 is not behaving; the batch stays queued and "
                "is applied again by the next write to the Zarr"
            )
        return WrittenObject.from_written(path, written, size)

    answers: list[WrittenObject | None] = []
    if claimed.imports:  # first: they may be refused (a source that changed)
        answers.extend(_copy_imports(archive, store, claimed, token))
    if claimed.part_sizes:
        assert token is not None  # (never copied ahead)
        answers.extend(_copy_big_files(archive, store, claimed, token))
    items = [
        (p, f)
        for p, f in claimed.files.items()
        if p not in claimed.part_sizes and p not in claimed.imports
    ]
    for start in range(0, len(items), COPY_CHUNK):
        if start and token is not None and not _renew(archive, claimed, token):
            raise _ClaimLost
        answers.extend(store.map(copy, items[start : start + COPY_CHUNK]))
    if any(answer is None for answer in answers):
        log.warning(
            "Zarr %s: S3 answered copies without a version id or LastModified (is the bucket "
            "versioned?): batch %s is not recorded, the next manifest lists S3",
            claimed.zarr_id,
            claimed.uid,
        )
        return None
    return [answer for answer in answers if answer is not None]


#: What :func:`_copy_imports` made of one file: the new version, or why it was refused (the
#: source changed, or the copy's ETag is not the batch's md5), or the failure of the copy.
_ImportCopy = tuple[str, WrittenVersion | None, str | None, BaseException | None]


def _copy_imports(
    archive: Archive, store: ObjectStoreProtocol, claimed: _Claimed, token: str | None
) -> list[WrittenObject | None]:
    """Copy the batch's imported files from their sources straight into place, only if each
    source still has the listed ETag: one ``CopyObject`` each, or for a source in parts (or
    above 5 GiB) a multipart copy hashed as it is copied (:func:`prepare_imported_copy`),
    made visible last.  All or nothing: if one source changed (or its copy is not the
    batch's md5), or a copy failed, the versions the others made are deleted (each key is as
    before), the multipart copies aborted, and the batch refused (:class:`_Refused`), or the
    failure raised (the batch stays queued)."""
    if not isinstance(store, ObjectStore):
        raise StorageError(f"Zarr {claimed.zarr_id}: imported files need the archive on S3")
    sizes = {p: claimed.files[p][1] for p in claimed.imports}
    parted = sorted(p for p, source in claimed.imports.items() if copied_in_parts(source, sizes[p]))
    paths = sorted(set(claimed.imports) - set(parted))
    prepared: dict[str, PreparedCopy] = {}
    done: list[_ImportCopy] = []
    failure: BaseException | None = None
    lock = threading.Lock()

    def prepare(path: str) -> _ImportCopy:
        md5, size, _v = claimed.files[path]
        threshold = archive.settings.multipart_threshold
        try:
            copy = prepare_imported_copy(
                store,
                claimed.imports[path],
                zarr_object_key(claimed.zarr_id, path),
                size,
                part_size_for(size, threshold),
                md5,
                zarr_content_type(path),
            )
        except SourceRefused:
            return path, None, "source changed", None
        except Exception as exc:  # undone below with the others
            return path, None, None, exc
        with lock:
            prepared[path] = copy
        return path, None, (copy.md5 if copy.md5 != md5 else None), None

    def copy(path: str) -> _ImportCopy:
        md5 = claimed.files[path][0]
        try:
            written = copy_imported(
                store,
                claimed.imports[path],
                zarr_object_key(claimed.zarr_id, path),
                zarr_content_type(path),
            )
        except SourceRefused:
            return path, None, "source changed", None
        except Exception as exc:  # undone below with the others
            return path, None, None, exc
        return path, written, (written.etag[:32] if written.etag != md5 else None), None

    def failed() -> bool:
        return any(refused or error for _p, _w, refused, error in done)

    try:
        if parted:
            renew = (lambda: _renew(archive, claimed, token)) if token is not None else None
            keeper = ClaimKeeper(renew or (lambda: True), CLAIM_SECONDS / 3)
            with keeper, ThreadPoolExecutor(COPY_FILES_PARALLEL) as pool:
                done.extend(pool.map(prepare, parted))
            if keeper.lost:
                raise _ClaimLost
        for start in range(0, len(paths), COPY_CHUNK):
            if failed():
                break
            if start and token is not None and not _renew(archive, claimed, token):
                raise _ClaimLost
            done.extend(store.map(copy, paths[start : start + COPY_CHUNK]))
    except BaseException as exc:
        failure = exc
    if failure is None and not failed():
        return [
            WrittenObject.from_written(p, written, claimed.files[p][1])
            for p, written, _why, _e in done
            if written is not None
        ] + store.map(lambda path: _finish_imported(store, claimed, prepared[path]), parted)
    for prepared_copy in prepared.values():
        finish_verified_copy(store, prepared_copy, keep=False)
    _undo_imports(store, claimed, done)
    refused = [(p, claimed.files[p][0], why) for p, _w, why, _e in done if why is not None]
    errors = [error for _p, _w, _why, error in done if error is not None]
    if failure is not None:
        raise failure
    if refused:
        raise _Refused(refused)
    raise errors[0]


def _finish_imported(
    store: ObjectStore, claimed: _Claimed, copy: PreparedCopy
) -> WrittenObject | None:
    """Make an imported file copied in parts visible (its md5 was found the batch's): the
    record names the md5, not the multipart ETag, as for a big uploaded file."""
    path = copy.key[len(zarr_object_key(claimed.zarr_id, "")) :]
    md5, size, _v = claimed.files[path]
    done = finish_verified_copy(store, copy, keep=True)
    assert done is not None
    if done.version_id is None:
        return None
    head = store.head(copy.key, done.version_id)
    if head is None:
        raise StorageError(
            f"Zarr {claimed.zarr_id}: the version {done.version_id} of {path!r} S3 just "
            "made is not there: S3 is not behaving; the batch stays queued"
        )
    return WrittenObject.from_written(
        path, WrittenVersion(done.etag, done.version_id, head.last_modified), size, md5
    )


def _undo_imports(store: ObjectStoreProtocol, claimed: _Claimed, done: list[_ImportCopy]) -> None:
    """Delete the versions the copies of an import refused (or failed) made: each key is
    back at the version it had (on a bucket without versions: left, and said)."""
    made = [(p, written.version_id) for p, written, _w, _e in done if written is not None]
    unversioned = [p for p, version in made if version is None]
    if unversioned:
        log.warning(
            "Zarr %s: the copies of %d imported files of refused batch %s can't be undone "
            "(no version id: is the bucket versioned?), e.g. %r",
            claimed.zarr_id,
            len(unversioned),
            claimed.uid,
            unversioned[0],
        )

    def undo(item: tuple[str, str | None]) -> None:
        path, version = item
        if version is not None:
            store.delete_version(zarr_object_key(claimed.zarr_id, path), version)

    store.map(undo, made)


def _copy_big_files(
    archive: Archive, store: ObjectStoreProtocol, claimed: _Claimed, token: str
) -> list[WrittenObject | None]:
    prepared: list[PreparedCopy] = []
    lock = threading.Lock()

    def prepare(path: str) -> None:
        md5, size, version = claimed.files[path]
        copy = prepare_verified_copy(
            store,
            claimed.source_key(path),
            version,
            zarr_object_key(claimed.zarr_id, path),
            size,
            claimed.part_sizes[path],
            md5,
        )
        with lock:
            prepared.append(copy)

    paths = sorted(claimed.part_sizes)
    keeper = ClaimKeeper(lambda: _renew(archive, claimed, token), CLAIM_SECONDS / 3)
    try:
        with keeper, ThreadPoolExecutor(COPY_FILES_PARALLEL) as pool:
            list(pool.map(prepare, paths))
        if keeper.lost:
            raise _ClaimLost
        by_key = {c.key: c for c in prepared}
        problems = [
            (p, claimed.files[p][0], by_key[zarr_object_key(claimed.zarr_id, p)].md5)
            for p in paths
            if by_key[zarr_object_key(claimed.zarr_id, p)].md5 != claimed.files[p][0]
        ]
        if problems:
            raise _Refused(problems)
    except BaseException:
        for copy in prepared:
            finish_verified_copy(store, copy, keep=False)
        raise
    by_key = {c.key: c for c in prepared}

    def finish(path: str) -> WrittenObject | None:
        md5, size, _version = claimed.files[path]
        key = zarr_object_key(claimed.zarr_id, path)
        done = finish_verified_copy(store, by_key[key], keep=True)
        assert done is not None
        if done.version_id is None:
            return None
        # S3's completion answer has no LastModified: read it back from that very version.
        # A listing shows the md5 the archive verified (recorded on the object), not the
        # multipart ETag: so does the record.
        head = store.head(key, done.version_id)
        if head is None:
            raise StorageError(
                f"Zarr {claimed.zarr_id}: the version {done.version_id} of {path!r} S3 just "
                "made is not there: S3 is not behaving; the batch stays queued"
            )
        return WrittenObject.from_written(
            path, WrittenVersion(done.etag, done.version_id, head.last_modified), size, md5
        )

    return store.map(finish, paths)


#: ``(its check, its copies' answers)``: a batch copied ahead (:class:`_Ahead`).
_Copied = tuple[_Checked, list[WrittenObject] | None]


class _Ahead:
    """An applier's work on the Zarr's next batch before it claims it, on threads of its own
    (only batches queued ``verify_on_apply``: every file of them sent, none in parts).

    - **The check**: when a batch is claimed, the listing of the next one's staging area
      starts while this one is copied (:meth:`check_next`).
    - **The copies**: once a batch's copies are done, its tree update and commit take a few
      tenths of a second during which S3 copies nothing; the next batch is then copied ahead
      (:meth:`copy_next`), if its check found every file (a batch to refuse is copied by
      nobody: its apply refuses it, nothing of it visible), it writes none of the paths of
      the batch being committed (so no copy of either can undo the other's) and it is within
      the apply's *until_seq*.  When the batch is claimed, its apply takes those answers
      (:meth:`take`) instead of copying again, waiting for them under its renewed claim; if
      they failed, it copies as usual.  The copies are those the apply makes (same staged
      versions, same keys, idempotent): made before the claim, they show early in S3 by key,
      as any batch's copies do before its commit; if the claim on the batch before is lost,
      the applier that takes over copies both again, in order.
    """

    def __init__(self, archive: Archive, until_seq: int | None) -> None:
        self.archive = archive
        self.until_seq = until_seq
        self.checker = ThreadPoolExecutor(1, thread_name_prefix="zarrchive-check")
        self.copier = ThreadPoolExecutor(1, thread_name_prefix="zarrchive-copy-ahead")
        self.checks: dict[str, Future[_Checked]] = {}
        self.copies: dict[str, Future[_Copied | None]] = {}

    def _check(self, store: ObjectStoreProtocol, ahead: _Claimed) -> Future[_Checked]:
        check = self.checks.get(ahead.uid)
        if check is None:
            check = self.checks[ahead.uid] = self.checker.submit(_check_claimed, store, ahead)
        return check

    def check_next(self, store: ObjectStoreProtocol, claimed: _Claimed) -> None:
        """Start the check of the batch queued after *claimed* (if it waits for one)."""
        ahead = _next_to_check(self.archive, claimed)
        if ahead is not None:
            self._check(store, ahead)

    def copy_next(self, store: ObjectStoreProtocol, claimed: _Claimed) -> None:
        """*claimed*'s copies are done: copy the next batch ahead, if it may be."""
        ahead = _next_to_check(self.archive, claimed)
        if (
            ahead is None
            or ahead.uid in self.copies
            or (self.until_seq is not None and ahead.seq > self.until_seq)
            or not ahead.files.keys().isdisjoint(claimed.files)
        ):
            return
        check = self._check(store, ahead)
        self.copies[ahead.uid] = self.copier.submit(self._copy, store, ahead, check)

    def _copy(
        self, store: ObjectStoreProtocol, ahead: _Claimed, check: Future[_Checked]
    ) -> _Copied | None:
        try:
            checked = check.result()
            if checked[1]:
                return None  # refused when claimed: copied by nobody
            verify_claimed(store, ahead, checked)
            return checked, _copy_into_place(self.archive, store, ahead, None)
        except Exception as exc:  # checked (or refused) and copied as usual once claimed
            log.warning("Zarr %s: copying batch %s ahead failed: %s", ahead.zarr_id, ahead.uid, exc)
            return None

    def checked(self, claimed: _Claimed) -> _Checked | None:
        """The check of *claimed* made ahead, if one was (waited for)."""
        check = self.checks.pop(claimed.uid, None)
        return check.result() if check is not None else None

    def take(self, claimed: _Claimed, token: str) -> _Copied | None:
        """The copies of *claimed* made ahead, if they were (waited for, the claim renewed
        meanwhile); ``None``: copy it now."""
        copy = self.copies.pop(claimed.uid, None)
        if copy is None:
            return None
        while True:
            try:
                copied = copy.result(timeout=CLAIM_SECONDS / 3)
            except TimeoutError:
                if not _renew(self.archive, claimed, token):
                    raise _ClaimLost from None
                continue
            if copied is not None:
                self.checks.pop(claimed.uid, None)
            return copied

    def close(self) -> None:
        """Wait for the work in flight (no copy of this applier lands after it returns)."""
        self.checker.shutdown(wait=True, cancel_futures=True)
        self.copier.shutdown(wait=True, cancel_futures=True)


def _refuse(archive: Archive, claimed: _Claimed, token: str, refused: _Refused) -> bool:
    """Drop a batch whose files uploaded in parts are not what was declared (nothing of it
    was made visible) and record why; False if the claim was lost meanwhile."""
    with archive.db.write_session() as session:
        zarr = get_zarr(session, None, claimed.zarr_id, lock=True, check_read=False)
        batch = session.scalar(select(UploadBatch).where(UploadBatch.uid == claimed.uid))
        if batch is None or batch.claimed_by != token:
            return False
        for path, expected, found in refused.problems:
            session.add(
                RefusedUpload(
                    zarr_id=zarr.id,
                    batch_uid=claimed.uid,
                    path=path,
                    expected_md5=expected,
                    found_md5=found,
                )
            )
        session.delete(batch)
        zarr.modified_at = utcnow()
    log.warning(
        "Zarr %s: batch %s refused, %d files uploaded in parts differ from their declared md5",
        claimed.zarr_id,
        claimed.uid,
        len(refused.problems),
    )
    return True


def refusal_error(zarr_id: str, problems: list[tuple[str, str, str]]) -> UploadVerificationFailed:
    listed = ", ".join(f"{p} (declared {e}, content {f})" for p, e, f in problems[:10])
    message = (
        f"Zarr {zarr_id}: the batch was refused: {len(problems)} of its files are missing "
        f"in S3 or not the md5 declared (or not the size): {listed}. Nothing of the batch changed "
        "the Zarr; upload its files again."
    )
    return UploadVerificationFailed(
        message,
        detail={
            "message": message,
            "files": [{"path": p, "expected": e, "found": f} for p, e, f in problems],
        },
    )


def _apply_claimed(
    archive: Archive,
    claimed: _Claimed,
    token: str,
    drop: Callable[[ObjectStoreProtocol, str, str], object] = drop_staging,
    ahead: _Ahead | None = None,
    *,
    zarr: ZarrRef,
) -> bool:
    """Apply a claimed batch of the Zarr *zarr* (its row as :func:`apply_pending` read it
    once: the bucket); False if the claim was lost to another applier meanwhile.
    Its staging objects are then dropped by *drop* (``(store, zarr_id, uid)``).
    *ahead*: the work on the next batch made while this one is applied (its check, its
    copies), and on this one, made while the one before was."""
    zarr_id = claimed.zarr_id
    store = archive.store_for(zarr.embargoed)
    if ahead is not None:
        ahead.check_next(store, claimed)
    plan: directory_delete.Plan | None = None
    expansion: directory_delete.Expansion | None = None
    dropped: list[str] = []

    def keep_claim() -> None:
        if not _renew(archive, claimed, token):
            raise _ClaimLost

    try:
        # S3 work outside the database lock: only this batch's objects, all idempotent.
        written: list[WrittenObject] | None = []  # None: the copies' answers were not whole
        if claimed.kind == BatchKind.DELETE:
            # files and whole directories (listed under their prefixes, deleted in chunks)
            plan = directory_delete.Plan.of_rows(claimed.paths)
            expansion = directory_delete.delete_objects(store, zarr_id, plan, keep_claim)
            changes: dict[str, FileChange] = plan.file_changes
            dropped = plan.directories
        else:
            copied = ahead.take(claimed, token) if ahead is not None else None
            if copied is not None:
                verify_claimed(store, claimed, copied[0])
                written = copied[1]
            else:
                if claimed.verify:
                    verify_claimed(store, claimed, ahead.checked(claimed) if ahead else None)
                elif claimed.kind == BatchKind.UPLOAD:  # verified by complete: its imports
                    claimed.imports.update(
                        (path, source)
                        for path, source in load_sources(store, zarr_id, claimed.uid).items()
                        if path in claimed.files and claimed.files[path][2] is None
                    )
                written = _copy_into_place(archive, store, claimed, token)
            if ahead is not None:
                ahead.copy_next(store, claimed)
            changes = {p: (md5, size) for p, (md5, size, _v) in claimed.files.items()}
        with archive.db.write_session() as session:
            row = get_zarr(session, None, zarr_id, lock=True, check_read=False)
            batch = session.scalar(select(UploadBatch).where(UploadBatch.uid == claimed.uid))
            if batch is None or batch.claimed_by != token:
                return False  # another applier took it over (and applies it)
            if row.dandiset.embargoed != zarr.embargoed:  # (its embargo ended meanwhile)
                raise ArchiveBusy(f"Zarr {zarr_id} changed buckets: its batch is applied again")
            state = apply_changes(store, zarr_id, changes, dropped)
            if written is not None:
                # for the manifest of the new checksum, durable exactly when the root is; a
                # deletion's paths are those step 1 found (spooled, read back here)
                record_applied_changes(
                    session,
                    zarr_id,
                    seq=claimed.seq,
                    checksum_before=row.checksum,
                    checksum_after=state.checksum,
                    written=written,
                    deleted=(
                        expansion.deleted_paths(plan)
                        if expansion is not None and plan is not None
                        else ()
                    ),
                )
            if expansion is not None:  # the dropped directories' own nodes, before the commit
                directory_delete.delete_subtree_nodes(store, zarr_id, expansion)
            row.checksum, row.file_count, row.size = (
                state.checksum,
                state.file_count,
                state.size,
            )
            row.modified_at = utcnow()
            zarr_batch_applied(session, row, batch)  # the audit trail; drafts revalidated
            session.delete(batch)
    except _ClaimLost:
        return False
    except _Refused as refused:
        try:  # an applier that stopped may have left copies of the batch: undo them first
            if not undo_unrecorded(
                archive,
                store,
                zarr_id,
                claimed.files,
                keep_claim=lambda: _renew(archive, claimed, token),
                renew_every=CLAIM_SECONDS / 3,
            ):
                return False
        except BaseException:
            _release(archive, claimed, token)  # applied (and refused) again later
            raise
        if not _refuse(archive, claimed, token, refused):
            return False
        drop_staging(store, zarr_id, claimed.uid)
        raise refusal_error(zarr_id, refused.problems) from None
    except BaseException:
        _release(archive, claimed, token)
        raise
    finally:
        if expansion is not None:
            expansion.close()  # the spool of deleted paths
    if claimed.kind == BatchKind.UPLOAD:  # a restore batch has no staging area
        drop(store, zarr_id, claimed.uid)
    return True


def apply_pending(
    archive: Archive,
    zarr_id: str,
    *,
    wait: bool = True,
    until_seq: int | None = None,
    timeout: float = WAIT_SECONDS,
    grace: float = 0.0,
) -> int:
    """Apply the Zarr's queued batches in order (those up to *until_seq*, if given).

    A batch claimed by another live applier is theirs: with *wait*, poll until they are
    done (or their claim expires, then take over), up to *timeout* seconds (then
    :class:`~zarrchive.errors.ArchiveBusy`, 503); without, return.  Returns how many batches
    this call applied; queues the manifest job when it applied any.  A batch refused
    (:func:`refusal_error`: files uploaded in parts whose content is not their md5) is
    dropped and the others applied; the refusal is raised at the end.

    *grace*: when no batch waits but one of the Zarr is open (its uploader is sending more),
    wait up to that many seconds for the next before dropping the staging areas held (the
    background job's :data:`DROP_GRACE_SECONDS`; a request that applies inline does not
    wait).
    """
    token = uuid.uuid4().hex
    applied = 0
    deadline = time.monotonic() + timeout
    pause = 0.02
    refused: UploadVerificationFailed | None = None
    manifest_for = 0  # how many of the applied batches the queued manifest job follows
    # An applied batch's staging objects are dropped once no batch waits (the drop lists
    # and deletes them, seconds of S3 work per batch that the copies, and the uploader's
    # PUTs, need not compete with; with *grace*, once none has come for that long while the
    # upload is still open), or once HELD_DROPS batches wait for theirs; every drop is done
    # before this call returns.
    dropper = ThreadPoolExecutor(1, thread_name_prefix="zarrchive-drop")
    dropping: list[Future[None]] = []
    held: list[tuple[ObjectStoreProtocol, str, str]] = []

    def release(count: int) -> None:
        count = max(0, count)
        for item in held[:count]:
            dropping.append(dropper.submit(drop_staging, *item))
        del held[:count]

    def drop(store: ObjectStoreProtocol, zarr_id: str, uid: str) -> object:
        held.append((store, zarr_id, uid))
        release(len(held) - HELD_DROPS)
        return None

    # The Zarr's row, read once (what the S3 side needs: its bucket); each batch's claim and
    # commit lock it (the commit checks the bucket did not change meanwhile).
    with archive.db.session() as session:
        ref = ZarrRef.of(get_zarr(session, None, zarr_id, check_read=False))
    zarr_id = ref.id
    # The next batch is checked, and copied, while the one before it is applied.
    ahead = _Ahead(archive, until_seq)

    try:
        while True:
            claimed = _claim_next(archive, zarr_id, token, until_seq)
            if claimed is None:
                if applied > manifest_for:
                    # at rest: the manifest need not wait for the staging drops (with a
                    # second job thread, or another worker, it is made while they run)
                    queue_manifest(archive, zarr_id)
                    manifest_for = applied
                if held and grace > 0 and _next_batch_comes(archive, zarr_id, grace):
                    continue
                release(len(held))
                if not all(f.done() for f in dropping):
                    # a batch queued while the last drops finish is applied at once
                    futures_wait(dropping, timeout=DROP_POLL_SECONDS)
                    continue
                if refused is not None:
                    raise refused
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
            try:
                if _apply_claimed(archive, claimed, token, drop, ahead, zarr=ref):
                    applied += 1
            except UploadVerificationFailed as exc:
                refused = refused or exc  # the batch is dropped: go on with the next ones
    finally:
        ahead.close()
        release(len(held))
        dropper.shutdown(wait=True)
        for dropped_future in dropping:  # a failed drop leaves staging objects for admin gc
            failure = dropped_future.exception()
            if failure is not None:
                log.warning(
                    "Zarr %s: dropping a batch's staging objects failed: %s", zarr_id, failure
                )
        if applied > manifest_for:
            queue_manifest(archive, zarr_id)


def _next_batch_comes(archive: Archive, zarr_id: str, grace: float) -> bool:
    """While the Zarr has a batch open (its upload goes on), wait up to *grace* seconds for
    a batch to be queued; True if one was.  (Reads only: the uploader's requests, which
    lock the Zarr, are not held up.)"""
    deadline = time.monotonic() + grace
    while True:
        with archive.db.session() as session:
            status = upload_status(session, zarr_id)
        if status.pending:
            return True
        if not status.open or time.monotonic() >= deadline:
            return False
        time.sleep(DROP_POLL_SECONDS)


def finish_interrupted(archive: Archive, zarr_id: str, *, expected: bool = False) -> bool:
    """Apply every verified batch of *zarr_id* now (waiting for another applier); True if
    this call applied any.  (``admin fsck`` calls it first; kept by name for callers.)"""
    with archive.db.session() as session:
        zarr_id = get_zarr(session, None, zarr_id, check_read=False).id
        if not has_pending(session, zarr_id):
            return False
    if not expected:
        log.warning("Zarr %s: applying its pending batches", zarr_id)
    try:
        return apply_pending(archive, zarr_id, wait=True) > 0
    except UploadVerificationFailed as exc:  # recorded as refused: the Zarr is at rest
        log.warning("%s", exc.message)
        return True


def apply_pending_job(zarr_id: str) -> None:
    """The background job (key ``apply:{zarr_id}``): apply the Zarr's queued batches.

    It waits for another applier's claim (up to twice the lease, so a dead applier's claim
    expires and is taken over); it raises on failure, so the queue retries it.
    """
    try:
        apply_pending(
            current_archive(),
            zarr_id,
            wait=True,
            timeout=2 * CLAIM_SECONDS + 5,
            grace=DROP_GRACE_SECONDS,
        )
    except NotFound:
        log.info("Zarr %s is gone: nothing to apply", zarr_id)
    except UploadVerificationFailed as exc:  # recorded (RefusedUpload): nothing to retry
        log.warning("%s", exc.message)


def schedule_apply(archive: Archive, zarr_id: str) -> bool:
    """Queue the apply job of the Zarr; False if there is no job queue (or it refused):
    the caller then applies itself."""
    if archive.jobs is None:
        return False
    try:
        archive.jobs.enqueue(
            APPLY_JOB, {"zarr_id": zarr_id}, key=f"apply:{zarr_id}", lane=JobLane.ZARR
        )
    except Exception:
        log.exception("Zarr %s: could not queue its apply job: applying now", zarr_id)
        return False
    return True


def apply_soon(archive: Archive, zarr_id: str) -> None:
    """Make sure the Zarr's pending batches (if any) get applied: queue the job, or without
    a queue apply them now.  Every write calls it, so a batch left behind by a crash is
    finished by the next write."""
    with archive.db.session() as session:
        if not has_pending(session, zarr_id):
            return
    if not schedule_apply(archive, zarr_id):
        try:
            apply_pending(archive, zarr_id, wait=True)
        except UploadVerificationFailed as exc:  # an earlier batch, recorded as refused
            log.warning("%s", exc.message)


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
            apply_soon(archive, zarr_id)
        except ZarrchiveError as exc:
            log.warning("Zarr %s: could not apply its pending batches: %s", zarr_id, exc.message)
    if zarr_ids:
        log.info("%d Zarr(s) had verified batches to apply", len(zarr_ids))
    return len(zarr_ids)


def queue_manifest(archive: Archive, zarr_id: str) -> None:
    """Queue the manifest job for the Zarr's new checksum (after the commit).

    The change itself has been committed: a queue failure is logged, never
    reported as a failure of the change (``zarrchive manifest backfill`` fills gaps).
    """
    if archive.jobs is None:
        return
    try:
        archive.jobs.enqueue(
            "zarrchive.services.zarr_engine.manifests:generate_manifest_job",
            {"zarr_id": zarr_id},
            key=f"manifest:{zarr_id}",
            lane=JobLane.ZARR,
        )
    except Exception:
        log.exception("Zarr %s: could not queue its manifest job", zarr_id)

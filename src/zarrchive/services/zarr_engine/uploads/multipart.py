"""Big files of a Zarr batch: S3 multipart uploads to their staging keys.

A file declared (``size``) above the archive's ``multipart_threshold`` is uploaded in parts
(:mod:`.parts` cuts it).  Its life, inside its batch:

1. ``start_batch`` records it with its ``part_size`` (and declared size); its answer gives
   the part size and count instead of a URL.
2. :func:`part_urls` (``POST .../upload/parts/``): the client names parts with their md5s;
   the first call starts the S3 multipart upload of the staging key (its id recorded on the
   file's row); each call answers a presigned PUT URL per part that signs its
   ``Content-MD5`` (S3 refuses any other body), except for parts S3 already holds with that
   md5 (``ListParts``): those are ``done``, so an interrupted client resumes without sending
   them again.
3. ``complete`` (:func:`assemble`): every part present with its exact length, then
   ``CompleteMultipartUpload``.  The staging object's ETag is then S3's ``md5-of-md5s-N``,
   never the file's md5: the batch is recorded with the declared md5, unverified so far.
4. The apply step (:func:`prepare_verified_copy` then :func:`finish_verified_copy`) copies
   the staged version into the Zarr's key as a multipart upload of ``UploadPartCopy`` parts
   while one streaming read of the same version hashes it (bounded memory: one chunk), in
   parallel: the md5 costs no pass of its own in wall time.  The copy is completed (made
   visible) only if the md5 is the declared one; otherwise every such copy of the batch is
   aborted and the batch refused whole (:class:`~zarrchive.db.models.RefusedUpload` says
   why): nothing of it becomes visible.  The copy carries S3's full-object CRC32 and the
   md5 as its ``zarrchive-md5`` metadata (:func:`start_checked_copy`): the read computes
   each part's CRC32 as well (:class:`~zarrchive.storage.crc32.CopyDigest`), compared with
   those S3 computed of the parts it copied, and the whole object's, which S3 checks at
   completion; a client checks the download with that CRC32 instead of an md5.
5. Cancelling the batch aborts its uploads (:func:`abort_uploads`); ``admin gc`` finds and
   aborts stray ones (:func:`stray_uploads`).

No URL, old or replayed, changes a Zarr: part URLs name staging keys, an upload ends at
``complete`` (a replayed part URL then finds no upload) and the apply copies the recorded
version of the staged object, not whatever is there later.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from sqlalchemy import select, update

from zarrchive.content_types import zarr_content_type
from zarrchive.db.models import BatchState, RefusedUpload, UploadBatch, UploadBatchFile
from zarrchive.errors import (
    ChecksumRefused,
    InvalidInput,
    NoUploadInProgress,
    StorageError,
    StorageUnavailable,
)
from zarrchive.services.identity.auth import Caller
from zarrchive.services.runtime import Archive
from zarrchive.services.zarr_engine.uploads.parts import (
    check_part_numbers,
    missing_or_wrong_parts,
    part_count,
    part_length,
)
from zarrchive.services.zarr_engine.uploads.records import (
    check_writable,
    the_open_batch,
    writable_zarr,
)
from zarrchive.storage.crc32 import CopyDigest
from zarrchive.storage.keys import (
    staging_object_key,
    staging_zarr_prefix,
    zarr_prefix,
)
from zarrchive.storage.objects import MD5_METADATA, CopiedPart, WrittenVersion
from zarrchive.storage.protocol import ObjectStoreProtocol

log = logging.getLogger(__name__)

#: ``UploadPartCopy`` requests in flight per file being copied into place.
COPY_PARTS_PARALLEL = 4
#: Big files copied into place at once (each with its parts in parallel and its hash read).
COPY_FILES_PARALLEL = 2
#: An upload of a live batch's staging key not (yet) recorded is left alone this long (the
#: request that started it records it a moment later).
UNRECORDED_GRACE = timedelta(minutes=10)


@dataclass(frozen=True)
class PartUrl:
    part_number: int
    #: None when S3 already holds this part with this md5 (``done``).
    upload_url: str | None

    @property
    def done(self) -> bool:
        return self.upload_url is None


@dataclass(frozen=True)
class PartUrls:
    path: str
    size: int
    part_size: int
    part_count: int
    parts: list[PartUrl]


def _parts_of(parts: Sequence[tuple[int, str]], path: str, count: int) -> dict[int, str]:
    from zarrchive.checksum import validate_md5

    numbers = check_part_numbers(path, [n for n, _ in parts], count)
    md5s = {n: validate_md5(md5) for n, md5 in parts}
    return {n: md5s[n] for n in numbers}


def part_urls(
    archive: Archive,
    user: Caller | None,
    zarr_id: str,
    path: str,
    parts: Sequence[tuple[int, str]],
) -> PartUrls:
    """Presigned PUT URLs for parts ``(number, md5)`` of the open batch's big file *path*
    (see the module's step 2)."""
    with archive.db.session() as session:  # the caller, the Zarr and its batch: one read
        zarr, _status = check_writable(session, user, zarr_id)
        zarr_id = zarr.id
        batch = the_open_batch(session, zarr_id)
        if batch is None:
            raise NoUploadInProgress(f"Zarr {zarr_id} has no upload batch open")
        row = session.scalar(
            select(UploadBatchFile).where(
                UploadBatchFile.batch_id == batch.id, UploadBatchFile.path == path
            )
        )
        if row is None or row.part_size is None or row.size is None:
            raise InvalidInput(
                f"{path!r} is not a file of the open batch uploaded in parts (declare its "
                "size when opening the batch: files above the archive's multipart threshold "
                "are uploaded in parts)"
            )
        batch_id, uid = batch.id, batch.uid
        size, part_size, upload_id = row.size, row.part_size, row.multipart_upload_id
    store = archive.store_for(zarr.embargoed)
    count = part_count(size, part_size)
    asked = _parts_of(parts, path, count)
    key = staging_object_key(zarr_id, uid, path)
    held = store.list_parts(key, upload_id) if upload_id is not None else None
    if held is None:
        staged = store.head(key)
        if staged is not None and staged.size == size:
            # assembled by an earlier ``complete`` (that failed on another file): all sent
            return PartUrls(path, size, part_size, count, [PartUrl(n, None) for n in asked])
        upload_id = _start_upload(archive, store, key, batch_id, path, upload_id)
        held = {}
    assert upload_id is not None
    expiry = archive.settings.presign_expiry
    answer = [
        PartUrl(
            n,
            None
            if held.get(n) == (md5, part_length(size, part_size, n))
            else store.presign_upload_part(key, upload_id, n, expiry, md5),
        )
        for n, md5 in asked.items()
    ]
    return PartUrls(path, size, part_size, count, answer)


def _start_upload(
    archive: Archive,
    store: ObjectStoreProtocol,
    key: str,
    batch_id: int,
    path: str,
    old: str | None,
) -> str:
    """Start the S3 upload of a big file and record it in place of *old* (gone, or None); a
    concurrent request may have won: then ours is aborted and theirs is the one."""
    started = store.create_multipart_upload(key, zarr_content_type(path))
    recorded_is_old = (
        UploadBatchFile.multipart_upload_id.is_(None)
        if old is None
        else UploadBatchFile.multipart_upload_id == old
    )
    with archive.db.write_session() as session:
        result = session.execute(
            update(UploadBatchFile)
            .where(
                UploadBatchFile.batch_id == batch_id,
                UploadBatchFile.path == path,
                recorded_is_old,
                UploadBatchFile.batch_id.in_(
                    select(UploadBatch.id).where(UploadBatch.state == BatchState.OPEN)
                ),
            )
            .values(multipart_upload_id=started)
        )
        won = bool(getattr(result, "rowcount", 0))
    if won:
        return started
    store.abort_multipart_upload(key, started)
    with archive.db.session() as session:
        recorded = session.scalar(
            select(UploadBatchFile.multipart_upload_id).where(
                UploadBatchFile.batch_id == batch_id, UploadBatchFile.path == path
            )
        )
    if recorded is None:
        raise NoUploadInProgress("the batch was completed or cancelled meanwhile")
    return recorded


@dataclass(frozen=True)
class BigFile:
    """A big file of a batch, as :func:`assemble` needs it."""

    path: str
    size: int
    part_size: int
    upload_id: str | None


def assemble(
    store: ObjectStoreProtocol, zarr_id: str, uid: str, files: Sequence[BigFile]
) -> tuple[list[str], list[dict[str, str | None]]]:
    """``CompleteMultipartUpload`` of each big file whose parts are all there with their
    exact lengths; returns the paths assembled and the problems of the others (``{"path",
    "expected", "found"}``).  A file without an upload (never started, or assembled by an
    earlier ``complete``) is left to the staging check."""

    def one(item: BigFile) -> tuple[str | None, dict[str, str | None] | None]:
        if item.upload_id is None:
            return None, None
        key = staging_object_key(zarr_id, uid, item.path)
        held = store.list_parts(key, item.upload_id)
        if held is None:
            return None, None
        missing, wrong = missing_or_wrong_parts(
            item.size, item.part_size, {n: size for n, (_etag, size) in held.items()}
        )
        if missing or wrong:
            found = []
            if missing:
                found.append(f"{len(missing)} parts missing (first: {missing[0]})")
            if wrong:
                found.append(f"parts of the wrong length: {', '.join(map(str, wrong[:10]))}")
            expected = f"{part_count(item.size, item.part_size)} parts of {item.part_size} bytes"
            return None, {"path": item.path, "expected": expected, "found": "; ".join(found)}
        store.complete_multipart_upload(
            key, item.upload_id, sorted((n, etag) for n, (etag, _size) in held.items())
        )
        return item.path, None

    assembled: list[str] = []
    problems: list[dict[str, str | None]] = []
    for done, problem in store.map(one, files):
        if done is not None:
            assembled.append(done)
        if problem is not None:
            problems.append(problem)
    return assembled, problems


def abort_uploads(
    store: ObjectStoreProtocol, zarr_id: str, uid: str, files: Sequence[BigFile]
) -> None:
    """Abort the S3 uploads of a batch's big files (best effort: ``admin gc`` finds what is
    left)."""

    def one(item: BigFile) -> None:
        if item.upload_id is None:
            return
        try:
            store.abort_multipart_upload(
                staging_object_key(zarr_id, uid, item.path), item.upload_id
            )
        except Exception:
            log.warning("Zarr %s: could not abort the upload of %r", zarr_id, item.path)

    store.map(one, files)


# -- the verified copy into place (the apply step) ---------------------------------------------
#: What :attr:`PreparedCopy.md5` says of a copy whose parts are not what was read (their
#: CRC32s, as S3 computed them, differ from those of the read that gave the md5): the copy
#: is refused as a file whose md5 is not the declared one.
COPY_DIFFERS = "copy differs (crc32)"


@dataclass(frozen=True)
class PreparedCopy:
    """A big file copied into place, not visible yet: the multipart upload of its key in the
    Zarr, its parts, and the md5 of what was copied (:data:`COPY_DIFFERS` when the parts S3
    copied are not what was read); with the parts' CRC32s and the whole object's (base64)
    when the upload has a full-object CRC32 (``None``: S3 answered none)."""

    key: str
    upload_id: str
    parts: list[tuple[int, str]]
    md5: str
    part_crc32s: dict[int, str] | None = None
    crc32: str | None = None


def start_checked_copy(store: ObjectStoreProtocol, key: str, content_type: str, md5: str) -> str:
    """Start the multipart upload of a copy into place whose content the archive reads
    (and verifies: *md5*) as it copies: with S3's full-object CRC32 and *md5* as its
    :data:`MD5_METADATA`.  An S3 that refuses the checksum (no full-object checksums) gets
    the upload without it: the object then has no CRC32 (a client checks its md5)."""
    metadata = {MD5_METADATA: md5}
    try:
        return store.create_multipart_upload(key, content_type, metadata, full_object_crc32=True)
    except StorageUnavailable:
        raise
    except StorageError as exc:
        log.warning("S3 refused a full-object CRC32 (%s): %r is copied without one", exc, key)
        return store.create_multipart_upload(key, content_type, metadata)


def checked_copy(
    key: str,
    upload_id: str,
    copied: Sequence[tuple[int, CopiedPart]],
    read: CopyDigest,
) -> PreparedCopy:
    """The :class:`PreparedCopy` of parts *copied* (``number -> what S3 answered``) of
    content *read* as it was copied: with the CRC32s to state at completion when S3
    answered one for every part, each the CRC32 of that part as read (else the copy is not
    what was read: :data:`COPY_DIFFERS`)."""
    parts = [(number, part.etag) for number, part in copied]
    answered = {number: part.checksum_crc32 for number, part in copied if part.checksum_crc32}
    if len(answered) != len(copied):  # an upload without a CRC32: nothing to state
        return PreparedCopy(key, upload_id, parts, read.md5)
    ours = read.part_crc32s
    differ = [n for n, crc in answered.items() if n > len(ours) or ours[n - 1] != crc]
    if differ or len(ours) != len(copied):
        log.warning("copy of %r: parts %s are not what was read (CRC32)", key, differ[:10])
        return PreparedCopy(key, upload_id, parts, COPY_DIFFERS)
    return PreparedCopy(key, upload_id, parts, read.md5, answered, read.crc32)


def prepare_verified_copy(
    store: ObjectStoreProtocol,
    source_key: str,
    version_id: str | None,
    key: str,
    size: int,
    part_size: int,
    md5: str,
) -> PreparedCopy:
    """Copy a staged version to a multipart upload of *key* (``UploadPartCopy``, parts in
    parallel) while reading it once, streamed, through md5 (at the same time); nothing is
    visible until :func:`finish_verified_copy`.  On any failure the upload is aborted.

    The upload records *md5* (the declared one) as the object's :data:`MD5_METADATA`: it
    becomes visible only if that is the content's md5, so checks read it instead of the
    ETag (which is not an md5).  It has S3's full-object CRC32 (:func:`start_checked_copy`,
    :func:`checked_copy`): the read computes it too, in the same pass."""
    upload_id = start_checked_copy(store, key, zarr_content_type(key), md5)
    count = part_count(size, part_size)

    def copy(number: int) -> tuple[int, CopiedPart]:
        first = (number - 1) * part_size
        last = first + part_length(size, part_size, number) - 1
        return number, store.upload_part_copy(
            source_key, version_id, key, upload_id, number, first, last
        )

    def digest() -> CopyDigest:
        read = CopyDigest(part_size)
        for chunk in store.iter_content(source_key, version_id):
            read.update(chunk)
        return read

    started = time.perf_counter()
    try:
        with ThreadPoolExecutor(
            COPY_PARTS_PARALLEL + 1, thread_name_prefix="verified-copy"
        ) as pool:
            hashed = pool.submit(digest)
            parts = list(pool.map(copy, range(1, count + 1)))
            found = hashed.result()
    except BaseException:
        store.abort_multipart_upload(key, upload_id)
        raise
    log.info("verified copy of %r: %d bytes in %.1f s", key, size, time.perf_counter() - started)
    return checked_copy(key, upload_id, parts, found)


def finish_verified_copy(
    store: ObjectStoreProtocol, copy: PreparedCopy, *, keep: bool
) -> WrittenVersion | None:
    """Make the copy visible (*keep*: returns the version S3 made, as it answered; with
    the CRC32s the read found, which S3 checks: a refusal aborts the upload and raises
    :class:`ChecksumRefused`) or discard it (``None``)."""
    if keep:
        try:
            return store.complete_multipart(
                copy.key,
                copy.upload_id,
                copy.parts,
                part_crc32s=copy.part_crc32s,
                full_object_crc32=copy.crc32,
            )
        except ChecksumRefused:
            store.abort_multipart_upload(copy.key, copy.upload_id)
            raise
    store.abort_multipart_upload(copy.key, copy.upload_id)
    return None


class ClaimKeeper:
    """Renews an applier's claim in the background while long copies run; :attr:`lost` says
    whether it was lost meanwhile."""

    def __init__(self, renew: Callable[[], bool], every: float) -> None:
        self._renew = renew
        self._every = every
        self._stop = threading.Event()
        self.lost = False
        self._thread = threading.Thread(target=self._run, name="claim-keeper", daemon=True)

    def _run(self) -> None:
        while not self._stop.wait(self._every):
            try:
                if not self._renew():
                    self.lost = True
                    return
            except Exception:
                log.warning("could not renew an apply claim (the next renewal tries again)")

    def __enter__(self) -> ClaimKeeper:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


@dataclass(frozen=True)
class Refusal:
    batch_uid: str
    path: str
    expected_md5: str
    found_md5: str
    created_at: datetime


#: Batch uids one :func:`refusals` call looks up at most.
MAX_REFUSAL_BATCHES = 100


def refusals(
    archive: Archive,
    user: Caller | None,
    zarr_id: str,
    limit: int = 100,
    *,
    batches: Sequence[str] = (),
) -> list[Refusal]:
    """The Zarr's files refused when their batch was applied, newest first (owners only).
    With *batches* (uids, at most :data:`MAX_REFUSAL_BATCHES`): every refused file of those
    batches, oldest first, how an uploader that queued batches unverified learns which of
    them were refused."""
    if len(batches) > MAX_REFUSAL_BATCHES:
        raise InvalidInput(f"ask for at most {MAX_REFUSAL_BATCHES} batches at a time")
    zarr_id, _status = writable_zarr(archive, user, zarr_id)
    query = select(RefusedUpload).where(RefusedUpload.zarr_id == zarr_id)
    if batches:
        query = query.where(RefusedUpload.batch_uid.in_(sorted(batches))).order_by(RefusedUpload.id)
    else:
        query = query.order_by(RefusedUpload.id.desc()).limit(limit)
    with archive.db.session() as session:
        rows = session.scalars(query)
        return [
            Refusal(r.batch_uid, r.path, r.expected_md5, r.found_md5, r.created_at) for r in rows
        ]


# -- stray uploads (admin gc) -------------------------------------------------------------------
@dataclass(frozen=True)
class StrayUpload:
    key: str
    upload_id: str
    why: str


def stray_uploads(archive: Archive, store: ObjectStoreProtocol, zarr_id: str) -> list[StrayUpload]:
    """The multipart uploads of a Zarr's keys that nothing will finish: on staging keys,
    those no open batch records (a live batch's unrecorded upload only after
    :data:`UNRECORDED_GRACE`); on the Zarr's own keys, any while no batch of it is being
    applied (an apply that crashed mid-copy)."""
    with archive.db.session() as session:
        batches = {
            b.uid: b
            for b in session.scalars(select(UploadBatch).where(UploadBatch.zarr_id == zarr_id))
        }
        recorded = {
            (staging_object_key(zarr_id, b.uid, f.path), f.multipart_upload_id)
            for b in batches.values()
            if b.state == BatchState.OPEN
            for f in b.files
            if f.multipart_upload_id is not None
        }
        live_open = {uid for uid, b in batches.items() if b.state == BatchState.OPEN}
        applying = any(b.state != BatchState.OPEN for b in batches.values())
    now = datetime.now(UTC)
    stray: list[StrayUpload] = []
    root = staging_zarr_prefix(zarr_id)
    for key, upload_id, initiated in store.iter_multipart_uploads(root):
        if (key, upload_id) in recorded:
            continue
        uid = key[len(root) :].split("/", 1)[0]
        if uid in live_open:
            if initiated is not None and now - initiated.astimezone(UTC) < UNRECORDED_GRACE:
                continue
            stray.append(StrayUpload(key, upload_id, "not recorded by its open batch"))
        else:
            stray.append(StrayUpload(key, upload_id, f"batch {uid} is no longer open"))
    if not applying:
        for key, upload_id, _initiated in store.iter_multipart_uploads(zarr_prefix(zarr_id)):
            stray.append(StrayUpload(key, upload_id, "a copy into place left by a stopped apply"))
    return stray


def abort_stray(store: ObjectStoreProtocol, stray: Sequence[StrayUpload]) -> None:
    for item in stray:
        store.abort_multipart_upload(item.key, item.upload_id)


__all__ = [
    "COPY_DIFFERS",
    "BigFile",
    "ClaimKeeper",
    "PartUrl",
    "PartUrls",
    "PreparedCopy",
    "Refusal",
    "StrayUpload",
    "abort_stray",
    "abort_uploads",
    "assemble",
    "checked_copy",
    "finish_verified_copy",
    "part_urls",
    "prepare_verified_copy",
    "refusals",
    "start_checked_copy",
    "stray_uploads",
]

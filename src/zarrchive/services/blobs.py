"""Blobs: regular files (NWB/HDF5, ...) uploaded through presigned URLs.

Flow: ``initialize`` (size, md5, dandiset) -> one presigned PUT (up to
:data:`MAX_SINGLE_PUT`, signing ``Content-MD5`` so S3 refuses any other body)
or an S3 multipart upload with a presigned URL per part (beyond, up to
:data:`MAX_BLOB_SIZE`) -> ``complete`` (multipart only: assemble the parts) ->
``validate``, which checks size and md5 and yields the ``blob_id``.

Verification: a single PUT's ETag is the md5 of its body (and the URL signed the
md5), so ``HEAD`` is enough.  A multipart object's ETag is not an md5 (it is the
md5 of the parts' md5s), and no composition of part digests yields the whole
file's md5, so ``validate`` reads the object once, streamed, and hashes it
(cost: one read of the object; it runs in the request).

Dedup: a blob is stored once per (md5, size) and bucket.  ``initialize``
answers an existing blob's id at once for public content, and for embargoed
content only when the caller can already read a dandiset using it (an md5 must
not be a key to someone else's embargoed data); otherwise ``validate`` notices
the duplicate (the caller has then proved to hold the content), removes the new
object and answers the existing blob's id.
"""

from __future__ import annotations

import hashlib
import logging
import math
import uuid
from dataclasses import dataclass

from sqlalchemy import delete, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from zarrchive.checksum import validate_md5
from zarrchive.db.models import (
    Asset,
    Blob,
    BlobUpload,
    BlobValidation,
    DandisetOwner,
    User,
    Version,
)
from zarrchive.errors import InvalidInput, NotFound, UploadVerificationFailed
from zarrchive.services.auth import require_owner, require_user
from zarrchive.services.dandisets import get_dandiset
from zarrchive.services.runtime import Archive, current_archive
from zarrchive.storage.keys import blob_key
from zarrchive.storage.objects import ObjectStore

log = logging.getLogger(__name__)

#: Larger blobs are uploaded in parts (S3 allows single PUTs up to 5 GiB).  Tests lower it.
MAX_SINGLE_PUT = 5 * 1024**3
#: The largest blob (S3's largest object).
MAX_BLOB_SIZE = 5 * 1024**4
#: The size of every part but the last, unless the part count limit needs larger parts.
DEFAULT_PART_SIZE = 64 * 1024**2
#: S3's limit on the number of parts.
MAX_PARTS = 10_000


@dataclass(frozen=True)
class PartUrl:
    part_number: int
    size: int
    upload_url: str


@dataclass(frozen=True)
class UploadPlan:
    """What ``initialize`` answers: an existing ``blob_id``, or where to upload."""

    upload_id: str | None
    blob_id: str | None
    multipart: bool
    part_size: int | None
    parts: list[PartUrl]


@dataclass(frozen=True)
class BlobInfo:
    blob_id: str
    md5: str
    size: int


def part_size_for(size: int) -> int:
    return max(DEFAULT_PART_SIZE, math.ceil(size / MAX_PARTS))


def _store(archive: Archive, embargoed: bool) -> ObjectStore:
    return archive.embargo_store if embargoed else archive.store


def _owns_a_user_of(session: Session, user: User, blob: Blob) -> bool:
    """True if *user* is an admin or owns a dandiset with an asset of *blob*."""
    if user.is_admin:
        return True
    found = session.scalar(
        select(Asset.id)
        .join(Version, Version.id == Asset.version_id)
        .join(DandisetOwner, DandisetOwner.dandiset_id == Version.dandiset_id)
        .where(Asset.blob_id == blob.id, DandisetOwner.user_id == user.id)
        .limit(1)
    )
    return found is not None


def initialize(
    archive: Archive, user: User | None, dandiset_id: str, size: int, md5: str
) -> UploadPlan:
    """Start uploading a file of *size* bytes with *md5* to *dandiset_id* (owners only)."""
    md5 = validate_md5(md5)
    if not 0 <= size <= MAX_BLOB_SIZE:
        raise InvalidInput(f"size must be between 0 and {MAX_BLOB_SIZE} bytes (5 TiB)")
    with archive.db.write_session() as session:
        dandiset = get_dandiset(session, user, dandiset_id)
        owner = require_owner(user, dandiset)
        embargoed = dandiset.embargoed
        existing = session.scalar(
            select(Blob).where(Blob.md5 == md5, Blob.size == size, Blob.embargoed == embargoed)
        )
        if existing is not None and (not embargoed or _owns_a_user_of(session, owner, existing)):
            return UploadPlan(None, existing.id, False, None, [])
        upload_id = str(uuid.uuid4())
        key = blob_key(upload_id)
        store = _store(archive, embargoed)
        expiry = archive.settings.presign_expiry
        multipart_id: str | None = None
        part_size: int | None = None
        if size > MAX_SINGLE_PUT:
            part_size = part_size_for(size)
            multipart_id = store.create_multipart_upload(key)
            count = math.ceil(size / part_size)
            parts = [
                PartUrl(
                    n,
                    min(part_size, size - (n - 1) * part_size),
                    store.presign_upload_part(key, multipart_id, n, expiry),
                )
                for n in range(1, count + 1)
            ]
        else:
            parts = [PartUrl(1, size, store.presign_put(key, md5, expiry))]
        session.add(
            BlobUpload(
                id=upload_id,
                md5=md5,
                size=size,
                key=key,
                embargoed=embargoed,
                multipart_upload_id=multipart_id,
                part_size=part_size,
                created_by=owner.id,
            )
        )
        return UploadPlan(upload_id, None, multipart_id is not None, part_size, parts)


def _get_upload(
    session: Session, user: User | None, upload_id: str, *, lock: bool = False
) -> BlobUpload:
    """The upload, if *user* started it (or is an admin); else :class:`NotFound`.  *lock*
    takes its row lock (validate and cancel serialise on it)."""
    user = require_user(user)
    try:
        key = str(uuid.UUID(upload_id))
    except (ValueError, AttributeError, TypeError):
        raise NotFound(f"no upload {upload_id!r}: upload ids are UUIDs") from None
    upload = session.get(BlobUpload, key, with_for_update=lock)
    if upload is None or (upload.created_by != user.id and not user.is_admin):
        raise NotFound(f"no upload {upload_id} (validated, cancelled, or never started)")
    session.expunge(upload)
    return upload


def complete(
    archive: Archive, user: User | None, upload_id: str, parts: list[tuple[int, str]]
) -> str:
    """Assemble a multipart upload from ``(part_number, etag)``; returns its S3 ETag."""
    with archive.db.session() as session:
        upload = _get_upload(session, user, upload_id)
    if upload.multipart_upload_id is None or upload.part_size is None:
        raise InvalidInput(
            f"upload {upload.id} is a single PUT: it needs no completion, validate it "
            f"(POST /api/uploads/{upload.id}/validate/)"
        )
    expected = math.ceil(upload.size / upload.part_size)
    numbers = sorted(n for n, _ in parts)
    if numbers != list(range(1, expected + 1)):
        raise InvalidInput(
            f"upload {upload.id} has {expected} parts: list each of 1..{expected} once "
            "with the ETag S3 answered to its PUT"
        )
    checked = sorted((n, validate_md5(e)) for n, e in parts)
    store = _store(archive, upload.embargoed)
    return store.complete_multipart_upload(upload.key, upload.multipart_upload_id, checked)


def _discard(store: ObjectStore, upload: BlobUpload) -> None:
    if upload.multipart_upload_id is not None:
        store.abort_multipart_upload(upload.key, upload.multipart_upload_id)
    store.delete_all_versions(upload.key)


def cancel(archive: Archive, user: User | None, upload_id: str) -> None:
    """Abandon an upload: its parts or object are removed."""
    with archive.db.write_session() as session:
        upload = _get_upload(session, user, upload_id, lock=True)
        removed = session.execute(delete(BlobUpload).where(BlobUpload.id == upload.id))
        if removed.rowcount != 1:  # type: ignore[attr-defined]
            # validated meanwhile: its object is a blob now and must stay
            raise NotFound(f"no upload {upload_id} (validated meanwhile)")
    _discard(_store(archive, upload.embargoed), upload)


def _md5_of(store: ObjectStore, key: str, version_id: str | None) -> str:
    digest = hashlib.md5()
    for chunk in store.iter_content(key, version_id):
        digest.update(chunk)
    return digest.hexdigest()


VALIDATE_JOB = "zarrchive.services.blobs:validate_upload_job"


def validate(archive: Archive, user: User | None, upload_id: str) -> BlobInfo | None:
    """Check the uploaded object's size and md5 and record it as a blob (deduplicated).

    A single PUT is checked at once (S3's ETag is its md5).  A multipart object must be read
    and hashed: with a job queue that runs in the background and this answers ``None``
    ("validating": ask again); the next call after the job answers its outcome.
    """
    failure: str | None = None
    with archive.db.write_session() as session:
        upload = _get_upload(session, user, upload_id, lock=True)
        if upload.validation in (BlobValidation.FAILED, BlobValidation.VALID):
            # the background job's outcome, told once: the upload is then forgotten
            session.execute(delete(BlobUpload).where(BlobUpload.id == upload.id))
            if upload.validation == BlobValidation.VALID:
                blob = session.get(Blob, upload.validated_blob_id)
                if blob is None:
                    raise NotFound(f"the blob of upload {upload_id} is gone")
                return BlobInfo(blob.id, blob.md5, blob.size)
            failure = upload.validation_error or "the upload did not match what was announced"
        elif upload.validation == BlobValidation.VALIDATING:
            return None
    if failure is not None:
        raise UploadVerificationFailed(failure)
    with archive.db.write_session() as session:
        upload = _get_upload(session, user, upload_id, lock=True)
        if upload.validation is not None:
            return None  # validated concurrently: ask again
        background = upload.multipart_upload_id is not None and archive.jobs is not None
        if background:
            session.execute(
                update(BlobUpload)
                .where(BlobUpload.id == upload.id)
                .values(validation=BlobValidation.VALIDATING)
            )
    if background:
        assert archive.jobs is not None
        archive.jobs.enqueue(VALIDATE_JOB, {"upload_id": upload.id}, key=f"validate:{upload.id}")
        return None
    return _validate_now(archive, upload, background=False)


def validate_upload_job(upload_id: str) -> None:
    """The background validation of a multipart upload (see :func:`validate`)."""
    archive = current_archive()
    with archive.db.session() as session:
        upload = session.get(BlobUpload, upload_id)
        if upload is None or upload.validation != BlobValidation.VALIDATING:
            return
        session.expunge(upload)
    try:
        _validate_now(archive, upload, background=True)
    except UploadVerificationFailed:
        log.info("upload %s did not match what was announced", upload_id)


def _validate_now(archive: Archive, upload: BlobUpload, *, background: bool) -> BlobInfo:
    """Check the object of *upload* and record its blob.  On a mismatch the object is
    removed and the upload forgotten, or *in the background* the outcome is kept so that the
    client's next validate hears why."""
    store = _store(archive, upload.embargoed)
    head = store.head(upload.key)
    if head is None:
        todo = (
            "PUT every part, then complete it (POST .../complete/)"
            if upload.multipart_upload_id
            else "PUT the file to its URL"
        )
        raise InvalidInput(f"upload {upload.id} has nothing in S3 yet: {todo}, then validate")
    found_md5 = head.etag if upload.multipart_upload_id is None else None
    if head.size == upload.size and found_md5 is None:
        found_md5 = _md5_of(store, upload.key, head.version_id)
    if head.size != upload.size or found_md5 != upload.md5:
        message = (
            f"upload {upload.id} does not match what was announced: expected {upload.size} "
            f"bytes with md5 {upload.md5}, found {head.size} bytes"
            + (f" with md5 {found_md5}" if found_md5 else "")
            + "; the object was removed: start again (POST /api/uploads/initialize/)"
        )
        with archive.db.write_session() as session:
            if background:
                session.execute(
                    update(BlobUpload)
                    .where(BlobUpload.id == upload.id)
                    .values(validation=BlobValidation.FAILED, validation_error=message)
                )
            else:
                session.execute(delete(BlobUpload).where(BlobUpload.id == upload.id))
        _discard(store, upload)
        raise UploadVerificationFailed(
            message,
            detail={
                "message": "upload verification failed",
                "expected": {"size": upload.size, "md5": upload.md5},
                "found": {"size": head.size, "md5": found_md5},
            },
        )
    duplicate = False
    with archive.db.write_session() as session:
        # the row lock: a concurrent cancel either removed the upload before (then nothing
        # is recorded) or waits and then finds it gone (then it discards nothing)
        if session.get(BlobUpload, upload.id, with_for_update=True) is None:
            done = session.get(Blob, upload.id)
            if done is None:
                raise NotFound(f"no upload {upload.id} (validated or cancelled meanwhile)")
            return BlobInfo(done.id, done.md5, done.size)
        blob = _same_content(session, upload)
        if blob is None:
            try:
                with session.begin_nested():
                    blob = Blob(
                        id=upload.id,
                        md5=upload.md5,
                        size=upload.size,
                        key=upload.key,
                        embargoed=upload.embargoed,
                    )
                    session.add(blob)
            except IntegrityError:  # the same content validated concurrently
                blob = _same_content(session, upload)
                assert blob is not None
        duplicate = blob.id != upload.id
        if background:  # in the background: keep the outcome for the client's next ask
            session.execute(
                update(BlobUpload)
                .where(BlobUpload.id == upload.id)
                .values(validation=BlobValidation.VALID, validated_blob_id=blob.id)
            )
        else:
            session.execute(delete(BlobUpload).where(BlobUpload.id == upload.id))
        info = BlobInfo(blob.id, blob.md5, blob.size)
    if duplicate:
        store.delete_all_versions(upload.key)
    return info


def _same_content(session: Session, upload: BlobUpload) -> Blob | None:
    return session.scalar(
        select(Blob).where(
            Blob.md5 == upload.md5, Blob.size == upload.size, Blob.embargoed == upload.embargoed
        )
    )


def blob_url(archive: Archive, blob: Blob) -> str:
    """Where to download *blob*: its plain URL if public, a presigned GET if embargoed."""
    if blob.embargoed:
        return archive.embargo_store.presign_get(blob.key, archive.settings.presign_expiry)
    return archive.store.public_url(blob.key)

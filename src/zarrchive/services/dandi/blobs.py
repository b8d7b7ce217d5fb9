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

DANDI's flow (:func:`initialize_dandi`): the client announces the file's ``dandi:dandi-etag``
and size; the answer is always an S3 multipart upload cut by DANDI's part rule
(:mod:`zarrchive.checksum.dandi_etag`), one presigned URL per part; ``complete`` answers a
presigned ``CompleteMultipartUpload`` URL and its XML body, which the client POSTs to S3
itself; ``validate`` then compares S3's ETag of the assembled object (which S3 computes from
the parts it received: it *is* the dandi-etag) and the size with what was announced, at
once, without reading the object.  Such blobs have no md5.

Dedup: a blob is stored once per (md5, size) and bucket, or per dandi-etag and bucket.  Content
is the same only by a real digest match (:func:`compare_content`): an equal md5 or dandi-etag
and the same size, no digest known on both sides differing; a missing (NULL) digest matches
nothing.  ``initialize`` answers an existing blob's id at once for public content, and for
embargoed content only when the caller may read it (:func:`may_read_blob`: an md5 must not be a
key to someone else's embargoed data); otherwise ``validate`` notices the duplicate (the caller
has then proved to hold the content), removes the new object and answers the existing blob's id.

Who may read an embargoed blob (download it, or make it the content of an asset): admins, the
owners of a dandiset with an asset of it, and whoever uploaded it.  A validated upload's row is
kept as that receipt (``validation`` ``valid``, ``validated_blob_id``): asking to validate it
again answers the same blob, and it can no longer be cancelled.
"""

from __future__ import annotations

import hashlib
import logging
import math
import uuid
from dataclasses import dataclass, fields
from enum import StrEnum

from sqlalchemy import delete, or_, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from zarrchive.checksum import validate_md5
from zarrchive.checksum.dandi_etag import (
    DandiETagHasher,
    part_plan,
    single_part_etag,
    validate_dandi_etag,
)
from zarrchive.content_types import BINARY
from zarrchive.db.models import (
    Asset,
    Blob,
    BlobUpload,
    BlobValidation,
    DandisetOwner,
    DandisetReviewer,
    Version,
    utcnow,
)
from zarrchive.errors import Conflict, InvalidInput, NotFound, UploadVerificationFailed
from zarrchive.jobs.lanes import JobLane
from zarrchive.services.dandi import validation
from zarrchive.services.dandi.dandisets import get_dandiset
from zarrchive.services.identity.auth import Caller, require_owner, require_writer
from zarrchive.services.runtime import Archive, current_archive
from zarrchive.storage.keys import blob_key
from zarrchive.storage.protocol import ObjectStoreProtocol

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
    md5: str | None
    size: int
    etag: str | None = None


@dataclass(frozen=True)
class DandiUploadPlan:
    """What DANDI's ``initialize`` answers: an existing ``blob_id`` (409), or the parts."""

    upload_id: str | None
    blob_id: str | None
    parts: list[PartUrl]


@dataclass(frozen=True)
class Completion:
    """Where and what to POST to S3 to assemble a DANDI upload's parts."""

    complete_url: str
    body: str


def part_size_for(size: int) -> int:
    return max(DEFAULT_PART_SIZE, math.ceil(size / MAX_PARTS))


@dataclass(frozen=True)
class Digests:
    """What identifies a blob's content: its size and the digests known of it (``None``:
    unknown, e.g. the md5 of a blob uploaded DANDI's way)."""

    size: int
    md5: str | None
    etag: str | None

    @classmethod
    def of(cls, blob: Blob) -> Digests:
        return cls(blob.size, blob.md5, blob.etag)


class ContentMatch(StrEnum):
    """How two blobs' digests compare."""

    #: the same size, an equal digest, and no digest known on both sides differing
    SAME = "same"
    #: another size, or no digest known on both sides (an unknown digest matches nothing)
    DIFFERENT = "different"
    #: one digest equal and another different: a digest collision, never taken as the same
    CONFLICT = "conflict"


def compare_content(a: Digests, b: Digests) -> ContentMatch:
    """Whether *a* and *b* are the same bytes, judged by digests only."""
    if a.size != b.size:
        return ContentMatch.DIFFERENT
    known = [
        (x, y) for x, y in ((a.md5, b.md5), (a.etag, b.etag)) if x is not None and y is not None
    ]
    equal = sum(x == y for x, y in known)
    if equal == 0:
        return ContentMatch.DIFFERENT
    return ContentMatch.SAME if equal == len(known) else ContentMatch.CONFLICT


def stored_twin(session: Session, digests: Digests, *, embargoed: bool) -> Blob | None:
    """The blob of the bucket (*embargoed* or public) with the same content as *digests*
    (:func:`compare_content`), or ``None``; :class:`Conflict` if a blob there shares a digest
    but differs in another (a collision: neither is ever taken for the other)."""
    candidates = [
        column == value
        for column, value in ((Blob.md5, digests.md5), (Blob.etag, digests.etag))
        if value is not None  # never `IS NULL`: an unknown digest matches nothing
    ]
    if not candidates:
        return None
    query = (
        select(Blob)
        .where(or_(*candidates), Blob.size == digests.size, Blob.embargoed.is_(embargoed))
        .order_by(Blob.created_at, Blob.id)
    )
    for blob in session.scalars(query):
        match = compare_content(digests, Digests.of(blob))
        if match == ContentMatch.CONFLICT:
            raise Conflict(
                f"a stored file of {digests.size} bytes shares a digest with this content but "
                "differs in another (a digest collision): it is refused"
            )
        if match == ContentMatch.SAME:
            blob.touched_at = utcnow()  # given to an uploader: kept from gc (blob_gc.py)
            return blob
    return None


def _owns_a_user_of(session: Session, user: Caller, blob: Blob) -> bool:
    """True if *user* owns or reviews a dandiset with an asset of *blob*."""
    for members in (DandisetOwner, DandisetReviewer):
        found = session.scalar(
            select(Asset.id)
            .join(Version, Version.id == Asset.version_id)
            .join(members, members.dandiset_id == Version.dandiset_id)
            .where(Asset.blob_id == blob.id, members.user_id == user.id)
            .limit(1)
        )
        if found is not None:
            return True
    return False


def _uploaded(session: Session, user: Caller, blob: Blob) -> bool:
    """True if a validated upload of *user* answered *blob* (its own new object, or the
    stored blob of the same content: the upload proved *user* holds the bytes)."""
    receipt = session.get(BlobUpload, blob.id)  # the upload that stored the blob: its id
    if (
        receipt is not None
        and receipt.created_by == user.id
        and receipt.validated_blob_id == blob.id
    ):
        return True
    found = session.scalar(
        select(BlobUpload.id)
        .where(
            BlobUpload.validated_blob_id == blob.id,
            BlobUpload.created_by == user.id,
            BlobUpload.validation == BlobValidation.VALID,
        )
        .limit(1)
    )
    return found is not None


def may_read_blob(session: Session, user: Caller | None, blob: Blob) -> bool:
    """Public blobs: anyone.  Embargoed ones: admins, owners and reviewers of a dandiset
    using them, and who uploaded them (of approved accounts); a blob id alone (it is in
    presigned download URLs) grants nothing."""
    if not blob.embargoed:
        return True
    if user is None or not user.approved:
        return False
    return user.is_admin or _owns_a_user_of(session, user, blob) or _uploaded(session, user, blob)


def initialize(
    archive: Archive, user: Caller | None, dandiset_id: str, size: int, md5: str
) -> UploadPlan:
    """Start uploading a file of *size* bytes with *md5* to *dandiset_id* (owners only)."""
    md5 = validate_md5(md5)
    if not 0 <= size <= MAX_BLOB_SIZE:
        raise InvalidInput(f"size must be between 0 and {MAX_BLOB_SIZE} bytes (5 TiB)")
    with archive.db.write_session() as session:
        dandiset = get_dandiset(session, user, dandiset_id)
        owner = require_owner(user, dandiset)
        embargoed = dandiset.embargoed
        digests = Digests(size, md5, _etag_of_one_part(md5, size))
        existing = stored_twin(session, digests, embargoed=embargoed)
        if existing is not None and may_read_blob(session, owner, existing):
            return UploadPlan(None, existing.id, False, None, [])
        upload_id = str(uuid.uuid4())
        key = blob_key(upload_id)
        store = archive.store_for(embargoed)
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
            parts = [PartUrl(1, size, store.presign_put(key, md5, expiry, BINARY))]
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


def initialize_dandi(
    archive: Archive, user: Caller | None, dandiset_id: str, size: int, etag: str
) -> DandiUploadPlan:
    """DANDI's upload of a file of *size* bytes with dandi-etag *etag* to *dandiset_id*
    (owners only): an existing blob with that etag, or a multipart upload by DANDI's parts."""
    if not isinstance(size, int) or not 0 <= size <= MAX_BLOB_SIZE:
        raise InvalidInput(f"contentSize must be between 0 and {MAX_BLOB_SIZE} bytes (5 TiB)")
    etag = validate_dandi_etag(etag, size)
    plan = part_plan(size)
    with archive.db.write_session() as session:
        dandiset = get_dandiset(session, user, dandiset_id)
        owner = require_owner(user, dandiset)
        embargoed = dandiset.embargoed
        existing = stored_twin(session, Digests(size, None, etag), embargoed=embargoed)
        if existing is not None and may_read_blob(session, owner, existing):
            return DandiUploadPlan(None, existing.id, [])
        if size == 0:
            raise InvalidInput("an empty file cannot be uploaded in parts: DANDI has none")
        upload_id = str(uuid.uuid4())
        key = blob_key(upload_id)
        store = archive.store_for(embargoed)
        expiry = archive.settings.presign_expiry
        multipart_id = store.create_multipart_upload(key)
        parts = [
            PartUrl(
                part.number,
                part.size,
                store.presign_upload_part(key, multipart_id, part.number, expiry),
            )
            for part in plan.parts()
        ]
        session.add(
            BlobUpload(
                id=upload_id,
                md5=None,
                etag=etag,
                size=size,
                key=key,
                embargoed=embargoed,
                multipart_upload_id=multipart_id,
                part_size=plan.part_size,
                created_by=owner.id,
            )
        )
        return DandiUploadPlan(upload_id, None, parts)


def complete_dandi(
    archive: Archive, user: Caller | None, upload_id: str, parts: list[tuple[int, str]]
) -> Completion:
    """The presigned ``CompleteMultipartUpload`` of a DANDI upload and its XML body, for the
    client to POST to S3 itself (parts are ``(part_number, etag)``)."""
    with archive.db.session() as session:
        upload = _get_upload(session, user, upload_id)
    _refuse_after_validation(upload, "complete")
    if upload.etag is None or upload.multipart_upload_id is None:
        raise InvalidInput(
            f"upload {upload.id} was not started with a dandi-etag: complete it with "
            "[{part_number, etag}] and the archive assembles it"
        )
    expected = part_plan(upload.size).count
    checked = _checked_parts(upload.id, expected, parts)
    store = archive.store_for(upload.embargoed)
    url = store.presign_complete_multipart(
        upload.key, upload.multipart_upload_id, archive.settings.presign_expiry
    )
    body = "".join(
        f'<Part><PartNumber>{n}</PartNumber><ETag>"{e}"</ETag></Part>' for n, e in checked
    )
    return Completion(url, f"<CompleteMultipartUpload>{body}</CompleteMultipartUpload>")


def _checked_parts(
    upload_id: str, expected: int, parts: list[tuple[int, str]]
) -> list[tuple[int, str]]:
    numbers = sorted(n for n, _ in parts)
    if numbers != list(range(1, expected + 1)):
        raise InvalidInput(
            f"upload {upload_id} has {expected} parts: list each of 1..{expected} once "
            "with the ETag S3 answered to its PUT"
        )
    return sorted((n, validate_md5(e)) for n, e in parts)


@dataclass(frozen=True)
class _Upload:
    """A row of ``blob_uploads`` as read (what the S3 side of an upload needs after the
    session)."""

    id: str
    md5: str | None
    etag: str | None
    size: int
    key: str
    embargoed: bool
    multipart_upload_id: str | None
    part_size: int | None
    validation: str | None
    validation_error: str | None
    validated_blob_id: str | None

    @classmethod
    def of(cls, row: BlobUpload) -> _Upload:
        return cls(**{f.name: getattr(row, f.name) for f in fields(cls)})


def _get_upload(
    session: Session, user: Caller | None, upload_id: str, *, lock: bool = False
) -> _Upload:
    """The upload, if *user* started it (or is an admin); else :class:`NotFound`.  *lock*
    takes its row lock (validate and cancel serialise on it).  Every use of it changes
    something: *user* must be a writer."""
    user = require_writer(user)
    try:
        key = str(uuid.UUID(upload_id))
    except (ValueError, AttributeError, TypeError):
        raise NotFound(f"no upload {upload_id!r}: upload ids are UUIDs") from None
    upload = session.get(BlobUpload, key, with_for_update=lock)
    if upload is None or (upload.created_by != user.id and not user.is_admin):
        raise NotFound(f"no upload {upload_id} (validated, cancelled, or never started)")
    return _Upload.of(upload)


def complete(
    archive: Archive, user: Caller | None, upload_id: str, parts: list[tuple[int, str]]
) -> str | Completion:
    """Finish the parts ``(part_number, etag)`` of a multipart upload: ours are assembled
    here (answers the object's S3 ETag); DANDI's answer the :class:`Completion` the client
    POSTs to S3 itself."""
    with archive.db.session() as session:
        upload = _get_upload(session, user, upload_id)
    _refuse_after_validation(upload, "complete")
    if upload.etag is not None:
        return complete_dandi(archive, user, upload_id, parts)
    if upload.multipart_upload_id is None or upload.part_size is None:
        raise InvalidInput(
            f"upload {upload.id} is a single PUT: it needs no completion, validate it "
            f"(POST /api/uploads/{upload.id}/validate/)"
        )
    checked = _checked_parts(upload.id, math.ceil(upload.size / upload.part_size), parts)
    store = archive.store_for(upload.embargoed)
    return store.complete_multipart_upload(upload.key, upload.multipart_upload_id, checked)


def _refuse_after_validation(upload: _Upload, what: str) -> None:
    """An upload asked to validate is past completing and cancelling."""
    if upload.validation == BlobValidation.VALID:
        raise NotFound(
            f"upload {upload.id} was validated: it is blob {upload.validated_blob_id}, "
            f"there is nothing to {what}"
        )
    if upload.validation is not None:
        raise InvalidInput(
            f"upload {upload.id} was asked to validate already: ask again to hear the outcome "
            f"(POST /api/uploads/{upload.id}/validate/) instead of asking to {what} it"
        )


def _discard(store: ObjectStoreProtocol, upload: _Upload) -> None:
    if upload.multipart_upload_id is not None:
        store.abort_multipart_upload(upload.key, upload.multipart_upload_id)
    store.delete_all_versions(upload.key)


def cancel(archive: Archive, user: Caller | None, upload_id: str) -> None:
    """Abandon an upload: its parts or object are removed."""
    with archive.db.write_session() as session:
        upload = _get_upload(session, user, upload_id, lock=True)
        if upload.validation == BlobValidation.VALID:
            # validated (maybe meanwhile): its object is a blob now and must stay
            _refuse_after_validation(upload, "cancel")
        removed = session.execute(delete(BlobUpload).where(BlobUpload.id == upload.id))
        if removed.rowcount != 1:  # type: ignore[attr-defined]
            raise NotFound(f"no upload {upload_id} (cancelled meanwhile)")
    _discard(archive.store_for(upload.embargoed), upload)


VALIDATE_JOB = "zarrchive.services.dandi.blobs:validate_upload_job"


def validate(archive: Archive, user: Caller | None, upload_id: str) -> BlobInfo | None:
    """Check the uploaded object's size and md5 and record it as a blob (deduplicated).

    A single PUT is checked at once (S3's ETag is its md5).  A multipart object must be read
    and hashed: with a job queue that runs in the background and this answers ``None``
    ("validating": ask again); the next call after the job answers its outcome.  A validated
    upload answers its blob each time it is asked (its row is the uploader's receipt, see
    :func:`may_read_blob`); a failed one is told once and then forgotten.
    """
    failure: str | None = None
    with archive.db.write_session() as session:
        upload = _get_upload(session, user, upload_id, lock=True)
        if upload.validation == BlobValidation.VALID:
            blob = session.get(Blob, upload.validated_blob_id)
            if blob is None:
                raise NotFound(f"the blob of upload {upload_id} is gone")
            return _info(blob)
        if upload.validation == BlobValidation.FAILED:
            # the background job's failure, told once: the upload is then forgotten
            session.execute(delete(BlobUpload).where(BlobUpload.id == upload.id))
            failure = upload.validation_error or "the upload did not match what was announced"
        elif upload.validation == BlobValidation.VALIDATING:
            return None
    if failure is not None:
        raise UploadVerificationFailed(failure)
    with archive.db.write_session() as session:
        upload = _get_upload(session, user, upload_id, lock=True)
        if upload.validation is not None:
            return None  # validated concurrently: ask again
        # DANDI's uploads are checked by S3's ETag at once; ours, beyond one part, are read
        background = (
            upload.multipart_upload_id is not None
            and upload.etag is None
            and archive.jobs is not None
        )
        if background:
            session.execute(
                update(BlobUpload)
                .where(BlobUpload.id == upload.id)
                .values(validation=BlobValidation.VALIDATING)
            )
    if background:
        assert archive.jobs is not None
        archive.jobs.enqueue(
            VALIDATE_JOB,
            {"upload_id": upload.id},
            key=f"validate:{upload.id}",
            lane=JobLane.CONTENT,
        )
        return None
    return _validate_now(archive, upload, background=False)


def validate_upload_job(upload_id: str) -> None:
    """The background validation of a multipart upload (see :func:`validate`)."""
    archive = current_archive()
    with archive.db.session() as session:
        row = session.get(BlobUpload, upload_id)
        if row is None or row.validation != BlobValidation.VALIDATING:
            return
        upload = _Upload.of(row)
    try:
        _validate_now(archive, upload, background=True)
    except UploadVerificationFailed:
        log.info("upload %s did not match what was announced", upload_id)


def _validate_now(archive: Archive, upload: _Upload, *, background: bool) -> BlobInfo:
    """Check the object of *upload* and record its blob.  On a mismatch the object is
    removed and the upload forgotten, or *in the background* the outcome is kept so that the
    client's next validate hears why."""
    store = archive.store_for(upload.embargoed)
    head = store.head(upload.key)
    if head is None:
        todo = (
            "PUT every part, then complete it (POST .../complete/)"
            if upload.multipart_upload_id
            else "PUT the file to its URL"
        )
        raise InvalidInput(f"upload {upload.id} has nothing in S3 yet: {todo}, then validate")
    found_md5: str | None = None
    found_etag: str | None = None
    if upload.etag is not None:  # DANDI's: S3's ETag of the assembled parts is the etag
        found_etag = head.etag.strip('"')
        wanted, found = f"dandi-etag {upload.etag}", f" with dandi-etag {found_etag}"
        matches = head.size == upload.size and found_etag == upload.etag
    else:
        found_md5 = head.etag if upload.multipart_upload_id is None else None
        if head.size == upload.size and (found_md5 is None or head.size > ONE_PART):
            found_md5, found_etag = _digests_of(store, upload.key, head.version_id, head.size)
        elif found_md5 is not None and head.size == upload.size:
            found_etag = _etag_of_one_part(found_md5, head.size)
        wanted, found = f"md5 {upload.md5}", f" with md5 {found_md5}" if found_md5 else ""
        matches = head.size == upload.size and found_md5 == upload.md5
    if not matches:
        kind = "etag" if upload.etag is not None else "md5"
        message = (
            f"upload {upload.id} does not match what was announced: expected {upload.size} "
            f"bytes with {wanted}, found {head.size} bytes{found}"
            "; the object was removed: start again (POST /api/uploads/initialize/)"
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
                "expected": {"size": upload.size, kind: upload.etag or upload.md5},
                "found": {"size": head.size, kind: found_etag if upload.etag else found_md5},
            },
        )
    duplicate = False
    with archive.db.write_session() as session:
        # the row lock: a concurrent cancel either removed the upload before (then nothing
        # is recorded) or waits and then finds it gone (then it discards nothing)
        row = session.get(BlobUpload, upload.id, with_for_update=True)
        if row is None:
            raise NotFound(f"no upload {upload.id} (cancelled meanwhile)")
        if row.validation == BlobValidation.VALID:  # validated meanwhile by another request
            done = session.get(Blob, row.validated_blob_id)
            if done is None:
                raise NotFound(f"the blob of upload {upload.id} is gone")
            return _info(done)
        blob = _same_content(session, upload, found_etag)
        if blob is None:
            try:
                with session.begin_nested():
                    blob = Blob(
                        id=upload.id,
                        md5=upload.md5,
                        etag=found_etag,
                        size=upload.size,
                        key=upload.key,
                        embargoed=upload.embargoed,
                    )
                    session.add(blob)
            except IntegrityError:  # the same content validated concurrently
                blob = _same_content(session, upload, found_etag)
                assert blob is not None
        duplicate = blob.id != upload.id
        # the outcome, kept: the client's next ask (in the background) and the receipt that
        # the uploader holds the blob's bytes (who may make it an asset: may_read_blob)
        session.execute(
            update(BlobUpload)
            .where(BlobUpload.id == upload.id)
            .values(validation=BlobValidation.VALID, validated_blob_id=blob.id)
        )
        info = _info(blob)
    if duplicate:
        store.delete_all_versions(upload.key)
    validation.queue_blob_sha256(archive, info.blob_id)  # dandi:sha2-256, in the background
    return info


def _same_content(session: Session, upload: _Upload, etag: str | None) -> Blob | None:
    """A blob of the same bucket with the same content (:func:`stored_twin`)."""
    return stored_twin(session, Digests(upload.size, upload.md5, etag), embargoed=upload.embargoed)


#: Files up to this size are one part: their dandi-etag follows from their md5.
ONE_PART = 64 * 1024**2


def _etag_of_one_part(md5: str, size: int) -> str | None:
    if size == 0:
        return hashlib.md5(b"").hexdigest() + "-0"
    return single_part_etag(md5) if size <= ONE_PART else None


def _digests_of(
    store: ObjectStoreProtocol, key: str, version_id: str | None, size: int
) -> tuple[str, str]:
    """The md5 and dandi-etag of an object of *size* bytes (one read)."""
    md5 = hashlib.md5()
    etag = DandiETagHasher(size)
    for chunk in store.iter_content(key, version_id):
        md5.update(chunk)
        etag.update(chunk)
    return md5.hexdigest(), etag.hexdigest()


def _info(blob: Blob) -> BlobInfo:
    return BlobInfo(blob.id, blob.md5, blob.size, blob.etag)


def digest_lookup(archive: Archive, user: Caller | None, algorithm: str, value: str) -> BlobInfo:
    """DANDI's ``POST /api/blobs/digest/``: the public blob with this digest (embargoed ones
    only for a user who may read them: :func:`may_read_blob`)."""
    if algorithm == "dandi:dandi-etag":
        value = validate_dandi_etag(value)
        condition = Blob.etag == value
    elif algorithm in ("dandi:md5", "md5"):
        value = validate_md5(value)
        condition = Blob.md5 == value
    else:
        raise InvalidInput(
            f"unknown digest algorithm {algorithm!r}: use 'dandi:dandi-etag' or 'dandi:md5'"
        )
    with archive.db.session() as session:
        for blob in session.scalars(select(Blob).where(condition)):
            if may_read_blob(session, user, blob):
                return _info(blob)
    raise NotFound(f"no blob with {algorithm} {value}")


def blob_url(archive: Archive, key: str, *, embargoed: bool) -> str:
    """Where to download the blob stored at *key*: its plain URL if public, a presigned GET
    if embargoed."""
    if embargoed:
        return archive.embargo_store.presign_get(key, archive.settings.presign_expiry)
    return archive.store.public_url(key)

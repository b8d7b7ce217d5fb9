"""Server-side import: files of an open upload batch brought in from a source bucket by the
archive's own copies, instead of the uploader PUTting them (``zarrchive upload s3://...``).

The uploader opens a batch as for any upload (paths and md5s: the source objects' ETags),
then ``POST /api/zarr/{id}/upload/import/`` names the source bucket and prefix and, per file,
the ETag (and version) it listed.  The archive copies nothing then: it records the sources
(:func:`record_sources`: one small object in the batch's staging area,
``zarr-staging/{zarr}/{batch}/.checksum/imports/{digest}.json``, a key no Zarr file can have:
``.checksum`` is a reserved segment) and fills in the sizes the batch lacks (``HeadObject``
with ``If-Match``).  The apply then copies each source object **straight into place**
(:func:`copy_imported`: one ``CopyObject`` per file, ``x-amz-copy-source-if-match`` the
listed ETag, at the listed version if one was given), as it copies staged files: one copy
per file, as a local upload's one PUT.  From ``complete`` on it is the same batch (queued
with ``verify=apply``: the staged files checked, the tree, the records, the manifests).

What may be read (:mod:`.import_rules`): only a bucket the operator listed in
``ZARRCHIVE_IMPORT_BUCKETS`` (with its prefix), never the archive's own buckets, and for each
file only ``{prefix}/{path}`` with *path* one of the batch's checked paths.  Only the batch's
uploader may import into it, and only while it is open (or opened ahead).

A source object that changed since it was listed: the ``HeadObject`` of the request (for a
file whose size it needs) answers 412, and the request is refused whole (409, naming the
files); later, S3 refuses the apply's conditional copy (412, or 404 once gone): the apply
then deletes the versions its copies of the batch made (the keys are as before) and refuses
the batch whole (:class:`~zarrchive.db.models.RefusedUpload`, ``found_md5`` "source
changed"), which the uploader learns as for any batch queued ``verify=apply``.  Even on an
S3 that ignored the condition, the copy's ETag is the new content's md5, not the batch's, and
the apply refuses it the same way: a file is never recorded with an md5 it does not have.

An object whose ETag is not an md5 (uploaded in parts at the source), or above S3's 5 GiB
limit of a ``CopyObject`` (:data:`COPY_OBJECT_LIMIT`), is copied into place in parts
(``UploadPartCopy``, :func:`prepare_imported_copy`; parts of the size a big upload's would
have, by the archive's ``multipart_threshold``) while one streamed read of the source hashes
it, as the apply copies a big uploaded file: the copy becomes visible only if its md5 is the
batch's, else the batch is refused whole.  Nothing is declined.  Such a copy carries S3's
full-object CRC32 and the md5 as its ``zarrchive-md5`` metadata, as a big uploaded file's
(:func:`~.multipart.start_checked_copy`, :func:`~.multipart.checked_copy`).
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError
from sqlalchemy import select

from zarrchive.db.models import BatchKind, BatchState, UploadBatch
from zarrchive.errors import (
    Conflict,
    InvalidInput,
    NoUploadInProgress,
    PermissionDenied,
    StorageError,
)
from zarrchive.paths import CHECKSUM_NODE_NAME, validate_path
from zarrchive.services.identity.auth import Caller
from zarrchive.services.runtime import Archive
from zarrchive.services.zarr_engine.uploads.import_rules import (
    archive_may_import,
    plain_md5,
    source_key,
)
from zarrchive.services.zarr_engine.uploads.multipart import (
    COPY_PARTS_PARALLEL,
    PreparedCopy,
    checked_copy,
    start_checked_copy,
)
from zarrchive.services.zarr_engine.uploads.parts import part_count, part_length
from zarrchive.services.zarr_engine.uploads.records import writable_zarr
from zarrchive.services.zarr_engine.zarrs import get_zarr
from zarrchive.storage.crc32 import CopyDigest
from zarrchive.storage.keys import staging_prefix
from zarrchive.storage.objects import (
    CopiedPart,
    ObjectInfo,
    ObjectStore,
    ObjectVersion,
    WrittenVersion,
    copied_part,
    parse_timestamp,
)
from zarrchive.storage.protocol import ObjectStoreProtocol
from zarrchive.storage.signed_copy import CopySender, S3Refused, S3Unreachable

log = logging.getLogger(__name__)

#: Requests (``HeadObject``, or the read and write of a file in parts) sent at once by one
#: import request.
COPY_THREADS = 32
#: Where a batch's sources are recorded, below its staging prefix (``.checksum`` is a
#: segment no Zarr path may have: no staged file can be there).
SOURCES_DIR = f"{CHECKSUM_NODE_NAME}/imports/"
#: What :meth:`_Reader.bring` says of a file whose source was recorded, not copied.
_RECORDED = -2


@dataclass(frozen=True)
class SourceFile:
    """A file of the batch and the source object it is copied from: the ETag (and version,
    on a versioned bucket) the uploader listed."""

    path: str
    etag: str
    version_id: str | None = None


@dataclass(frozen=True)
class ImportedSource:
    """Where the apply copies a file of a batch from: ``s3://{bucket}/{key}`` if it still
    has *etag* (at *version_id*, if given)."""

    bucket: str
    key: str
    etag: str
    version_id: str | None = None


@dataclass(frozen=True)
class ImportResult:
    """What an import request did for the batch: files whose source it recorded (copied
    into place by the apply) or read into the staging area (*copied*)."""

    batch: str
    copied: int
    bytes: int
    #: Files not brought in (the uploader sends them): none since the apply copies sources in
    #: parts (kept for the API's answer).
    declined: tuple[str, ...] = ()


class SourceChanged(Conflict):
    """A source object is no longer the one listed (another ETag or version, or gone)."""


def import_files(
    archive: Archive,
    user: Caller | None,
    zarr_id: str,
    batch_uid: str,
    bucket: str,
    prefix: str,
    files: Sequence[SourceFile],
) -> ImportResult:
    """Bring *files* of the open batch *batch_uid* (or the batch opened ahead of it) from
    ``s3://{bucket}/{prefix}/{path}``: record their sources for the apply (and the sizes the
    batch lacks), or read those in parts into the staging keys.  Raises
    :class:`PermissionDenied` (403) for a source the archive may not read,
    :class:`InvalidInput` (400) for a path not in the batch or an ETag that contradicts its
    md5, :class:`SourceChanged` (409) when a source object changed since it was listed."""
    settings = archive.settings
    zarr_id, _status = writable_zarr(archive, user, zarr_id)  # who may write it, before the source
    normalized = archive_may_import(settings, bucket, prefix)
    with archive.db.session() as session:
        zarr = get_zarr(session, user, zarr_id)
        batch = _batch_of(session, zarr.id, batch_uid, user)
        rows = {f.path: (f.etag, f.size) for f in batch.files}
        store = archive.store_for(zarr.dandiset.embargoed)
    plan: list[tuple[SourceFile, str, int | None]] = []
    problems: list[str] = []
    for item in files:
        try:
            path = validate_path(item.path)
        except InvalidInput as exc:
            problems.append(f"{item.path!r}: {exc}")
            continue
        md5, size = rows.get(path, (None, None))
        if md5 is None:
            problems.append(f"{path!r} is not a file of batch {batch_uid}")
            continue
        listed = plain_md5(item.etag)
        if listed is not None and listed != md5:
            problems.append(f"{path!r}: its source ETag {listed} is not its md5 {md5}")
            continue
        plan.append((SourceFile(path, item.etag, item.version_id), md5, size))
    if problems:
        raise InvalidInput(
            f"{len(problems)} files can't be imported: " + "; ".join(problems[:10]),
            detail={"message": "files can't be imported", "problems": problems},
        )
    if not isinstance(store, ObjectStore):
        raise PermissionDenied("server-side import needs the archive on S3: send the files")
    reader = _Reader(store, bucket, normalized)
    with ThreadPoolExecutor(COPY_THREADS, thread_name_prefix="import-copy") as pool:
        outcomes = list(pool.map(lambda job: reader.bring(*job), plan))
    changed = sorted(path for path, _size, brought in outcomes if brought is None)
    if changed:
        raise SourceChanged(
            f"{len(changed)} source objects changed since they were listed (another ETag or "
            f"version, or gone), e.g. {changed[0]!r}: cancel the batch and list the source again",
            detail={"message": "source objects changed", "paths": changed},
        )
    recorded = {item.path: item for item, _md5, _size in plan}
    sizes = {path: size for path, size, _b in outcomes if path in recorded and size is not None}
    if recorded:
        record_sources(store, zarr_id, batch_uid, bucket, normalized, list(recorded.values()))
        _fill_sizes(archive, zarr_id, batch_uid, user, sizes, rows)
    brought = [size or 0 for _path, size, b in outcomes if b is not None]
    return ImportResult(batch_uid, len(brought), sum(brought))


def _batch_of(session: Any, zarr_id: str, batch_uid: str, user: Caller | None) -> UploadBatch:
    batch = session.scalar(
        select(UploadBatch).where(UploadBatch.zarr_id == zarr_id, UploadBatch.uid == batch_uid)
    )
    if (
        batch is None
        or batch.kind != BatchKind.UPLOAD
        or batch.state != BatchState.OPEN
        or batch.created_by != (user.id if user else None)
    ):
        raise NoUploadInProgress(
            f"Zarr {zarr_id}: batch {batch_uid} is not an open upload batch of yours "
            "(completed, cancelled or never opened)"
        )
    assert isinstance(batch, UploadBatch)
    return batch


def _fill_sizes(
    archive: Archive,
    zarr_id: str,
    batch_uid: str,
    user: Caller | None,
    sizes: dict[str, int],
    rows: dict[str, tuple[str | None, int | None]],
) -> None:
    """Record the sizes the batch lacked (read from the sources): with every size known, the
    batch is queued ``verify=apply`` (the apply checks what is staged, the sources are
    checked by their copies)."""
    missing = {p: n for p, n in sizes.items() if rows.get(p, (None, None))[1] is None}
    if not missing:
        return
    with archive.db.write_session() as session:
        batch = _batch_of(session, zarr_id, batch_uid, user)
        for f in batch.files:
            if f.path in missing and f.size is None and f.part_size is None:
                f.size = missing[f.path]


def record_sources(
    store: ObjectStore,
    zarr_id: str,
    uid: str,
    bucket: str,
    prefix: str,
    files: Sequence[SourceFile],
) -> None:
    """Record where the apply copies *files* of batch *uid* from (one object in the batch's
    staging area, named by its content: a retried request writes the same one)."""
    body = json.dumps(
        {
            "bucket": bucket,
            "prefix": prefix,
            "files": [[f.path, f.etag, f.version_id] for f in sorted(files, key=_path)],
        },
        sort_keys=True,
    ).encode("utf-8")
    digest = hashlib.sha256(body).hexdigest()[:32]
    store.put(
        staging_prefix(zarr_id, uid) + f"{SOURCES_DIR}{digest}.json", body, "application/json"
    )


def _path(item: SourceFile) -> str:
    return item.path


def load_sources(store: ObjectStoreProtocol, zarr_id: str, uid: str) -> dict[str, ImportedSource]:
    """The sources :func:`record_sources` recorded for batch *uid* (``path -> source``; a path
    named by several requests: the last recorded); ``{}`` for a batch of uploaded files."""
    root = staging_prefix(zarr_id, uid) + SOURCES_DIR
    return read_sources(store, sorted(store.iter_objects(root), key=lambda o: o.last_modified))


def read_sources(
    store: ObjectStoreProtocol, objects: Sequence[ObjectInfo | ObjectVersion]
) -> dict[str, ImportedSource]:
    """The sources recorded in *objects* (keys below a batch's :data:`SOURCES_DIR`, oldest
    first: a later one wins)."""
    sources: dict[str, ImportedSource] = {}
    for info in objects:
        body = store.get(info.key)
        if body is None:
            continue
        recorded = json.loads(body)
        bucket, prefix = str(recorded["bucket"]), str(recorded["prefix"])
        for path, etag, version in recorded["files"]:
            sources[str(path)] = ImportedSource(
                bucket, source_key(prefix, str(path)), str(etag), version
            )
    return sources


class SourceRefused(Exception):
    """The apply's copy of an imported file was refused: the source changed (412) or is
    gone (404)."""


def copy_imported(
    store: ObjectStoreProtocol, source: ImportedSource, key: str, content_type: str
) -> WrittenVersion:
    """Copy the imported *source* to *key* of *store*'s bucket (one ``CopyObject``, only if
    the source still has its listed ETag); the new version as S3 answered.  Raises
    :class:`SourceRefused` when the source changed or is gone, :class:`PermissionDenied`
    when the archive can't read it (or is not on S3), :class:`StorageError` otherwise."""
    if not isinstance(store, ObjectStore):
        raise PermissionDenied("server-side import needs the archive on S3: send the files")
    where = f"s3://{source.bucket}/{source.key}"
    copier: CopySender | None = store.copier
    if copier is not None:
        try:
            answer = copier.copy(
                source.key,
                key,
                source.version_id,
                content_type=content_type,
                source_bucket=source.bucket,
                if_match=source.etag,
            )
        except S3Refused as refused:
            if refused.status in (404, 412) or refused.code in _CHANGED:
                raise SourceRefused(where) from None
            if refused.status == 403 or refused.code == "NoSuchBucket":
                raise PermissionDenied(f"the archive can't read {where} ({refused.code})") from None
            raise StorageError(f"S3 refused the copy of {where}: {refused}") from None
        except S3Unreachable as exc:
            raise StorageError(f"S3 did not answer the copy of {where}: {exc}") from None
        modified = answer.last_modified
        return WrittenVersion(
            answer.etag, answer.version_id, parse_timestamp(modified) if modified else None
        )
    copy_source: dict[str, str] = {"Bucket": source.bucket, "Key": source.key}
    if source.version_id:
        copy_source["VersionId"] = source.version_id
    client: Any = store.copy_client
    try:
        response = client.copy_object(
            Bucket=store.bucket,
            Key=key,
            CopySource=copy_source,
            CopySourceIfMatch=source.etag,
            MetadataDirective="REPLACE",
            ContentType=content_type,
        )
    except ClientError as exc:
        code = _code(exc)
        status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
        if status in (404, 412) or code in _CHANGED:
            raise SourceRefused(where) from None
        if status == 403 or code == "NoSuchBucket":
            raise PermissionDenied(f"the archive can't read {where} ({code})") from None
        raise StorageError(f"S3 refused the copy of {where}: {code} ({status})") from None
    except BotoCoreError as exc:
        raise StorageError(f"S3 did not answer the copy of {where}: {exc}") from None
    result = response.get("CopyObjectResult") or {}
    modified = result.get("LastModified")
    written = response.get("VersionId")
    return WrittenVersion(
        str(result.get("ETag", "")).strip('"'),
        str(written) if written and written != "null" else None,
        modified if isinstance(modified, datetime) else None,
    )


#: S3's largest ``CopyObject`` source (5 GiB): a bigger one is copied in parts.
COPY_OBJECT_LIMIT = 5 * 1024**3


def copied_in_parts(source: ImportedSource, size: int) -> bool:
    """Whether the apply copies *source* in parts, hashing it as it copies
    (:func:`prepare_imported_copy`): an object uploaded in parts at the source (its ETag is
    no md5: a ``CopyObject`` would not tell the copy's md5) or above
    :data:`COPY_OBJECT_LIMIT`."""
    return plain_md5(source.etag) is None or size > COPY_OBJECT_LIMIT


def prepare_imported_copy(
    store: ObjectStore,
    source: ImportedSource,
    key: str,
    size: int,
    part_size: int,
    md5: str,
    content_type: str,
) -> PreparedCopy:
    """Copy *source* to a multipart upload of *key* (``UploadPartCopy`` parts of
    *part_size*, in parallel, each only if the source still has its listed ETag) while one
    streamed read of the source (``If-Match`` too) hashes it, as the apply copies a big
    uploaded file (:func:`~.multipart.prepare_verified_copy`); nothing is visible until
    :func:`~.multipart.finish_verified_copy`, which the apply calls only if the md5 found is
    *md5* (recorded as the object's :data:`~zarrchive.storage.objects.MD5_METADATA`; the
    copy has S3's full-object CRC32, computed by the same read).  Raises
    :class:`SourceRefused` when the source changed or is gone (the upload aborted)."""
    where = f"s3://{source.bucket}/{source.key}"
    client: Any = store.copy_client
    copier: CopySender | None = store.copier
    upload_id = start_checked_copy(store, key, content_type, md5)
    count = part_count(size, part_size)

    def copy(number: int) -> tuple[int, CopiedPart]:
        first = (number - 1) * part_size
        last = first + part_length(size, part_size, number) - 1
        if copier is not None:
            answer = copier.copy_part(
                source.key,
                source.version_id,
                key,
                upload_id,
                number,
                first,
                last,
                source_bucket=source.bucket,
                if_match=source.etag,
            )
            return number, CopiedPart(answer.etag, answer.checksum_crc32)
        copy_source: dict[str, str] = {"Bucket": source.bucket, "Key": source.key}
        if source.version_id:
            copy_source["VersionId"] = source.version_id
        answer = client.upload_part_copy(
            Bucket=store.bucket,
            Key=key,
            UploadId=upload_id,
            PartNumber=number,
            CopySource=copy_source,
            CopySourceRange=f"bytes={first}-{last}",
            CopySourceIfMatch=source.etag,
        )
        return number, copied_part(answer["CopyPartResult"])

    def digest() -> CopyDigest:
        extra = {"VersionId": source.version_id} if source.version_id else {}
        body = client.get_object(
            Bucket=source.bucket, Key=source.key, IfMatch=source.etag, **extra
        )["Body"]
        found = CopyDigest(part_size)
        try:
            for chunk in body.iter_chunks(HASH_CHUNK):
                found.update(chunk)
        finally:
            body.close()
        return found

    try:
        with ThreadPoolExecutor(COPY_PARTS_PARALLEL + 1, thread_name_prefix="import-parts") as pool:
            hashed = pool.submit(digest)
            parts = list(pool.map(copy, range(1, count + 1)))
            found = hashed.result()
    except BaseException as exc:
        store.abort_multipart_upload(key, upload_id)
        if _source_changed(exc):
            raise SourceRefused(where) from None
        if isinstance(exc, S3Refused | ClientError | BotoCoreError | S3Unreachable):
            raise StorageError(f"S3 refused the copy of {where}: {exc}") from None
        raise
    return checked_copy(key, upload_id, parts, found)


#: The streamed read that hashes a source copied in parts: one chunk in memory.
HASH_CHUNK = 8 * 1024 * 1024


def _source_changed(exc: BaseException) -> bool:
    """Whether *exc* is S3 saying a source is no longer the one listed (412, 404)."""
    if isinstance(exc, S3Refused):
        return exc.status in (404, 412) or exc.code in _CHANGED
    if isinstance(exc, ClientError):
        status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
        return status in (404, 412) or _code(exc) in _CHANGED
    return False


#: S3's codes of a source that changed (or is gone) since it was listed.
_CHANGED = frozenset({"PreconditionFailed", "NoSuchKey", "NoSuchVersion", "404", "412"})


class _Reader:
    """Brings one source object in for a batch (see the module)."""

    def __init__(
        self,
        store: ObjectStore,
        bucket: str,
        prefix: str,
    ) -> None:
        self.store = store
        self.bucket = bucket
        self.prefix = prefix

    def bring(
        self, item: SourceFile, md5: str, size: int | None
    ) -> tuple[str, int | None, int | None]:
        """``(path, size, outcome)``: outcome :data:`_RECORDED` (the apply copies it; its
        size read here if the batch lacked it), or ``None``: the source changed.  (*md5*:
        the batch's, which the apply's copy must give.)"""
        key = source_key(self.prefix, item.path)
        source: dict[str, str] = {"Bucket": self.bucket, "Key": key}
        if item.version_id:
            source["VersionId"] = item.version_id
        client: Any = self.store.copy_client
        try:
            if size is None:
                head = client.head_object(IfMatch=item.etag, **source)
                size = int(head["ContentLength"])
            return item.path, size, _RECORDED
        except ClientError as exc:
            self._refuse(exc, key)
            return item.path, size, None  # the source changed (or is gone)
        except BotoCoreError as exc:
            raise StorageError(
                f"S3 did not answer the import of s3://{self.bucket}/{key}: {exc}"
            ) from None

    def _refuse(self, exc: ClientError, key: str) -> None:
        """Raise for S3's refusal of a read, unless it says the source changed."""
        code = _code(exc)
        status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
        if code == "NoSuchBucket":
            raise PermissionDenied(f"the archive can't read s3://{self.bucket}/{key} ({code})")
        if code in _CHANGED or status in (404, 412):
            return
        if code in ("AccessDenied", "403", "AllAccessDisabled") or status == 403:
            raise PermissionDenied(
                f"the archive can't read s3://{self.bucket}/{key} ({code}): send the files yourself"
            )
        raise StorageError(f"S3 refused the import of s3://{self.bucket}/{key}: {code} ({status})")


def _code(exc: ClientError) -> str:
    return str(exc.response.get("Error", {}).get("Code", ""))


__all__ = [
    "COPY_THREADS",
    "ImportResult",
    "ImportedSource",
    "SourceChanged",
    "SourceFile",
    "SourceRefused",
    "copied_in_parts",
    "copy_imported",
    "import_files",
    "load_sources",
    "prepare_imported_copy",
    "read_sources",
    "record_sources",
]

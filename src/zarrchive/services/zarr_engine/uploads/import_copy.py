"""Server-side import: copy files of an open upload batch from a source bucket into the
batch's staging keys, instead of the uploader PUTting them (``zarrchive upload s3://...``).

The uploader opens a batch as for any upload (paths and md5s: the source objects' ETags),
then ``POST /api/zarr/{id}/upload/import/`` names the source bucket and prefix and, per file,
the ETag (and version) it listed; the archive copies each object with ``CopyObject`` (S3
reads and writes; no byte passes through the archive's process or the client) into
``zarr-staging/{zarr}/{batch}/{path}``, with ``x-amz-copy-source-if-match`` set to the listed
ETag.  From there the batch is the same batch: ``complete`` checks every staged object's md5,
the apply copies it into place and updates the tree.

What may be read (:mod:`.import_rules`): only a bucket the operator listed in
``ZARRCHIVE_IMPORT_BUCKETS`` (with its prefix), never the archive's own buckets, and for each
file only ``{prefix}/{path}`` with *path* one of the batch's checked paths.  Only the batch's
uploader may import into it, and only while it is open (or opened ahead).

A source object that changed since it was listed: S3 refuses the conditional copy (412); the
request is refused whole (409, naming the files) and the uploader cancels the batch.  Even on
an S3 that ignored the condition, the staged object would carry the new content's md5 and
``complete`` would refuse the batch: a file is never recorded with an md5 it does not have.
An object whose ETag is not an md5 (uploaded in parts) is read by the archive, up to the
multipart threshold (S3 checks the batch's md5 as ``Content-MD5`` of the write; a copy would
keep the parts' ETag, which ``complete`` can't check); a bigger one is *declined*: the answer
names it, and the uploader sends it itself.
"""

from __future__ import annotations

import base64
import logging
import urllib.parse
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import urllib3
from botocore.exceptions import BotoCoreError, ClientError
from sqlalchemy import select

from zarrchive.content_types import zarr_content_type
from zarrchive.db.models import BatchKind, BatchState, UploadBatch
from zarrchive.errors import (
    Conflict,
    InvalidInput,
    NoUploadInProgress,
    PermissionDenied,
    StorageError,
)
from zarrchive.paths import validate_path
from zarrchive.services.identity.auth import Caller
from zarrchive.services.runtime import Archive
from zarrchive.services.zarr_engine.uploads.import_rules import (
    ImportRefused,
    check_source,
    plain_md5,
    source_key,
)
from zarrchive.services.zarr_engine.uploads.records import writable_zarr
from zarrchive.services.zarr_engine.zarrs import get_zarr
from zarrchive.storage.keys import staging_object_key
from zarrchive.storage.objects import ObjectStore
from zarrchive.storage.presign import Credentials, Presigner
from zarrchive.storage.signed_copy import (
    URL_SECONDS,
    S3Refused,
    copy_source_header,
    parse_copy_answer,
)

log = logging.getLogger(__name__)

#: Copies sent at once by one request.
COPY_THREADS = 32
#: What :meth:`_Copier.copy` says of a file it declined.
_DECLINED = -1


@dataclass(frozen=True)
class SourceFile:
    """A file of the batch and the source object it is copied from: the ETag (and version,
    on a versioned bucket) the uploader listed."""

    path: str
    etag: str
    version_id: str | None = None


@dataclass(frozen=True)
class ImportResult:
    """What an import request copied into the batch's staging area."""

    batch: str
    copied: int
    bytes: int
    #: Files not copied: their source is in parts and above the multipart threshold (the
    #: uploader sends them).
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
    """Copy *files* of the open batch *batch_uid* (or the batch opened ahead of it) from
    ``s3://{bucket}/{prefix}/{path}`` into its staging keys.  Raises
    :class:`PermissionDenied` (403) for a source the archive may not read,
    :class:`InvalidInput` (400) for a path not in the batch or an ETag that contradicts its
    md5, :class:`SourceChanged` (409) when a source object changed since it was listed."""
    settings = archive.settings
    zarr_id, _status = writable_zarr(archive, user, zarr_id)  # who may write it, before the source
    try:
        normalized = check_source(
            bucket,
            prefix,
            settings.import_buckets,
            (settings.s3_bucket, settings.s3_embargo_bucket),
        )
    except ImportRefused as refused:
        if refused.forbidden:
            raise PermissionDenied(refused.message) from None
        raise InvalidInput(refused.message) from None
    with archive.db.session() as session:
        zarr = get_zarr(session, user, zarr_id)
        batch = session.scalar(
            select(UploadBatch).where(UploadBatch.zarr_id == zarr.id, UploadBatch.uid == batch_uid)
        )
        if (
            batch is None
            or batch.kind != BatchKind.UPLOAD
            or batch.state != BatchState.OPEN
            or batch.created_by != (user.id if user else None)
        ):
            raise NoUploadInProgress(
                f"Zarr {zarr.id}: batch {batch_uid} is not an open upload batch of yours "
                "(completed, cancelled or never opened)"
            )
        md5s = {f.path: f.etag for f in batch.files}
        store = archive.store_for(zarr.dandiset.embargoed)
    plan: list[tuple[SourceFile, str]] = []
    problems: list[str] = []
    for item in files:
        try:
            path = validate_path(item.path)
        except InvalidInput as exc:
            problems.append(f"{item.path!r}: {exc}")
            continue
        md5 = md5s.get(path)
        if md5 is None:
            problems.append(f"{path!r} is not a file of batch {batch_uid}")
            continue
        listed = plain_md5(item.etag)
        if listed is not None and listed != md5:
            problems.append(f"{path!r}: its source ETag {listed} is not its md5 {md5}")
            continue
        plan.append((item, md5))
    if problems:
        raise InvalidInput(
            f"{len(problems)} files can't be imported: " + "; ".join(problems[:10]),
            detail={"message": "files can't be imported", "problems": problems},
        )
    if not isinstance(store, ObjectStore):
        raise PermissionDenied("server-side import needs the archive on S3: send the files")
    signed = _SignedCopies.of(archive)
    copier = _Copier(
        store, bucket, normalized, zarr_id, batch_uid, settings.multipart_threshold, signed
    )
    try:
        with ThreadPoolExecutor(COPY_THREADS, thread_name_prefix="import-copy") as pool:
            outcomes = list(pool.map(lambda job: copier.copy(*job), plan))
    finally:
        if signed is not None:
            signed.close()
    changed = sorted(path for path, size in outcomes if size is None)
    declined = tuple(sorted(path for path, size in outcomes if size == _DECLINED))
    if changed:
        raise SourceChanged(
            f"{len(changed)} source objects changed since they were listed (another ETag or "
            f"version, or gone), e.g. {changed[0]!r}: cancel the batch and list the source again",
            detail={"message": "source objects changed", "paths": changed},
        )
    copied = [size for _path, size in outcomes if size is not None and size >= 0]
    return ImportResult(batch_uid, len(copied), sum(copied), declined)


class _Copier:
    """Copies one source object into a batch's staging key (see the module)."""

    def __init__(
        self,
        store: ObjectStore,
        bucket: str,
        prefix: str,
        zarr_id: str,
        uid: str,
        threshold: int,
        signed: _SignedCopies | None = None,
    ) -> None:
        self.signed = signed
        self.store = store
        self.bucket = bucket
        self.prefix = prefix
        self.zarr_id = zarr_id
        self.uid = uid
        self.threshold = threshold

    def copy(self, item: SourceFile, md5: str) -> tuple[str, int | None]:
        """``(path, bytes copied)``; ``None`` bytes: the source changed; :data:`_DECLINED`:
        not copied (see :meth:`_through`)."""
        key = source_key(self.prefix, item.path)
        target = staging_object_key(self.zarr_id, self.uid, item.path)
        source: dict[str, str] = {"Bucket": self.bucket, "Key": key}
        if item.version_id:
            source["VersionId"] = item.version_id
        client: Any = self.store.copy_client
        try:
            if plain_md5(item.etag) is None:
                return item.path, self._through(client, source, item, md5, target)
            if self.signed is not None:
                return item.path, self.signed.copy(
                    self.bucket, key, item, self.store.bucket, target
                )
            answer = client.copy_object(
                Bucket=self.store.bucket,
                Key=target,
                CopySource=source,
                CopySourceIfMatch=item.etag,
                MetadataDirective="REPLACE",
                ContentType=zarr_content_type(item.path),
            )
            return item.path, _copied_size(answer)
        except ClientError as exc:
            self._refuse(exc, key)
            return item.path, None  # the source changed (or is gone)
        except BotoCoreError as exc:
            raise StorageError(
                f"S3 did not answer the import of s3://{self.bucket}/{key}: {exc}"
            ) from None

    def _through(
        self, client: Any, source: dict[str, str], item: SourceFile, md5: str, target: str
    ) -> int | None:
        """An object whose ETag is no md5: read it (up to the threshold) and write it with
        the batch's md5 as ``Content-MD5`` (S3 refuses another body); a bigger one is
        declined."""
        head = client.head_object(IfMatch=item.etag, **source)
        size = int(head["ContentLength"])
        if size > self.threshold:
            return _DECLINED
        body = client.get_object(IfMatch=item.etag, **source)["Body"].read()
        try:
            client.put_object(
                Bucket=self.store.bucket,
                Key=target,
                Body=body,
                ContentMD5=base64.b64encode(bytes.fromhex(md5)).decode("ascii"),
                ContentType=zarr_content_type(item.path),
            )
        except ClientError as exc:
            if _code(exc) in ("BadDigest", "InvalidDigest"):
                return None
            raise
        return len(body)

    def _refuse(self, exc: ClientError, key: str) -> None:
        """Raise for S3's refusal of a copy, unless it says the source changed."""
        code = _code(exc)
        status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
        if code == "NoSuchBucket":
            raise PermissionDenied(f"the archive can't read s3://{self.bucket}/{key} ({code})")
        if code in ("PreconditionFailed", "NoSuchKey", "NoSuchVersion", "404") or status in (
            404,
            412,
        ):
            return
        if code in ("AccessDenied", "403", "NoSuchBucket", "AllAccessDisabled") or status == 403:
            raise PermissionDenied(
                f"the archive can't read s3://{self.bucket}/{key} ({code}): send the files yourself"
            )
        raise StorageError(f"S3 refused the import of s3://{self.bucket}/{key}: {code} ({status})")


class _SignedCopies:
    """The import's ``CopyObject`` requests signed by the archive's own signer and sent with
    urllib3, as the apply's copies are (:mod:`zarrchive.storage.signed_copy`: about half
    botocore's CPU a copy), but from another bucket, with ``x-amz-copy-source-if-match``."""

    def __init__(self, presigner: Presigner, endpoint_url: str, connections: int) -> None:
        self.presigner = presigner
        self.pool = urllib3.connection_from_url(
            endpoint_url,
            maxsize=connections,
            timeout=urllib3.Timeout(connect=10.0, read=300.0),
            retries=False,
        )

    @classmethod
    def of(cls, archive: Archive) -> _SignedCopies | None:
        """The archive's, when it has static credentials for a plain-HTTP(S) endpoint."""
        settings = archive.settings
        endpoint = settings.s3_endpoint_url
        if not (endpoint and settings.s3_access_key_id and settings.s3_secret_access_key):
            return None
        if urllib.parse.urlsplit(endpoint).scheme != "http":
            return None  # (TLS options as botocore got them: left to botocore)
        credentials = Credentials(settings.s3_access_key_id, settings.s3_secret_access_key)
        return cls(Presigner(endpoint, credentials, settings.s3_region), endpoint, COPY_THREADS)

    def copy(
        self, bucket: str, key: str, item: SourceFile, target_bucket: str, target: str
    ) -> int | None:
        """0 once copied; None: the source changed (412, or gone)."""
        headers = {
            "x-amz-copy-source": copy_source_header(bucket, key, item.version_id),
            "x-amz-copy-source-if-match": item.etag,
            "x-amz-metadata-directive": "REPLACE",
            "Content-Type": zarr_content_type(item.path),
        }
        for attempt in (1, 2):
            url = self.presigner.url("PUT", target_bucket, target, URL_SECONDS, headers=headers)
            path = "/" + url.split("/", 3)[3]
            try:
                response = self.pool.urlopen("PUT", path, headers=headers, body=b"")
                parse_copy_answer(response.status, response.headers, response.data)
                return 0
            except urllib3.exceptions.HTTPError as exc:
                if attempt == 2:
                    raise StorageError(
                        f"S3 did not answer the import of s3://{bucket}/{key}: {exc}"
                    ) from None
            except S3Refused as refused:
                if refused.status == 403 or refused.code == "NoSuchBucket":
                    raise PermissionDenied(
                        f"the archive can't read s3://{bucket}/{key} ({refused.code}): send "
                        "the files yourself"
                    ) from None
                if refused.status in (404, 412) or refused.code in (
                    "PreconditionFailed",
                    "NoSuchKey",
                    "NoSuchVersion",
                ):
                    return None
                if attempt == 2 or not refused.transient:
                    raise StorageError(
                        f"S3 refused the import of s3://{bucket}/{key}: {refused}"
                    ) from None
        raise AssertionError("unreachable")  # pragma: no cover

    def close(self) -> None:
        self.pool.close()


def _code(exc: ClientError) -> str:
    return str(exc.response.get("Error", {}).get("Code", ""))


def _copied_size(answer: Any) -> int:
    """Bytes of a copy (S3 does not say; 0 when unknown: only reported)."""
    size = answer.get("CopySourceContentLength") if isinstance(answer, dict) else None
    return int(size) if isinstance(size, int) else 0


__all__ = ["COPY_THREADS", "ImportResult", "SourceChanged", "SourceFile", "import_files"]

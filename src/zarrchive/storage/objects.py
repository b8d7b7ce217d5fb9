"""The S3 edge: a small object-store interface over boto3.

Everything the services need from S3 goes through :class:`ObjectStore`, so
the rest of the code never sees boto3 types or error codes.
"""

from __future__ import annotations

import collections
import email.utils
import functools
import heapq
import queue
import threading
import urllib.parse
from collections.abc import Iterable, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import IO, TYPE_CHECKING, Any, TypeVar

import boto3
import botocore.httpsession
import botocore.loaders
import botocore.session
import botocore.utils
from boto3.s3.transfer import TransferConfig
from botocore.config import Config
from botocore.exceptions import (
    BotoCoreError,
    ClientError,
    ConnectionClosedError,
    ConnectTimeoutError,
    EndpointConnectionError,
    ReadTimeoutError,
)

from zarrchive.errors import ChecksumRefused, InvalidInput, StorageError, StorageUnavailable
from zarrchive.s3_http import md5_to_content_md5 as md5_to_content_md5  # (re-exported)
from zarrchive.storage.presign import Credentials, Presigner
from zarrchive.storage.signed_copy import CopySender, S3Refused, S3Unreachable

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client
    from mypy_boto3_s3.type_defs import CompletedPartTypeDef

T = TypeVar("T")
R = TypeVar("R")

_NOT_FOUND = {"404", "NoSuchKey", "NotFound", "NoSuchVersion"}
#: What S3 answers a range that starts past the end of the object.
_UNSATISFIABLE = {"416", "InvalidRange"}
#: What S3 answers credentials that may not do something.
_DENIED = {"403", "AccessDenied", "NotImplemented", "501"}
#: S3's answers that say "later": the request may succeed when retried.
_UNAVAILABLE = {"500", "502", "503", "504", "InternalError", "ServiceUnavailable", "SlowDown"}
#: Connection-level failures: S3 is unreachable or stalled.
_UNREACHABLE = (
    EndpointConnectionError,
    ConnectTimeoutError,
    ReadTimeoutError,
    ConnectionClosedError,
)
#: How long a request waits for S3 (connect, then each read) before the archive answers 503.
CONNECT_TIMEOUT = 3
READ_TIMEOUT = 8
#: Server-side copies (``CopyObject``, ``UploadPartCopy``) answer only once the data is copied:
#: their wait scales with the size (a 64 MiB part took over 8 s on a loaded SeaweedFS).
COPY_READ_TIMEOUT = 300

#: Uploads of a stream (:meth:`ObjectStore.upload_fileobj`: manifests of 10^6 entries are
#: over 100 MiB): parts of :data:`UPLOAD_PART_SIZE`, :data:`UPLOAD_CONCURRENCY` PUTs at once,
#: at most :data:`UPLOAD_PARTS_IN_MEMORY` parts read and not yet stored by S3 (boto3's
#: default, 10 parts of 8 MiB held at once, took a long-lived server's RSS ~80 MiB up per
#: upload, and its allocator kept much of it), plus the one being read.
UPLOAD_PART_SIZE = 8 * 1024 * 1024
UPLOAD_CONCURRENCY = 4
UPLOAD_PARTS_IN_MEMORY = 4


def upload_transfer_config() -> TransferConfig:
    """boto3's transfer settings of :meth:`ObjectStore.upload_fileobj` (see
    :data:`UPLOAD_PART_SIZE`)."""
    config = TransferConfig(
        multipart_threshold=UPLOAD_PART_SIZE,
        multipart_chunksize=UPLOAD_PART_SIZE,
        max_concurrency=UPLOAD_CONCURRENCY,
    )
    # s3transfer's bound on the parts held in memory (not a TransferConfig argument in boto3)
    config.max_in_memory_upload_chunks = UPLOAD_PARTS_IN_MEMORY
    return config


@contextmanager
def s3_errors(what: str) -> Iterator[None]:
    """Translate boto3's errors (and :mod:`.signed_copy`'s) into the archive's:
    :class:`StorageUnavailable` when S3 is unreachable, stalled or says "later" (the API
    answers 503 with ``Retry-After``), :class:`StorageError` for anything else.  *what*
    names the operation in the message."""
    try:
        yield
    except (ClientError, S3Refused) as exc:
        if isinstance(exc, S3Refused):
            code, status = exc.code, str(exc.status)
        else:
            code = _code(exc)
            status = str(exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode", ""))
        if code in _UNAVAILABLE or status in _UNAVAILABLE:
            raise StorageUnavailable(f"S3 is unavailable ({what}: {exc}); retry later") from exc
        raise StorageError(f"S3 {what} failed: {exc}") from exc
    except (*_UNREACHABLE, S3Unreachable) as exc:
        raise StorageUnavailable(f"S3 cannot be reached ({what}: {exc}); retry later") from exc
    except BotoCoreError as exc:
        raise StorageError(f"S3 {what} failed: {exc}") from exc


@dataclass(frozen=True, slots=True)
class ObjectInfo:
    """What S3 says about one (current) object.

    A ``HEAD`` (:meth:`ObjectStore.head`) also says the object's full-object CRC32 (S3's
    base64 form; ``None`` when it has none, or a composite one of its parts) and the md5
    the archive recorded on it (:data:`MD5_METADATA`); a listing says neither (``None``)."""

    key: str
    size: int
    etag: str
    version_id: str | None
    last_modified: datetime
    full_object_crc32: str | None = None
    recorded_md5: str | None = None


@dataclass(frozen=True, slots=True)
class CopiedPart:
    """What S3 answered an ``UploadPartCopy``: the part's ETag (unquoted) and, on an upload
    created with a CRC32 checksum, the CRC32 S3 computed of the part (base64)."""

    etag: str
    checksum_crc32: str | None = None


def copied_part(result: Mapping[str, Any]) -> CopiedPart:
    """The :class:`CopiedPart` of botocore's ``CopyPartResult`` (an ``UploadPartCopy``'s
    answer)."""
    crc = result.get("ChecksumCRC32")
    return CopiedPart(_strip(str(result["ETag"])), str(crc) if crc else None)


@dataclass(frozen=True, slots=True)
class ObjectVersion:
    """One version (or delete marker) of an object, as listed by S3."""

    key: str
    version_id: str
    is_latest: bool
    is_delete_marker: bool
    etag: str | None
    size: int
    last_modified: datetime


@dataclass(frozen=True, slots=True)
class WrittenVersion:
    """What S3 answered for an object version it just wrote (a copy, an assembled upload).

    ``version_id`` is ``None`` on an unversioned bucket; ``last_modified`` is ``None`` when
    the answer does not carry it (``CompleteMultipartUpload``: :meth:`ObjectStore.head` of
    the version says it)."""

    etag: str
    version_id: str | None
    last_modified: datetime | None


def _strip(etag: str) -> str:
    return etag.strip('"')


def _listed_object(item: Any) -> ObjectInfo:
    """The object of one ``Contents`` item of a ``ListObjectsV2`` page (no version id)."""
    return ObjectInfo(
        key=item["Key"],
        size=int(item["Size"]),
        etag=_strip(item["ETag"]),
        version_id=None,
        last_modified=item["LastModified"],
    )


def _version_row(item: Any, *, delete_marker: bool = False) -> ObjectVersion:
    """One version (or, with *delete_marker*, one delete marker) of a
    ``ListObjectVersions`` page."""
    return ObjectVersion(
        key=item["Key"],
        version_id=item["VersionId"],
        is_latest=bool(item["IsLatest"]),
        is_delete_marker=delete_marker,
        etag=None if delete_marker else _strip(item["ETag"]),
        size=0 if delete_marker else int(item["Size"]),
        last_modified=item["LastModified"],
    )


def _page_history(page: Mapping[str, Any]) -> Iterator[ObjectVersion]:
    """A ``ListObjectVersions`` page's versions and delete markers as one sequence: by key,
    each key newest first, its latest entry first among entries of the same time.

    S3 sends both interleaved in that order; botocore gives them as two lists, each already
    so ordered, so a sorted merge restores it.  (Split apart, a key whose newest entry is a
    delete marker showed its history in two places, and gc, which reads a key's history
    from consecutive rows, never expired the version that marker replaced.)  Entries of one
    key with the same time and neither latest keep no order S3 would tell; the times that
    retention decisions read are then the same whichever comes first."""
    versions = (_version_row(item) for item in page.get("Versions", []))
    markers = (_version_row(item, delete_marker=True) for item in page.get("DeleteMarkers", []))
    return heapq.merge(versions, markers, key=_history_order)


def _history_order(version: ObjectVersion) -> tuple[str, float, bool]:
    return (version.key, -version.last_modified.timestamp(), not version.is_latest)


def _code(exc: ClientError) -> str:
    return str(exc.response.get("Error", {}).get("Code", ""))


def parse_timestamp(value: str) -> datetime:
    """S3's timestamps, fast: ISO 8601 in listings, RFC 1123 in headers.

    botocore's default parser (dateutil) costs about 0.1 ms a timestamp: most of the CPU
    time of a large listing.
    """
    try:
        parsed = datetime.fromisoformat(value)
    except ValueError:
        try:
            parsed = email.utils.parsedate_to_datetime(value)
        except (TypeError, ValueError):
            return botocore.utils.parse_timestamp(value)
    return parsed if parsed.tzinfo is not None else parsed.replace(tzinfo=UTC)


@functools.cache
def _data_loader(data_path: str | None) -> botocore.loaders.Loader:
    """botocore's loader of its data files (the S3 service model: a megabyte of JSON), one
    per search path in this process: each session would otherwise read and parse the model
    again (0.1-0.2 s per client, four clients per archive, an archive per job)."""
    return botocore.loaders.create_loader(data_path)


def _session() -> boto3.Session:
    """A boto3 session whose responses parse timestamps with :func:`parse_timestamp`, its
    data files read through the process's one loader (:func:`_data_loader`)."""
    core = botocore.session.get_session()
    core.register_component("data_loader", _data_loader(core.get_config_variable("data_path")))
    core.get_component("response_parser_factory").set_parser_defaults(
        timestamp_parser=parse_timestamp
    )
    return boto3.Session(botocore_session=core)


def _tls_verify(client: Any) -> bool | str:
    """How botocore verifies *client*'s TLS connections: ``False``, or the CA bundle it
    uses (``AWS_CA_BUNDLE``, the client's ``verify``, else its default bundle)."""
    session = getattr(getattr(client, "_endpoint", None), "http_session", None)
    verify = getattr(session, "_verify", True)
    if verify is False or isinstance(verify, str):
        return verify
    bundle = botocore.httpsession.get_cert_path(True)
    return bundle if isinstance(bundle, str) else True


class ObjectStore:
    """One bucket of an S3 service."""

    def __init__(
        self,
        *,
        endpoint_url: str | None,
        bucket: str,
        access_key_id: str | None,
        secret_access_key: str | None,
        region: str = "us-east-1",
        max_workers: int = 32,
    ) -> None:
        self.endpoint_url = endpoint_url
        self.bucket = bucket
        self.max_workers = max_workers
        config = Config(
            signature_version="s3v4",
            max_pool_connections=max_workers + 4,
            retries={"total_max_attempts": 2, "mode": "standard"},
            s3={"addressing_style": "path"},
            connect_timeout=CONNECT_TIMEOUT,
            read_timeout=READ_TIMEOUT,
        )
        self.client: S3Client = _session().client(
            "s3",
            endpoint_url=endpoint_url,
            aws_access_key_id=access_key_id,
            aws_secret_access_key=secret_access_key,
            region_name=region,
            config=config,
        )
        #: The client of server-side copies: the same, with a read timeout for big copies.
        self.copy_client: S3Client = _session().client(
            "s3",
            endpoint_url=endpoint_url,
            aws_access_key_id=access_key_id,
            aws_secret_access_key=secret_access_key,
            region_name=region,
            config=config.merge(Config(read_timeout=COPY_READ_TIMEOUT)),
        )
        #: The fast signer of the URLs presigned per file (botocore's for anything else, and
        #: when the credentials come from boto3's own chain: they may rotate).
        self._presigner = (
            Presigner(endpoint_url, Credentials(access_key_id, secret_access_key), region)
            if endpoint_url and access_key_id and secret_access_key
            else None
        )
        #: The copies (``CopyObject``, the apply's one request per file), signed by that
        #: signer and sent without botocore's per-call cost (:mod:`.signed_copy`).
        self._copier = (
            CopySender(
                self._presigner,
                endpoint_url,
                bucket,
                connections=max_workers + 4,
                connect_timeout=CONNECT_TIMEOUT,
                read_timeout=COPY_READ_TIMEOUT,
                verify=_tls_verify(self.copy_client),
            )
            if self._presigner is not None and endpoint_url
            else None
        )
        self._pool = ThreadPoolExecutor(max_workers=max_workers, thread_name_prefix="s3")
        self._group_pool = ThreadPoolExecutor(max_workers=8, thread_name_prefix="s3-groups")
        self._small_pool = ThreadPoolExecutor(max_workers=8, thread_name_prefix="s3-small")

    @property
    def copier(self) -> CopySender | None:
        """The sender of signed copies (``CopyObject``, ``UploadPartCopy``) of this store, or
        ``None`` when copies go through botocore (credentials from boto3's chain, or no
        endpoint): for the services that copy into this store's bucket from elsewhere."""
        return self._copier

    # -- bucket ---------------------------------------------------------------
    def ensure_bucket(self, *, versioned: bool = True) -> None:
        """Create the bucket if needed and turn versioning on."""
        try:
            self.client.head_bucket(Bucket=self.bucket)
        except ClientError as exc:
            if _code(exc) not in _NOT_FOUND | {"NoSuchBucket"}:
                raise StorageError(f"cannot reach bucket {self.bucket!r}: {exc}") from exc
            try:
                with s3_errors(f"creation of bucket {self.bucket!r}"):
                    self.client.create_bucket(Bucket=self.bucket)
            except StorageError as exc2:
                cause = exc2.__cause__
                if not (
                    isinstance(cause, ClientError)
                    and _code(cause) in ("BucketAlreadyOwnedByYou", "BucketAlreadyExists")
                ):
                    raise
        if versioned:
            self._call(
                self.client.put_bucket_versioning,
                Bucket=self.bucket,
                VersioningConfiguration={"Status": "Enabled"},
            )

    def ensure_cors(self, configuration: dict[str, Any]) -> bool:
        """Give the bucket *configuration* as its CORS rules unless it has them; False
        (and nothing changed) when the credentials may not (an administrator sets them:
        see docs/deploying.md)."""
        try:
            current = self.client.get_bucket_cors(Bucket=self.bucket).get("CORSRules")
        except ClientError as exc:
            if _code(exc) in _DENIED:
                return False
            current = None  # NoSuchCORSConfiguration
        if current == configuration["CORSRules"]:
            return True
        try:
            self.client.put_bucket_cors(
                Bucket=self.bucket,
                CORSConfiguration=configuration,  # type: ignore[arg-type]
            )
        except ClientError as exc:
            if _code(exc) in _DENIED:
                return False
            raise StorageError(
                f"cannot set the CORS rules of bucket {self.bucket!r}: {exc}"
            ) from exc
        return True

    def public_url(self, key: str) -> str:
        """The plain (unsigned) URL of *key*, percent-encoded (``#``, ``?``, ``%``, spaces...)."""
        quoted = urllib.parse.quote(key, safe="/~")
        if self.endpoint_url:
            return f"{self.endpoint_url.rstrip('/')}/{self.bucket}/{quoted}"
        return f"https://{self.bucket}.s3.amazonaws.com/{quoted}"

    # -- single objects ---------------------------------------------------------
    def _call(self, fn: Any, **kwargs: Any) -> Any:
        with s3_errors(fn.__name__):
            return fn(**kwargs)

    def _presign(
        self,
        method: str,
        key: str,
        expires_in: int,
        *,
        content_md5: str | None = None,
        content_type: str | None = None,
        version_id: str | None = None,
        checksum_mode: bool = False,
    ) -> str:
        """A presigned URL of *method* on *key*: by our signer where it applies, else by
        botocore (the same URL, about ten times slower).  *content_md5*, *content_type* and
        *checksum_mode* (``x-amz-checksum-mode: ENABLED``) are signed: the client must send
        exactly these headers."""
        if self._presigner is not None:
            signed: dict[str, str] = {}
            if content_md5:
                signed["Content-MD5"] = content_md5
            if content_type:
                signed["Content-Type"] = content_type
            if checksum_mode:
                signed[CHECKSUM_MODE_HEADER] = "ENABLED"
            return self._presigner.url(
                method,
                self.bucket,
                key,
                expires_in,
                headers=signed or None,
                params={"versionId": version_id} if version_id else None,
            )
        params: dict[str, str] = {"Bucket": self.bucket, "Key": key}
        if content_md5:
            params["ContentMD5"] = content_md5
        if content_type:
            params["ContentType"] = content_type
        if version_id:
            params["VersionId"] = version_id
        if checksum_mode:
            params["ChecksumMode"] = "ENABLED"
        operation = {"PUT": "put_object", "GET": "get_object", "HEAD": "head_object"}[method]
        url: str = self.client.generate_presigned_url(
            operation, Params=params, ExpiresIn=expires_in, HttpMethod=method
        )
        return url

    def presign_put(
        self, key: str, md5_hex: str, expires_in: int, content_type: str | None = None
    ) -> str:
        """A presigned PUT URL that signs ``Content-MD5`` (S3 refuses any other body) and,
        given *content_type*, ``Content-Type`` (S3 refuses any other type, or none: the
        object is stored with the archive's type, not one the uploader chose; see
        :mod:`zarrchive.content_types`)."""
        return self._presign(
            "PUT",
            key,
            expires_in,
            content_md5=md5_to_content_md5(md5_hex),
            content_type=content_type,
        )

    def presign_get(self, key: str, expires_in: int) -> str:
        return self._presign("GET", key, expires_in)

    def presign_head(
        self,
        key: str,
        expires_in: int,
        *,
        version_id: str | None = None,
        checksum_mode: bool = False,
    ) -> str:
        """A presigned HEAD URL of *key* (at *version_id*): a presigned GET does not answer
        HEAD.  With *checksum_mode* the URL signs ``x-amz-checksum-mode: ENABLED``: the
        client must send that header (S3 refuses a presigned request with an unsigned
        ``x-amz-*`` header), and S3 answers the object's checksum
        (``x-amz-checksum-crc32``, ``x-amz-checksum-type``)."""
        return self._presign(
            "HEAD",
            key,
            expires_in,
            version_id=version_id,
            checksum_mode=checksum_mode,
        )

    def presign_get_version(self, key: str, version_id: str, expires_in: int) -> str:
        """A presigned GET URL of exactly one version of *key*."""
        return self._presign("GET", key, expires_in, version_id=version_id)

    def public_version_url(self, key: str, version_id: str) -> str:
        """The plain URL of exactly one version of *key* (``?versionId=``; S3 serves it to
        anonymous readers of a world-readable bucket, as SeaweedFS does)."""
        return f"{self.public_url(key)}?versionId={urllib.parse.quote(version_id, safe='')}"

    def _lookup(self, fn: Any, what: str, key: str) -> Any:
        """``fn(Bucket, Key)``'s response, or ``None`` when the key is absent."""
        try:
            with s3_errors(f"{what} {key!r}"):
                return fn(Bucket=self.bucket, Key=key)
        except StorageError as exc:
            cause = exc.__cause__
            if isinstance(cause, ClientError) and _code(cause) in _NOT_FOUND:
                return None
            raise

    def _head_response(self, key: str, version_id: str | None) -> Any | None:
        """S3's answer to ``HEAD`` of *key* (at *version_id*), or ``None`` when absent."""

        def head(**kwargs: Any) -> Any:
            if version_id is not None:
                kwargs["VersionId"] = version_id
            return self.client.head_object(ChecksumMode="ENABLED", **kwargs)

        return self._lookup(head, "HEAD", key)

    def head(self, key: str, version_id: str | None = None) -> ObjectInfo | None:
        """The current version of *key* (or its version *version_id*), or ``None`` when
        absent."""
        response = self._head_response(key, version_id)
        if response is None:
            return None
        recorded = response.get("Metadata", {}).get(MD5_METADATA)
        return ObjectInfo(
            key=key,
            size=int(response["ContentLength"]),
            etag=_strip(response["ETag"]),
            version_id=response.get("VersionId"),
            last_modified=response["LastModified"],
            full_object_crc32=full_object_crc32(response),
            recorded_md5=str(recorded) if recorded else None,
        )

    def get_with_etag(self, key: str) -> tuple[bytes, str] | None:
        """The content of *key* and the ETag of exactly that content, or ``None``."""
        response = self._lookup(self.client.get_object, "GET", key)
        if response is None:
            return None
        with s3_errors(f"GET {key!r} (reading)"):
            data: bytes = response["Body"].read()
        return data, _strip(response["ETag"])

    def get(self, key: str) -> bytes | None:
        """The content of *key*, or ``None`` when absent."""
        response = self._lookup(self.client.get_object, "GET", key)
        if response is None:
            return None
        with s3_errors(f"GET {key!r} (reading)"):
            data: bytes = response["Body"].read()
        return data

    def get_range(self, key: str, start: int, length: int) -> bytes | None:
        """At most *length* bytes of *key* from byte *start* (fewer when the object ends
        sooner, none when it ends before *start*), or ``None`` when *key* is absent."""
        if start < 0 or length < 1:
            raise ValueError(f"a range needs start >= 0 and length >= 1, not {start}, {length}")
        try:
            with s3_errors(f"GET {key!r} (range)"):
                response = self.client.get_object(
                    Bucket=self.bucket, Key=key, Range=f"bytes={start}-{start + length - 1}"
                )
        except StorageError as exc:
            cause = exc.__cause__
            if isinstance(cause, ClientError) and _code(cause) in _NOT_FOUND:
                return None
            if isinstance(cause, ClientError) and _code(cause) in _UNSATISFIABLE:
                return b""
            raise
        with s3_errors(f"GET {key!r} (reading a range)"):
            body = response["Body"]
            try:
                data: bytes = body.read(length)
            finally:
                body.close()
        return data

    def put(
        self, key: str, data: bytes, content_type: str = "application/octet-stream"
    ) -> str | None:
        """Store *data* at *key*; returns the new version id."""
        response = self._call(
            self.client.put_object,
            Bucket=self.bucket,
            Key=key,
            Body=data,
            ContentType=content_type,
        )
        version: str | None = response.get("VersionId")
        return version

    def upload_fileobj(self, key: str, fileobj: IO[bytes], content_type: str) -> None:
        """Stream a file object to *key* (multipart when large: memory bounded by
        :func:`upload_transfer_config`, whatever the size)."""
        with s3_errors(f"upload of {key!r}"):
            self.client.upload_fileobj(
                fileobj,
                self.bucket,
                key,
                ExtraArgs={"ContentType": content_type},
                Config=upload_transfer_config(),
            )

    def delete(self, key: str) -> None:
        """Delete *key* (on a versioned bucket: adds a delete marker)."""
        self._call(self.client.delete_object, Bucket=self.bucket, Key=key)

    def delete_version(self, key: str, version_id: str) -> None:
        """Delete one version of *key* for good."""
        self._call(self.client.delete_object, Bucket=self.bucket, Key=key, VersionId=version_id)

    def delete_many(self, keys: Iterable[str]) -> None:
        """Delete keys in requests of at most 1000 (delete markers on a versioned bucket)."""
        batch: list[str] = []
        for key in keys:
            batch.append(key)
            if len(batch) == 1000:
                self._delete_batch(batch)
                batch = []
        if batch:
            self._delete_batch(batch)

    def _delete_batch(self, keys: list[str]) -> None:
        # up to 1,000 deletes in one request: on a versioned bucket that is about a second of
        # S3's work at rest and many more on a busy S3, so the copies' longer read timeout
        response = self._call(
            self.copy_client.delete_objects,
            Bucket=self.bucket,
            Delete={"Objects": [{"Key": k} for k in keys], "Quiet": True},
        )
        errors = response.get("Errors") or []
        if errors:
            raise StorageError(f"S3 refused to delete {len(errors)} objects, e.g. {errors[0]}")

    # -- listings ---------------------------------------------------------------
    def iter_objects(self, prefix: str) -> Iterator[ObjectInfo]:
        """Current objects under *prefix*, in key order (no version ids)."""
        return self._iter_listing(prefix, {})

    def iter_directory(self, prefix: str, *, start_after: str = "") -> Iterator[ObjectInfo]:
        """The current objects directly under *prefix* (``Delimiter="/"``: nothing of its
        subdirectories), from the first key after *start_after*, in the S3's order."""
        options: dict[str, Any] = {"Delimiter": "/"}
        if start_after:
            options["StartAfter"] = start_after
        return self._iter_listing(prefix, options)

    def _iter_listing(self, prefix: str, options: dict[str, Any]) -> Iterator[ObjectInfo]:
        """The objects of a ``ListObjectsV2`` listing of *prefix* with *options*, page by page."""
        paginator = self.client.get_paginator("list_objects_v2")
        with s3_errors(f"listing of {prefix!r}"):
            for page in paginator.paginate(Bucket=self.bucket, Prefix=prefix, **options):
                for item in page.get("Contents", []):
                    yield _listed_object(item)

    def iter_versions(self, prefix: str) -> Iterator[ObjectVersion]:
        """Every version and delete marker under *prefix*, in key order, each key's history
        newest first with its delete markers in place (what S3 sends interleaved, botocore
        parses into two lists per page: :func:`_page_history` merges them back)."""
        paginator = self.client.get_paginator("list_object_versions")
        with s3_errors(f"version listing of {prefix!r}"):
            for page in paginator.paginate(Bucket=self.bucket, Prefix=prefix):
                yield from _page_history(page)

    def iter_current_versions(
        self, prefix: str, *, parallel: int = 8, page_size: int = 1000
    ) -> Iterator[ObjectVersion]:
        """The current version of every object under *prefix* (no delete markers), in key
        order, with "directories" listed *parallel* at a time.

        The same rows as filtering :meth:`iter_versions`, faster where S3 serves listings of
        different prefixes in parallel.  A plan is made first: levels are listed with the
        ``/`` delimiter (one request each, in parallel) until there are at least
        ``2 * parallel`` prefixes or a level does not fit in one page (a wide flat directory
        is listed by one paginator); then each prefix is listed whole by a thread of its own,
        at most *parallel* ahead of the consumer, each holding at most three pages: memory is
        bounded by ``parallel * 3 * page_size`` rows, however many objects there are.
        """
        if parallel <= 1:
            for version in self.iter_versions(prefix):
                if version.is_latest and not version.is_delete_marker:
                    yield version
            return
        plan = _ListingPlan(self, prefix, parallel, page_size)
        yield from plan.run()

    def latest_version(self, key: str) -> ObjectVersion | None:
        """The current version or delete marker of exactly *key* (``None``: never written)."""
        for version in self.iter_versions(key):
            if version.key == key and version.is_latest:
                return version
        return None

    def find(
        self, keys: Iterable[str], *, max_pages: int | None = None
    ) -> dict[str, ObjectInfo | None]:
        """The current object of each key (``None`` when absent), looked up cheaply.

        Keys are grouped by "directory"; each group is looked up by listing the
        range its keys span (one request per 1000 keys), falling back to one HEAD
        per key when the range turns out to hold many other keys.  Groups run
        concurrently.
        """
        groups: dict[str, list[str]] = {}
        for key in keys:
            groups.setdefault(key.rpartition("/")[0] + "/", []).append(key)
        found: dict[str, ObjectInfo | None] = {}
        # groups run on their own pool: a group may itself fan out HEADs on the main pool
        sorted_groups = [sorted(g) for g in groups.values()]
        for part in self._group_pool.map(lambda g: self._find_group(g, max_pages), sorted_groups):
            found.update(part)
        return found

    def _find_group(self, keys: list[str], max_pages: int | None) -> dict[str, ObjectInfo | None]:
        if len(keys) < 4:
            return {key: self.head(key) for key in keys}
        prefix = keys[0].rpartition("/")[0] + "/"
        wanted = set(keys)
        found: dict[str, ObjectInfo | None] = {}
        if max_pages is None:
            max_pages = max(2, len(keys) // 100)
        kwargs: dict[str, Any] = {
            "Bucket": self.bucket,
            "Prefix": prefix,
            "Delimiter": "/",
            "StartAfter": keys[0][:-1],
        }
        pages = 0
        last = keys[-1]
        while pages < max_pages:
            response = self._call(self.client.list_objects_v2, **kwargs)
            pages += 1
            beyond = False
            for item in response.get("Contents", []):
                key = item["Key"]
                if key > last:
                    beyond = True
                    break
                if key in wanted:
                    found[key] = _listed_object(item)
            if beyond or not response.get("IsTruncated"):
                return {key: found.get(key) for key in keys}
            kwargs["ContinuationToken"] = response["NextContinuationToken"]
        # the range holds many other keys: look the rest up one by one
        rest = [key for key in keys if key not in found]
        for key, info in zip(rest, self.map(self.head, rest), strict=True):
            found[key] = info
        return {key: found.get(key) for key in keys}

    def purge(self, prefix: str) -> int:
        """Delete every version and delete marker under *prefix* for good (see
        :func:`purge_checked`)."""
        return purge_checked(self, prefix)

    def copy_within(
        self,
        source_key: str,
        key: str,
        version_id: str | None = None,
        *,
        content_type: str | None = None,
    ) -> WrittenVersion:
        """Server-side copy of *source_key* (at *version_id*, default its current version) to
        *key* in this bucket; returns the new version as the copy answered: its ETag (an md5
        for objects up to 5 GiB that were uploaded in one PUT), version id and LastModified
        (what a listing says of it afterwards).

        The copy keeps the source's metadata, or with *content_type* replaces it
        (``MetadataDirective=REPLACE``): the copy has that type and no user metadata,
        whatever its uploader stored."""
        if self._copier is not None:
            return self._signed_copy(source_key, key, version_id, content_type)
        source: dict[str, str] = {"Bucket": self.bucket, "Key": source_key}
        if version_id is not None:
            source["VersionId"] = version_id
        if content_type:
            response = self._call(
                self.copy_client.copy_object,
                Bucket=self.bucket,
                Key=key,
                CopySource=source,
                MetadataDirective="REPLACE",
                ContentType=content_type,
            )
        else:
            response = self._call(
                self.copy_client.copy_object,
                Bucket=self.bucket,
                Key=key,
                CopySource=source,
                MetadataDirective="COPY",
            )
        result = response.get("CopyObjectResult") or {}
        modified = result.get("LastModified")
        written = response.get("VersionId")
        return WrittenVersion(
            _strip(str(result.get("ETag", ""))),
            str(written) if written and written != "null" else None,
            modified if isinstance(modified, datetime) else None,
        )

    def _signed_copy(
        self, source_key: str, key: str, version_id: str | None, content_type: str | None
    ) -> WrittenVersion:
        """:meth:`copy_within` by :class:`~zarrchive.storage.signed_copy.CopySender`."""
        assert self._copier is not None
        with s3_errors(f"copy_object of {source_key!r} to {key!r}"):
            answer = self._copier.copy(source_key, key, version_id, content_type=content_type)
        modified = answer.last_modified
        return WrittenVersion(
            answer.etag,
            answer.version_id,
            parse_timestamp(modified) if modified else None,
        )

    def iter_prefixes(self, prefix: str) -> Iterator[str]:
        """The "subdirectories" directly under *prefix* (each ending with ``/``)."""
        paginator = self.client.get_paginator("list_objects_v2")
        with s3_errors(f"listing of {prefix!r}"):
            for page in paginator.paginate(Bucket=self.bucket, Prefix=prefix, Delimiter="/"):
                for item in page.get("CommonPrefixes", []):
                    yield str(item["Prefix"])

    # -- concurrency --------------------------------------------------------------
    def map(self, fn: Any, items: Iterable[Any]) -> list[Any]:
        """Run *fn* over *items* concurrently on the store's thread pool, in order."""
        return list(self._pool.map(fn, items))

    def map_small(self, fn: Any, items: Iterable[Any]) -> list[Any]:
        """Like :meth:`map`, for small requests (``.checksum`` nodes read and written, HEADs)
        on a pool of their own: a request that needs a few never queues behind the hundreds
        of copies or deletes an apply may have queued on the main pool (nor does the tree
        update of a batch behind the copies of the next, made ahead)."""
        return list(self._small_pool.map(fn, items))

    def close(self) -> None:
        if self._copier is not None:
            self._copier.close()
        self._pool.shutdown(wait=False, cancel_futures=True)
        self._group_pool.shutdown(wait=False, cancel_futures=True)
        self._small_pool.shutdown(wait=False, cancel_futures=True)

    # -- multipart uploads and streamed reads (blobs) -------------------------------
    def create_multipart_upload(
        self,
        key: str,
        content_type: str = "application/octet-stream",
        metadata: dict[str, str] | None = None,
        *,
        full_object_crc32: bool = False,
    ) -> str:
        """Start an S3 multipart upload of *key* (with user *metadata*); S3's upload id.
        With *full_object_crc32* the object gets S3's full-object CRC32
        (``ChecksumAlgorithm=CRC32``, ``ChecksumType=FULL_OBJECT``): each part copied
        answers its CRC32 (:meth:`upload_part_copy`), and the completion may state
        the whole object's, which S3 checks (:meth:`complete_multipart`)."""
        extra: dict[str, Any] = {"Metadata": metadata} if metadata else {}
        if full_object_crc32:
            extra.update(ChecksumAlgorithm="CRC32", ChecksumType="FULL_OBJECT")
        response = self._call(
            self.client.create_multipart_upload,
            Bucket=self.bucket,
            Key=key,
            ContentType=content_type,
            **extra,
        )
        return str(response["UploadId"])

    def recorded_md5(self, key: str, version_id: str | None = None) -> str | None:
        """The md5 the archive recorded on an object assembled from parts (its ETag is not
        an md5): the :data:`MD5_METADATA` metadata, set only on content whose md5 the
        archive verified; None if absent (or no such object)."""
        response = self._head_response(key, version_id)
        if response is None:
            return None
        value = response.get("Metadata", {}).get(MD5_METADATA)
        return str(value) if value else None

    def presign_upload_part(
        self,
        key: str,
        upload_id: str,
        part_number: int,
        expires_in: int,
        md5_hex: str | None = None,
    ) -> str:
        """A presigned PUT URL for one part (1-based) of a multipart upload; with *md5_hex*
        it signs the part's ``Content-MD5`` (S3 refuses any other body)."""
        content_md5 = md5_to_content_md5(md5_hex) if md5_hex else None
        if self._presigner is not None:
            return self._presigner.url(
                "PUT",
                self.bucket,
                key,
                expires_in,
                headers={"Content-MD5": content_md5} if content_md5 else None,
                params={"partNumber": str(part_number), "uploadId": upload_id},
            )
        params: dict[str, Any] = {
            "Bucket": self.bucket,
            "Key": key,
            "UploadId": upload_id,
            "PartNumber": part_number,
        }
        if content_md5:
            params["ContentMD5"] = content_md5
        url: str = self.client.generate_presigned_url(
            "upload_part", Params=params, ExpiresIn=expires_in, HttpMethod="PUT"
        )
        return url

    def list_parts(self, key: str, upload_id: str) -> dict[int, tuple[str, int]] | None:
        """The parts S3 holds of a multipart upload (``number -> (etag, size)``); None when
        the upload does not exist (never started, completed or aborted)."""
        parts: dict[int, tuple[str, int]] = {}
        marker = 0
        try:
            with s3_errors(f"listing the parts of {key!r}"):
                while True:
                    page = self.client.list_parts(
                        Bucket=self.bucket, Key=key, UploadId=upload_id, PartNumberMarker=marker
                    )
                    for part in page.get("Parts", []):
                        parts[int(part["PartNumber"])] = (
                            _strip(str(part["ETag"])),
                            int(part["Size"]),
                        )
                    if not page.get("IsTruncated"):
                        return parts
                    marker = int(page.get("NextPartNumberMarker") or 0)
        except StorageError as exc:
            cause = exc.__cause__
            if isinstance(cause, ClientError) and _code(cause) in _NOT_FOUND | {"NoSuchUpload"}:
                return None
            raise

    def upload_activity(self, key: str, upload_id: str) -> datetime | None:
        """When a multipart upload last changed: its newest part's ``LastModified``, else when
        it was started, else (S3 did not say) the epoch: callers take the latest of this and
        what they know.  None when it does not exist (never started, completed or aborted)."""
        newest: datetime | None = None
        marker = 0
        try:
            with s3_errors(f"listing the parts of {key!r}"):
                while True:
                    page = self.client.list_parts(
                        Bucket=self.bucket, Key=key, UploadId=upload_id, PartNumberMarker=marker
                    )
                    for part in page.get("Parts", []):
                        when = part.get("LastModified")
                        if isinstance(when, datetime) and (newest is None or when > newest):
                            newest = when
                    if not page.get("IsTruncated"):
                        break
                    marker = int(page.get("NextPartNumberMarker") or 0)
        except StorageError as exc:
            cause = exc.__cause__
            if isinstance(cause, ClientError) and _code(cause) in _NOT_FOUND | {"NoSuchUpload"}:
                return None
            raise
        if newest is None:
            for found, started_id, started in self.iter_multipart_uploads(key):
                if found == key and started_id == upload_id:
                    newest = started
        return newest.astimezone(UTC) if newest is not None else datetime.fromtimestamp(0, UTC)

    def upload_part_copy(
        self,
        source_key: str,
        version_id: str | None,
        key: str,
        upload_id: str,
        part_number: int,
        first: int,
        last: int,
    ) -> CopiedPart:
        """``UploadPartCopy``: bytes *first*..*last* (inclusive) of *source_key* (at
        *version_id*) as part *part_number* of an upload of *key*: the part's ETag and the
        CRC32 S3 computed of it (on an upload created with *full_object_crc32*; else
        ``None``)."""
        source: dict[str, str] = {"Bucket": self.bucket, "Key": source_key}
        if version_id is not None:
            source["VersionId"] = version_id
        response = self._call(
            self.copy_client.upload_part_copy,
            Bucket=self.bucket,
            Key=key,
            UploadId=upload_id,
            PartNumber=part_number,
            CopySource=source,
            CopySourceRange=f"bytes={first}-{last}",
        )
        return copied_part(response["CopyPartResult"])

    def iter_multipart_uploads(self, prefix: str) -> Iterator[tuple[str, str, datetime | None]]:
        """The multipart uploads in progress under *prefix*: ``(key, upload id, initiated)``."""
        paginator = self.client.get_paginator("list_multipart_uploads")
        with s3_errors(f"listing the multipart uploads under {prefix!r}"):
            for page in paginator.paginate(Bucket=self.bucket, Prefix=prefix):
                for item in page.get("Uploads", []):
                    yield str(item["Key"]), str(item["UploadId"]), item.get("Initiated")

    def presign_complete_multipart(self, key: str, upload_id: str, expires_in: int) -> str:
        """A presigned POST URL completing a multipart upload (the body, the parts' XML, is
        not signed): DANDI's clients assemble their uploads themselves."""
        url: str = self.client.generate_presigned_url(
            "complete_multipart_upload",
            Params={"Bucket": self.bucket, "Key": key, "UploadId": upload_id},
            ExpiresIn=expires_in,
            HttpMethod="POST",
        )
        return url

    def complete_multipart_upload(
        self, key: str, upload_id: str, parts: Iterable[tuple[int, str]]
    ) -> str:
        """Assemble the parts ``(part_number, etag)``; returns the object's (multipart) ETag.

        Parts S3 does not have (or with another ETag), parts out of order, parts
        too small and unknown uploads are the caller's mistakes: :class:`InvalidInput`.
        """
        return self.complete_multipart(key, upload_id, parts).etag

    def complete_multipart(
        self,
        key: str,
        upload_id: str,
        parts: Iterable[tuple[int, str]],
        *,
        part_crc32s: Mapping[int, str] | None = None,
        full_object_crc32: str | None = None,
    ) -> WrittenVersion:
        """:meth:`complete_multipart_upload`, returning the new version as S3 answered: its
        (multipart) ETag and version id (no LastModified: S3's answer has none).

        On an upload created with *full_object_crc32*, *part_crc32s* (``number -> CRC32``,
        as the parts' copies answered) and *full_object_crc32* (the whole object's, base64)
        are stated: S3 refuses a CRC32 that is not the content's (:class:`ChecksumRefused`,
        the upload left as it was)."""
        crcs = part_crc32s or {}
        listed: list[CompletedPartTypeDef] = []
        for n, e in parts:
            part: CompletedPartTypeDef = {"PartNumber": n, "ETag": f'"{_strip(e)}"'}
            if n in crcs:
                part["ChecksumCRC32"] = crcs[n]
            listed.append(part)
        extra: dict[str, Any] = {}
        if full_object_crc32 is not None:
            extra.update(ChecksumCRC32=full_object_crc32, ChecksumType="FULL_OBJECT")
        try:
            with s3_errors("complete_multipart_upload"):
                response = self.client.complete_multipart_upload(
                    Bucket=self.bucket,
                    Key=key,
                    UploadId=upload_id,
                    MultipartUpload={"Parts": listed},
                    **extra,
                )
        except StorageError as exc:
            cause = exc.__cause__
            code = _code(cause) if isinstance(cause, ClientError) else ""
            if code in ("BadDigest", "InvalidChecksum"):
                raise ChecksumRefused(
                    f"S3 refused to complete the upload of {key!r}: the full-object CRC32 "
                    f"{full_object_crc32} is not its content's ({code})"
                ) from cause
            if code in ("InvalidPart", "InvalidPartOrder", "EntityTooSmall", "NoSuchUpload"):
                assert isinstance(cause, ClientError)
                message = cause.response.get("Error", {}).get("Message", "")
                raise InvalidInput(
                    f"S3 refused to complete the upload of {key!r}: {code} {message}".strip()
                ) from cause
            raise
        written = response.get("VersionId")
        return WrittenVersion(
            _strip(str(response.get("ETag", ""))),
            str(written) if written and written != "null" else None,
            None,
        )

    def abort_multipart_upload(self, key: str, upload_id: str) -> None:
        """Abort a multipart upload (its parts are discarded); unknown uploads are ignored."""
        try:
            with s3_errors("abort_multipart_upload"):
                self.client.abort_multipart_upload(Bucket=self.bucket, Key=key, UploadId=upload_id)
        except StorageError as exc:
            cause = exc.__cause__
            if not (
                isinstance(cause, ClientError) and _code(cause) in _NOT_FOUND | {"NoSuchUpload"}
            ):
                raise

    def iter_content(
        self, key: str, version_id: str | None = None, chunk_size: int = 8 * 1024 * 1024
    ) -> Iterator[bytes]:
        """The content of *key* (or of one version of it) in chunks, streamed."""
        kwargs: dict[str, Any] = {"Bucket": self.bucket, "Key": key}
        if version_id is not None:
            kwargs["VersionId"] = version_id
        with s3_errors(f"GET {key!r}"):
            body = self.client.get_object(**kwargs)["Body"]
            try:
                yield from body.iter_chunks(chunk_size)
            finally:
                body.close()

    def delete_all_versions(self, key: str) -> None:
        """Remove every version and delete marker of exactly *key*, for good."""
        purge_checked(self, key, exact=True)


# -- copies across buckets and purges -----------------------------------------------------
#: The user metadata (``x-amz-meta-zarrchive-md5``) in which the archive records the md5 it
#: verified of an object it assembled from parts (S3's ETag of such an object is not an md5).
MD5_METADATA = "zarrchive-md5"
#: The request header that has S3 answer an object's checksum (``ENABLED``).
CHECKSUM_MODE_HEADER = "x-amz-checksum-mode"


def full_object_crc32(head: Mapping[str, Any]) -> str | None:
    """The full-object CRC32 (base64) of a ``HeadObject`` answer (asked with
    ``ChecksumMode=ENABLED``), or ``None``: none, or a composite checksum of the parts
    (``...-N``, ``ChecksumType`` ``COMPOSITE``), which is no checksum of the content."""
    crc = head.get("ChecksumCRC32")
    if not crc or head.get("ChecksumType", "FULL_OBJECT") != "FULL_OBJECT" or "-" in str(crc):
        return None
    return str(crc)


#: AWS refuses ``CopyObject`` above 5 GiB: larger objects are copied in parts.
COPY_OBJECT_LIMIT = 5 * 1024**3
#: The part size of a multipart copy (S3 allows 5 MiB to 5 GiB, at most 10,000 parts).
COPY_PART_SIZE = 256 * 1024**2


def _current_rows(page: Any) -> list[ObjectVersion]:
    """The current versions (not delete markers) of a ``ListObjectVersions`` page, by key."""
    return [_version_row(item) for item in page.get("Versions", []) if item["IsLatest"]]


_END = object()


class _ListingPlan:
    """:meth:`ObjectStore.iter_current_versions`: plan the partitions, then list them."""

    def __init__(self, store: ObjectStore, prefix: str, parallel: int, page_size: int) -> None:
        self.store = store
        self.prefix = prefix
        self.parallel = parallel
        self.page_size = page_size
        self.stop = threading.Event()

    # -- the plan: rows already listed, and prefixes to list whole, in key order ---------------
    def _expand(self, prefix: str) -> list[tuple[str, ObjectVersion | None]] | None:
        """The level *prefix*: its files' rows and its sub-prefixes, sorted by key; ``None``
        when it does not fit in one page (then it is listed whole, not split)."""
        store = self.store
        page = store._call(
            store.client.list_object_versions,
            Bucket=store.bucket,
            Prefix=prefix,
            Delimiter="/",
            MaxKeys=self.page_size,
        )
        if page.get("IsTruncated"):
            return None
        items: list[tuple[str, ObjectVersion | None]] = [(r.key, r) for r in _current_rows(page)]
        items += [(str(p["Prefix"]), None) for p in page.get("CommonPrefixes", [])]
        # a key beside a prefix P/ sorts before or after every key under P/ as it does P/
        items.sort(key=lambda item: item[0])
        return items

    def plan(self) -> list[tuple[str, ObjectVersion | None]]:
        items: list[tuple[str, ObjectVersion | None]] = [(self.prefix, None)]
        whole: set[str] = set()  # prefixes too wide to split
        for _ in range(8):  # levels
            open_prefixes = [k for k, row in items if row is None and k not in whole]
            if not open_prefixes or sum(1 for _, row in items if row is None) >= 2 * self.parallel:
                break
            expanded = dict(
                zip(open_prefixes, self.store.map(self._expand, open_prefixes), strict=True)
            )
            new_items: list[tuple[str, ObjectVersion | None]] = []
            for key, row in items:
                if row is None and key in expanded:
                    level = expanded[key]
                    if level is None:
                        whole.add(key)
                        new_items.append((key, None))
                    else:
                        new_items.extend(level)
                else:
                    new_items.append((key, row))
            items = new_items
        return items

    # -- the listing ------------------------------------------------------------------------
    def _produce(self, prefix: str, out: queue.Queue[Any]) -> None:
        store = self.store
        try:
            with s3_errors(f"version listing of {prefix!r}"):
                paginator = store.client.get_paginator("list_object_versions")
                for page in paginator.paginate(
                    Bucket=store.bucket,
                    Prefix=prefix,
                    PaginationConfig={"PageSize": self.page_size},
                ):
                    if not self._put(out, _current_rows(page)):
                        return
        except BaseException as exc:  # handed to the consumer, raised there
            self._put(out, exc)
            return
        self._put(out, _END)

    def _put(self, out: queue.Queue[Any], item: object) -> bool:
        while not self.stop.is_set():
            try:
                out.put(item, timeout=0.2)
                return True
            except queue.Full:
                continue
        return False

    def run(self) -> Iterator[ObjectVersion]:
        items = self.plan()
        prefixes = [key for key, row in items if row is None]
        in_flight: collections.deque[queue.Queue[Any]] = collections.deque()
        launched = 0
        pool = ThreadPoolExecutor(self.parallel, thread_name_prefix="s3-list")

        def launch() -> None:
            nonlocal launched
            while launched < len(prefixes) and len(in_flight) < self.parallel:
                out: queue.Queue[Any] = queue.Queue(maxsize=2)
                pool.submit(self._produce, prefixes[launched], out)
                in_flight.append(out)
                launched += 1

        try:
            for _, row in items:
                launch()
                if row is not None:
                    yield row
                    continue
                out = in_flight.popleft()
                while (got := out.get()) is not _END:
                    if isinstance(got, BaseException):
                        raise got
                    yield from got
                    launch()
        finally:
            self.stop.set()
            pool.shutdown(wait=False, cancel_futures=True)


def copy_object_version(
    target: ObjectStore,
    source: ObjectStore,
    key: str,
    *,
    size: int,
    source_key: str | None = None,
    version_id: str | None = None,
    threshold: int = COPY_OBJECT_LIMIT,
    part_size: int = COPY_PART_SIZE,
) -> None:
    """Server-side copy of one version (default: the current one) of *source_key* (default
    *key*) in *source*'s bucket to *key* in *target*'s.

    Objects of *size* up to *threshold* take one ``CopyObject`` (the ETag, an md5 for single
    uploads, is kept, and so are the user metadata and the full-object checksum); larger
    ones a multipart copy (``UploadPartCopy`` per *part_size*), aborted if any part fails,
    with the source's user metadata (the md5 recorded on objects from parts) and, when the
    source has a full-object CRC32, that CRC32 (S3 checks it against the parts it copied).
    Both buckets on one endpoint (the archive's two), the copies and parts are sent as the
    apply's copies are (:mod:`.signed_copy`), else by botocore.
    """
    source_key = source_key or key
    copy_source: dict[str, str] = {"Bucket": source.bucket, "Key": source_key}
    if version_id is not None:
        copy_source["VersionId"] = version_id
    signed = _signed_copier(target, source)
    if size <= threshold:
        if signed is not None:
            with s3_errors(f"copy_object of {source_key!r} to {key!r}"):
                signed.copy(source_key, key, version_id, source_bucket=source.bucket)
        else:
            target._call(
                target.client.copy_object,
                Bucket=target.bucket,
                Key=key,
                CopySource=copy_source,
                MetadataDirective="COPY",
            )
        return
    head_kwargs: dict[str, Any] = {"Bucket": source.bucket, "Key": source_key}
    if version_id is not None:
        head_kwargs["VersionId"] = version_id
    head = source._call(source.client.head_object, ChecksumMode="ENABLED", **head_kwargs)
    crc = full_object_crc32(head)
    upload_id = target.create_multipart_upload(
        key,
        str(head.get("ContentType") or "application/octet-stream"),
        dict(head.get("Metadata") or {}),  # (the md5 recorded on objects from parts)
        full_object_crc32=crc is not None,
    )

    def copy_part(number: int, start: int, end: int) -> CopiedPart:
        if signed is not None:
            with s3_errors(f"upload_part_copy of {source_key!r} to {key!r}"):
                answer = signed.copy_part(
                    source_key,
                    version_id,
                    key,
                    upload_id,
                    number,
                    start,
                    end,
                    source_bucket=source.bucket,
                )
                return CopiedPart(answer.etag, answer.checksum_crc32)
        response = target._call(
            target.client.upload_part_copy,
            Bucket=target.bucket,
            Key=key,
            UploadId=upload_id,
            PartNumber=number,
            CopySource=copy_source,
            CopySourceRange=f"bytes={start}-{end}",
        )
        return copied_part(response["CopyPartResult"])

    parts: list[tuple[int, CopiedPart]] = []
    try:
        for number, start in enumerate(range(0, size, part_size), start=1):
            parts.append((number, copy_part(number, start, min(start + part_size, size) - 1)))
        crcs = {n: part.checksum_crc32 for n, part in parts if part.checksum_crc32}
        checked = crc is not None and len(crcs) == len(parts)
        target.complete_multipart(
            key,
            upload_id,
            [(n, part.etag) for n, part in parts],
            part_crc32s=crcs if checked else None,
            full_object_crc32=crc if checked else None,
        )
    except BaseException:
        target.abort_multipart_upload(key, upload_id)
        raise


def _signed_copier(target: ObjectStore, source: ObjectStore) -> CopySender | None:
    """*target*'s signed copier if *source*'s bucket is on its endpoint (and both stores
    sign: the in-memory store and boto3's own credential chain do not)."""
    mine: CopySender | None = getattr(target, "_copier", None)
    theirs: CopySender | None = getattr(source, "_copier", None)
    if mine is None or theirs is None or mine.endpoint_url != theirs.endpoint_url:
        return None
    return mine


def delete_versions(store: ObjectStore, versions: list[tuple[str, str]], what: str) -> None:
    """Delete each ``(key, version_id)`` for good, 1000 per request; raises
    :class:`StorageError` naming *what* if S3 refuses any of them."""
    for start in range(0, len(versions), 1000):
        chunk = versions[start : start + 1000]
        response = store._call(
            store.client.delete_objects,
            Bucket=store.bucket,
            Delete={"Objects": [{"Key": k, "VersionId": v} for k, v in chunk], "Quiet": True},
        )
        errors = response.get("Errors") or []
        if errors:
            first = errors[0]
            raise StorageError(
                f"S3 refused to delete {len(errors)} of {len(chunk)} object versions of "
                f"{what}, e.g. {first.get('Key')!r} ({first.get('Code')}: "
                f"{first.get('Message')})"
            )


def purge_checked(store: ObjectStore, prefix: str, *, exact: bool = False) -> int:
    """Delete every version and delete marker under *prefix* (or of exactly the key *prefix*
    when *exact*) for good; raises :class:`StorageError` if S3 refuses any of them."""
    versions = [
        (v.key, v.version_id) for v in store.iter_versions(prefix) if not exact or v.key == prefix
    ]
    delete_versions(store, versions, repr(prefix))
    return len(versions)


def oldest_first(history: list[ObjectVersion]) -> list[ObjectVersion]:
    """One key's versions and delete markers (as S3 lists them: each kind newest first) in
    the order they were written.

    S3's timestamps have one-second precision on some servers: the current entry goes last,
    and ties between a version and a delete marker of the same second otherwise keep
    versions first.
    """
    rank: dict[tuple[bool, str], int] = {}
    for kind in (False, True):
        same = [v for v in history if v.is_delete_marker is kind]
        for position, version in enumerate(reversed(same)):
            rank[(kind, version.version_id)] = position
    return sorted(
        history,
        key=lambda v: (
            v.is_latest,
            v.last_modified,
            v.is_delete_marker,
            rank[(v.is_delete_marker, v.version_id)],
        ),
    )

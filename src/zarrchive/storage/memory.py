"""An object store kept in memory: one versioned bucket, for fast tests of the services.

:class:`MemoryObjectStore` implements :class:`~zarrchive.storage.protocol.ObjectStoreProtocol`
and passes the conformance suite of the S3 store (``tests/storage/conformance.py``): every
put is a new version, deletes add delete markers, listings come in S3's key order, multipart
uploads assemble parts with S3's ``md5-of-md5s-N`` ETag and refuse what S3 refuses.

Its URLs are real: the store answers them on a small HTTP server of its own on 127.0.0.1
(:mod:`zarrchive.storage.memory_http`, started at the first URL asked for), which verifies
each presigned request as S3 does (the SigV4 signature over the signed headers, the expiry,
the ``Content-MD5`` of the body) and serves anonymous GETs of a world-readable bucket.  So a
client PUTs to a presigned URL exactly as it would to S3, in the same process or another.

What it does not do: copies across buckets and the purge across the two buckets of an
unembargo (functions of the S3 implementation); a copy keeps the source's ETag (as
SeaweedFS does, also for an object assembled from parts).
"""

from __future__ import annotations

import hashlib
import secrets
import threading
import urllib.parse
import uuid
import zlib
from collections.abc import Callable, Iterable, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import IO, TYPE_CHECKING, Any, TypeVar

from zarrchive.errors import ChecksumRefused, InvalidInput, StorageError, StorageUnavailable
from zarrchive.storage.crc32 import crc32_base64
from zarrchive.storage.memory_http import MemoryHTTPServer
from zarrchive.storage.objects import (
    CHECKSUM_MODE_HEADER,
    MD5_METADATA,
    CopiedPart,
    ObjectInfo,
    ObjectVersion,
    WrittenVersion,
    md5_to_content_md5,
)
from zarrchive.storage.presign import Credentials, Presigner

if TYPE_CHECKING:
    from zarrchive.storage.protocol import ObjectStoreProtocol

T = TypeVar("T")

#: S3's smallest part (all but the last part of an upload).
MIN_PART_SIZE = 5 * 1024 * 1024
#: What S3 stores when a PUT names no type.
DEFAULT_CONTENT_TYPE = "binary/octet-stream"


def _now() -> datetime:
    return datetime.now(UTC)


@dataclass(frozen=True, slots=True)
class StoredVersion:
    """One version of a key: its bytes, or ``None`` for a delete marker; its full-object
    CRC32 (base64) when it was assembled from an upload created with one."""

    version_id: str
    data: bytes | None
    etag: str
    last_modified: datetime
    content_type: str = DEFAULT_CONTENT_TYPE
    metadata: dict[str, str] = field(default_factory=dict)
    checksum_crc32: str | None = None

    @property
    def is_delete_marker(self) -> bool:
        return self.data is None


@dataclass
class StoredPart:
    etag: str
    data: bytes
    last_modified: datetime
    #: the part's CRC32 (base64), on an upload created with a full-object CRC32
    crc32: str | None = None


@dataclass
class MultipartUpload:
    key: str
    content_type: str
    metadata: dict[str, str]
    initiated: datetime
    parts: dict[int, StoredPart] = field(default_factory=dict)
    #: created with ``ChecksumAlgorithm=CRC32``, ``ChecksumType=FULL_OBJECT``
    full_object_crc32: bool = False


class MemoryObjectStore:
    """One bucket kept in memory (see the module's documentation).

    *reachable* ``False`` makes every call fail as an unreachable S3 does
    (:class:`StorageUnavailable`); *exists* ``False`` is a bucket not created yet
    (:class:`StorageError` until :meth:`ensure_bucket`); *public_read* lets anonymous
    GETs through its URLs; *clock* is the time of new versions and of URL expiry.
    """

    def __init__(
        self,
        bucket: str = "zarrchive",
        *,
        versioned: bool = True,
        exists: bool = True,
        reachable: bool = True,
        public_read: bool = True,
        region: str = "us-east-1",
        access_key_id: str = "memory",
        secret_access_key: str | None = None,
        clock: Callable[[], datetime] = _now,
        max_workers: int = 32,
    ) -> None:
        self.bucket = bucket
        self.region = region
        self.public_read = public_read
        self.reachable = reachable
        self.clock = clock
        self.credentials = Credentials(access_key_id, secret_access_key or secrets.token_hex(16))
        self._exists = exists
        self._versioned = versioned
        self._lock = threading.RLock()
        self._keys: dict[str, list[StoredVersion]] = {}  # oldest first
        self._uploads: dict[str, MultipartUpload] = {}
        #: ``(key, version id)`` that may not be deleted for good (an Object Lock hold)
        self._held: set[tuple[str, str]] = set()
        self._cors: dict[str, Any] | None = None
        self._server: MemoryHTTPServer | None = None
        #: an identity of its own in the caches keyed by endpoint (no two stores share one)
        self.endpoint_url: str | None = f"memory://{uuid.uuid4().hex}"
        self._pool = ThreadPoolExecutor(max_workers=max_workers, thread_name_prefix="mem")
        self._small_pool = ThreadPoolExecutor(max_workers=8, thread_name_prefix="mem-small")

    # -- availability ----------------------------------------------------------------------
    def _check(self, what: str) -> None:
        if not self.reachable:
            raise StorageUnavailable(f"S3 cannot be reached ({what}: in-memory store); retry later")
        if not self._exists:
            raise StorageError(f"S3 {what} failed: NoSuchBucket {self.bucket!r}")

    def ensure_bucket(self, *, versioned: bool = True) -> None:
        if not self.reachable:
            self._check("ensure_bucket")
        with self._lock:
            self._exists = True
            self._versioned = self._versioned or versioned

    def ensure_cors(self, configuration: dict[str, Any]) -> bool:
        self._check("put_bucket_cors")
        self._cors = configuration
        return True

    @contextmanager
    def holding(self, key: str, version_id: str) -> Iterator[None]:
        """While entered, deleting that version of *key* for good is refused (as S3 refuses
        under an Object Lock legal hold)."""
        with self._lock:
            self._held.add((key, version_id))
        try:
            yield
        finally:
            with self._lock:
                self._held.discard((key, version_id))

    # -- URLs --------------------------------------------------------------------------------
    @property
    def origin(self) -> str:
        """``http://127.0.0.1:PORT`` of the store's HTTP server (started on first use)."""
        with self._lock:
            if self._server is None:
                self._server = MemoryHTTPServer(self)
            return self._server.origin

    @property
    def presigner(self) -> Presigner:
        """The signer of the store's URLs (and of the server's checks)."""
        origin = self.origin
        with self._lock:
            assert self._server is not None
            if self._server.presigner is None:
                self._server.presigner = Presigner(origin, self.credentials, self.region)
            return self._server.presigner

    def _presign(
        self,
        method: str,
        key: str,
        expires_in: int,
        headers: dict[str, str] | None = None,
        params: dict[str, str] | None = None,
    ) -> str:
        return self.presigner.url(
            method,
            self.bucket,
            key,
            expires_in,
            headers=headers or None,
            params=params or None,
            now=self.clock(),
        )

    def public_url(self, key: str) -> str:
        return f"{self.origin}/{self.bucket}/{urllib.parse.quote(key, safe='/~')}"

    def public_version_url(self, key: str, version_id: str) -> str:
        return f"{self.public_url(key)}?versionId={urllib.parse.quote(version_id, safe='')}"

    def presign_put(
        self, key: str, md5_hex: str, expires_in: int, content_type: str | None = None
    ) -> str:
        headers = {"Content-MD5": md5_to_content_md5(md5_hex)}
        if content_type:
            headers["Content-Type"] = content_type
        return self._presign("PUT", key, expires_in, headers)

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
        headers = {CHECKSUM_MODE_HEADER: "ENABLED"} if checksum_mode else None
        params = {"versionId": version_id} if version_id else None
        return self._presign("HEAD", key, expires_in, headers, params)

    def presign_get_version(self, key: str, version_id: str, expires_in: int) -> str:
        return self._presign("GET", key, expires_in, params={"versionId": version_id})

    def presign_upload_part(
        self,
        key: str,
        upload_id: str,
        part_number: int,
        expires_in: int,
        md5_hex: str | None = None,
    ) -> str:
        headers = {"Content-MD5": md5_to_content_md5(md5_hex)} if md5_hex else None
        params = {"partNumber": str(part_number), "uploadId": upload_id}
        return self._presign("PUT", key, expires_in, headers, params)

    def presign_complete_multipart(self, key: str, upload_id: str, expires_in: int) -> str:
        return self._presign("POST", key, expires_in, params={"uploadId": upload_id})

    # -- versions ------------------------------------------------------------------------------
    def _new_version_id(self) -> str:
        return uuid.uuid4().hex if self._versioned else "null"

    def _add(self, key: str, version: StoredVersion) -> StoredVersion:
        with self._lock:
            history = self._keys.setdefault(key, [])
            if not self._versioned:
                history.clear()
            history.append(version)
            return version

    def _store(
        self,
        key: str,
        data: bytes,
        *,
        etag: str | None = None,
        content_type: str | None = None,
        metadata: dict[str, str] | None = None,
        checksum_crc32: str | None = None,
    ) -> StoredVersion:
        return self._add(
            key,
            StoredVersion(
                self._new_version_id(),
                bytes(data),
                etag or hashlib.md5(data).hexdigest(),
                self.clock(),
                content_type or DEFAULT_CONTENT_TYPE,
                dict(metadata or {}),
                checksum_crc32,
            ),
        )

    def _current(self, key: str) -> StoredVersion | None:
        """The current version of *key* (``None``: absent or deleted)."""
        with self._lock:
            history = self._keys.get(key)
            if not history or history[-1].is_delete_marker:
                return None
            return history[-1]

    def _version(self, key: str, version_id: str | None) -> StoredVersion | None:
        if version_id is None:
            return self._current(key)
        with self._lock:
            for version in self._keys.get(key, ()):
                if version.version_id == version_id:
                    return version
        return None

    def stored(self, key: str, version_id: str | None = None) -> StoredVersion | None:
        """The stored version (current, or *version_id*) with its type and metadata: what
        the HTTP server answers."""
        self._check(f"GET {key!r}")
        return self._version(key, version_id)

    def _version_id(self, version: StoredVersion) -> str | None:
        return None if version.version_id == "null" else version.version_id

    def _info(self, key: str, version: StoredVersion, *, listed: bool = False) -> ObjectInfo:
        assert version.data is not None
        if listed:  # (a listing says neither the checksum nor the metadata)
            return ObjectInfo(key, len(version.data), version.etag, None, version.last_modified)
        return ObjectInfo(
            key=key,
            size=len(version.data),
            etag=version.etag,
            version_id=self._version_id(version),
            last_modified=version.last_modified,
            full_object_crc32=version.checksum_crc32,
            recorded_md5=version.metadata.get(MD5_METADATA) or None,
        )

    # -- single objects ------------------------------------------------------------------------
    def head(self, key: str, version_id: str | None = None) -> ObjectInfo | None:
        self._check(f"HEAD {key!r}")
        version = self._version(key, version_id)
        if version is None or version.is_delete_marker:
            return None
        return self._info(key, version)

    def get(self, key: str) -> bytes | None:
        self._check(f"GET {key!r}")
        version = self._current(key)
        return None if version is None else version.data

    def get_range(self, key: str, start: int, length: int) -> bytes | None:
        if start < 0 or length < 1:
            raise ValueError(f"a range needs start >= 0 and length >= 1, not {start}, {length}")
        data = self.get(key)
        return None if data is None else data[start : start + length]

    def get_with_etag(self, key: str) -> tuple[bytes, str] | None:
        self._check(f"GET {key!r}")
        version = self._current(key)
        if version is None or version.data is None:
            return None
        return version.data, version.etag

    def put(
        self, key: str, data: bytes, content_type: str = "application/octet-stream"
    ) -> str | None:
        self._check(f"put_object {key!r}")
        return self._version_id(self._store(key, data, content_type=content_type))

    def upload_fileobj(self, key: str, fileobj: IO[bytes], content_type: str) -> None:
        self._check(f"upload of {key!r}")
        self._store(key, fileobj.read(), content_type=content_type)

    def delete(self, key: str) -> None:
        self._check(f"delete_object {key!r}")
        self._add(key, StoredVersion(self._new_version_id(), None, "", self.clock()))

    def delete_many(self, keys: Iterable[str]) -> None:
        for key in keys:
            self.delete(key)

    def delete_version(self, key: str, version_id: str) -> None:
        self._check(f"delete_object {key!r}")
        self._remove([(key, version_id)], repr(key))

    def copy_within(
        self,
        source_key: str,
        key: str,
        version_id: str | None = None,
        *,
        content_type: str | None = None,
    ) -> WrittenVersion:
        self._check(f"copy_object of {source_key!r} to {key!r}")
        source = self._version(source_key, version_id)
        if source is None or source.data is None:
            raise StorageError(
                f"S3 copy_object of {source_key!r} to {key!r} failed: NoSuchKey"
                + (f" (version {version_id})" if version_id else "")
            )
        written = self._store(
            key,
            source.data,
            etag=source.etag,
            content_type=content_type or source.content_type,
            metadata=None if content_type else source.metadata,
            checksum_crc32=source.checksum_crc32,  # (a checksum of the content: kept)
        )
        return WrittenVersion(written.etag, self._version_id(written), written.last_modified)

    def iter_content(
        self, key: str, version_id: str | None = None, chunk_size: int = 8 * 1024 * 1024
    ) -> Iterator[bytes]:
        self._check(f"GET {key!r}")
        version = self._version(key, version_id)
        if version is None or version.data is None:
            raise StorageError(f"S3 GET {key!r} failed: NoSuchKey")
        data = version.data
        for start in range(0, len(data), chunk_size):
            yield data[start : start + chunk_size]

    # -- listings --------------------------------------------------------------------------------
    def _histories(self, prefix: str) -> list[tuple[str, list[StoredVersion]]]:
        """Every key under *prefix* in S3's order (bytes of UTF-8: code points) with a copy
        of its history (oldest first)."""
        self._check(f"listing of {prefix!r}")
        with self._lock:
            return [
                (key, list(history))
                for key, history in sorted(self._keys.items())
                if key.startswith(prefix) and history
            ]

    def iter_objects(self, prefix: str) -> Iterator[ObjectInfo]:
        return self._objects(prefix)

    def _objects(self, prefix: str) -> Iterator[ObjectInfo]:
        # (the listings share these generators, not each other's public methods: a test
        # that counts the calls of one listing counts what the services asked for)
        for key, history in self._histories(prefix):
            if not history[-1].is_delete_marker:
                yield self._info(key, history[-1], listed=True)

    def iter_directory(self, prefix: str, *, start_after: str = "") -> Iterator[ObjectInfo]:
        for info in self._objects(prefix):
            if "/" not in info.key[len(prefix) :] and info.key > start_after:
                yield info

    def iter_prefixes(self, prefix: str) -> Iterator[str]:
        seen: set[str] = set()
        for info in self._objects(prefix):
            rest = info.key[len(prefix) :]
            if "/" in rest:
                sub = prefix + rest.split("/", 1)[0] + "/"
                if sub not in seen:
                    seen.add(sub)
                    yield sub

    def iter_versions(self, prefix: str) -> Iterator[ObjectVersion]:
        return self._versions(prefix)

    def _versions(self, prefix: str) -> Iterator[ObjectVersion]:
        for key, history in self._histories(prefix):
            for position, version in enumerate(reversed(history)):
                yield ObjectVersion(
                    key=key,
                    version_id=version.version_id,
                    is_latest=position == 0,
                    is_delete_marker=version.is_delete_marker,
                    etag=None if version.data is None else version.etag,
                    size=0 if version.data is None else len(version.data),
                    last_modified=version.last_modified,
                )

    def iter_current_versions(
        self, prefix: str, *, parallel: int = 8, page_size: int = 1000
    ) -> Iterator[ObjectVersion]:
        for version in self._versions(prefix):
            if version.is_latest and not version.is_delete_marker:
                yield version

    def latest_version(self, key: str) -> ObjectVersion | None:
        for version in self._versions(key):
            if version.key == key and version.is_latest:
                return version
        return None

    def find(
        self, keys: Iterable[str], *, max_pages: int | None = None
    ) -> dict[str, ObjectInfo | None]:
        return {key: self.head(key) for key in keys}

    # -- removal for good ----------------------------------------------------------------------
    def _remove(self, versions: list[tuple[str, str]], what: str) -> None:
        """Delete each ``(key, version id)`` for good; the held ones stay and are named."""
        refused: list[str] = []
        with self._lock:
            for key, version_id in versions:
                if (key, version_id) in self._held:
                    refused.append(key)
                    continue
                history = self._keys.get(key, [])
                history[:] = [v for v in history if v.version_id != version_id]
                if not history:
                    self._keys.pop(key, None)
        if refused:
            raise StorageError(
                f"S3 refused to delete {len(refused)} of {len(versions)} object versions of "
                f"{what}, e.g. {refused[0]!r} (AccessDenied: the version is held)"
            )

    def purge(self, prefix: str) -> int:
        versions = [(v.key, v.version_id) for v in self.iter_versions(prefix)]
        self._remove(versions, repr(prefix))
        return len(versions)

    def delete_all_versions(self, key: str) -> None:
        versions = [(v.key, v.version_id) for v in self.iter_versions(key) if v.key == key]
        self._remove(versions, repr(key))

    # -- multipart uploads -----------------------------------------------------------------------
    def create_multipart_upload(
        self,
        key: str,
        content_type: str = "application/octet-stream",
        metadata: dict[str, str] | None = None,
        *,
        full_object_crc32: bool = False,
    ) -> str:
        self._check(f"create_multipart_upload {key!r}")
        upload_id = secrets.token_urlsafe(24)
        with self._lock:
            self._uploads[upload_id] = MultipartUpload(
                key,
                content_type,
                dict(metadata or {}),
                self.clock(),
                full_object_crc32=full_object_crc32,
            )
        return upload_id

    def _upload(self, key: str, upload_id: str) -> MultipartUpload | None:
        with self._lock:
            upload = self._uploads.get(upload_id)
        return upload if upload is not None and upload.key == key else None

    def upload_part(self, key: str, upload_id: str, part_number: int, data: bytes) -> str | None:
        """Store part *part_number* of an upload (what a presigned part PUT does); its ETag,
        ``None`` when there is no such upload."""
        self._check(f"upload_part {key!r}")
        if not 1 <= part_number <= 10_000:
            raise InvalidInput(f"a part number is 1..10000, not {part_number}")
        part = self._upload_part(key, upload_id, part_number, data)
        return None if part is None else part.etag

    def _upload_part(
        self, key: str, upload_id: str, part_number: int, data: bytes
    ) -> StoredPart | None:
        upload = self._upload(key, upload_id)
        if upload is None:
            return None
        part = StoredPart(
            hashlib.md5(data).hexdigest(),
            bytes(data),
            self.clock(),
            crc32_base64(zlib.crc32(data)) if upload.full_object_crc32 else None,
        )
        with self._lock:
            upload.parts[part_number] = part
        return part

    def list_parts(self, key: str, upload_id: str) -> dict[int, tuple[str, int]] | None:
        self._check(f"listing the parts of {key!r}")
        upload = self._upload(key, upload_id)
        if upload is None:
            return None
        with self._lock:
            return {n: (p.etag, len(p.data)) for n, p in sorted(upload.parts.items())}

    def upload_activity(self, key: str, upload_id: str) -> datetime | None:
        self._check(f"listing the parts of {key!r}")
        upload = self._upload(key, upload_id)
        if upload is None:
            return None
        with self._lock:
            times = [p.last_modified for p in upload.parts.values()]
        return max(times, default=upload.initiated)

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
        self._check(f"upload_part_copy of {source_key!r}")
        source = self._version(source_key, version_id)
        if source is None or source.data is None:
            raise StorageError(f"S3 upload_part_copy of {source_key!r} failed: NoSuchKey")
        if not 0 <= first <= last < len(source.data):
            raise StorageError(f"S3 upload_part_copy of {source_key!r} failed: InvalidRange")
        part = self._upload_part(key, upload_id, part_number, source.data[first : last + 1])
        if part is None:
            raise StorageError(f"S3 upload_part_copy to {key!r} failed: NoSuchUpload")
        return CopiedPart(part.etag, part.crc32)

    def iter_multipart_uploads(self, prefix: str) -> Iterator[tuple[str, str, datetime | None]]:
        self._check(f"listing the multipart uploads under {prefix!r}")
        with self._lock:
            uploads = sorted(
                (u.key, upload_id, u.initiated)
                for upload_id, u in self._uploads.items()
                if u.key.startswith(prefix)
            )
        yield from uploads

    def complete_multipart_upload(
        self, key: str, upload_id: str, parts: Iterable[tuple[int, str]]
    ) -> str:
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
        """As S3: the parts' CRC32s stated must be theirs (else ``InvalidPart``), a
        full-object CRC32 stated needs an upload created with one and must be the content's
        (else :class:`ChecksumRefused`, ``BadDigest``: the upload stays as it was); an upload
        created with one that is not stated gets the content's."""
        self._check(f"complete_multipart_upload {key!r}")
        listed = [(number, etag.strip('"')) for number, etag in parts]
        crcs = part_crc32s or {}
        with self._lock:
            upload = self._upload(key, upload_id)
            if upload is None:
                raise _refused(key, "NoSuchUpload", "the upload does not exist")
            if not listed:
                raise _refused(key, "MalformedXML", "no parts")
            numbers = [number for number, _ in listed]
            if numbers != sorted(set(numbers)):
                raise _refused(key, "InvalidPartOrder", "parts must be ascending")
            chosen: list[StoredPart] = []
            for number, etag in listed:
                part = upload.parts.get(number)
                if part is None or part.etag != etag:
                    raise _refused(key, "InvalidPart", f"part {number} was not uploaded as {etag}")
                if number in crcs and crcs[number] != part.crc32:
                    raise _refused(key, "InvalidPart", f"part {number} has another CRC32")
                chosen.append(part)
            if any(len(part.data) < MIN_PART_SIZE for part in chosen[:-1]):
                raise _refused(key, "EntityTooSmall", "a part before the last is under 5 MiB")
            digests = b"".join(bytes.fromhex(part.etag) for part in chosen)
            etag = f"{hashlib.md5(digests).hexdigest()}-{len(chosen)}"
            data = b"".join(part.data for part in chosen)
            crc = crc32_base64(zlib.crc32(data)) if upload.full_object_crc32 else None
            if full_object_crc32 is not None and full_object_crc32 != crc:
                raise ChecksumRefused(
                    f"S3 refused to complete the upload of {key!r}: the full-object CRC32 "
                    f"{full_object_crc32} is not its content's (BadDigest)"
                    + ("" if upload.full_object_crc32 else ": the upload has no CRC32")
                )
            written = self._store(
                key,
                data,
                etag=etag,
                content_type=upload.content_type,
                metadata=upload.metadata,
                checksum_crc32=crc,
            )
            del self._uploads[upload_id]
        return WrittenVersion(etag, self._version_id(written), None)

    def abort_multipart_upload(self, key: str, upload_id: str) -> None:
        self._check(f"abort_multipart_upload {key!r}")
        with self._lock:
            if self._upload(key, upload_id) is not None:
                del self._uploads[upload_id]

    def recorded_md5(self, key: str, version_id: str | None = None) -> str | None:
        self._check(f"HEAD {key!r}")
        version = self._version(key, version_id)
        if version is None or version.data is None:
            return None
        return version.metadata.get(MD5_METADATA) or None

    # -- concurrency ------------------------------------------------------------------------------
    def map(self, fn: Callable[[Any], T], items: Iterable[Any]) -> list[T]:
        return list(self._pool.map(fn, items))

    def map_small(self, fn: Callable[[Any], T], items: Iterable[Any]) -> list[T]:
        return list(self._small_pool.map(fn, items))

    def close(self) -> None:
        with self._lock:
            server, self._server = self._server, None
        if server is not None:
            server.close()
        self._pool.shutdown(wait=False, cancel_futures=True)
        self._small_pool.shutdown(wait=False, cancel_futures=True)


def _refused(key: str, code: str, message: str) -> InvalidInput:
    return InvalidInput(f"S3 refused to complete the upload of {key!r}: {code} {message}")


def _memory_conforms(store: MemoryObjectStore) -> ObjectStoreProtocol:
    """Never called: mypy checks here that the in-memory store has every member."""
    return store

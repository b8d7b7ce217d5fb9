"""What the services need of an object store: one versioned bucket.

:class:`ObjectStoreProtocol` lists exactly the members of
:class:`zarrchive.storage.objects.ObjectStore` (S3 through boto3) that the services call;
:class:`zarrchive.storage.memory.MemoryObjectStore` implements them in memory (for fast
tests).  ``tests/storage/conformance.py`` holds the behaviour each of them promises, and
every implementation's test module runs it (as zarr-python's ``StoreTests``). Errors are the
archive's own: :class:`zarrchive.errors.StorageUnavailable` when the store says "later" or
cannot be reached, :class:`zarrchive.errors.StorageError` for any other refusal,
:class:`zarrchive.errors.InvalidInput` for a multipart upload the client got wrong.

The S3 copies across buckets (``copy_object_version``) and the checked purge across the
two buckets of an unembargo stay functions of the S3 implementation.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from datetime import datetime
from typing import IO, Any, Protocol, TypeVar

from zarrchive.storage.objects import (
    CopiedPart,
    ObjectInfo,
    ObjectStore,
    ObjectVersion,
    WrittenVersion,
)

T = TypeVar("T")


class ObjectStoreProtocol(Protocol):
    """One bucket: objects by key, every version kept, delete markers, presigned URLs."""

    #: where the store is (``None``: the provider's default) and its bucket: together they
    #: name the bucket for caches shared by several stores
    endpoint_url: str | None
    bucket: str

    def ensure_bucket(self, *, versioned: bool = True) -> None:
        """Create the bucket if needed (idempotent) and keep every version when *versioned*."""
        ...

    # -- URLs -------------------------------------------------------------------------------
    def public_url(self, key: str) -> str:
        """The plain URL of *key* (percent-encoded) on a world-readable bucket."""
        ...

    def ensure_cors(self, configuration: dict[str, Any]) -> bool:
        """Give the bucket these CORS rules; False when the credentials may not."""
        ...

    def public_version_url(self, key: str, version_id: str) -> str:
        """The plain URL of one version of *key* (``?versionId=``)."""
        ...

    def presign_put(
        self, key: str, md5_hex: str, expires_in: int, content_type: str | None = None
    ) -> str:
        """A URL accepting one PUT of exactly the body of md5 *md5_hex* (``Content-MD5``
        signed; with *content_type*, ``Content-Type`` signed too): any other body or type is
        refused and stores nothing."""
        ...

    def presign_get_version(self, key: str, version_id: str, expires_in: int) -> str:
        """A presigned GET URL of exactly one version of *key*."""
        ...

    def presign_complete_multipart(self, key: str, upload_id: str, expires_in: int) -> str:
        """A presigned POST URL completing a multipart upload (the parts' XML unsigned)."""
        ...

    def presign_get(self, key: str, expires_in: int) -> str:
        """A URL from which anyone may GET the current *key* for *expires_in* seconds."""
        ...

    # -- single objects -----------------------------------------------------------------------
    def presign_head(
        self,
        key: str,
        expires_in: int,
        *,
        version_id: str | None = None,
        checksum_mode: bool = False,
    ) -> str:
        """A presigned HEAD URL of *key* (at *version_id*); with *checksum_mode* it signs
        ``x-amz-checksum-mode: ENABLED`` (the client must send it; S3 then answers the
        object's ``x-amz-checksum-crc32`` and ``x-amz-checksum-type``)."""
        ...

    def head(self, key: str, version_id: str | None = None) -> ObjectInfo | None:
        """The current version of *key* (or its version *version_id*): size, md5 ETag,
        version id, LastModified, its full-object CRC32 (``None``: none, or a composite
        one) and the md5 recorded in its metadata; ``None`` when absent."""
        ...

    def get(self, key: str) -> bytes | None:
        """The content of *key*, ``None`` when absent (or its latest version is a delete marker)."""
        ...

    def get_range(self, key: str, start: int, length: int) -> bytes | None:
        """At most *length* bytes of *key* from byte *start* (fewer when it ends sooner),
        or ``None`` when absent."""
        ...

    def get_with_etag(self, key: str) -> tuple[bytes, str] | None:
        """The content of *key* and the ETag of exactly that content, or ``None``."""
        ...

    def put(
        self, key: str, data: bytes, content_type: str = "application/octet-stream"
    ) -> str | None:
        """Store *data* at *key* as a new version; returns its version id."""
        ...

    def upload_fileobj(self, key: str, fileobj: IO[bytes], content_type: str) -> None:
        """Store the content of *fileobj* at *key* (streamed)."""
        ...

    def delete(self, key: str) -> None:
        """Delete *key*: a delete marker on top of its versions (absent keys too)."""
        ...

    def delete_version(self, key: str, version_id: str) -> None:
        """Delete one version of *key* for good."""
        ...

    def delete_many(self, keys: Iterable[str]) -> None:
        """:meth:`delete` of every key; :class:`StorageError` if any is refused."""
        ...

    def copy_within(
        self,
        source_key: str,
        key: str,
        version_id: str | None = None,
        *,
        content_type: str | None = None,
    ) -> WrittenVersion:
        """Copy *source_key* (at *version_id*, default its current version) to *key*; returns
        the new version as the copy answered: its ETag (the md5 of the content for objects
        written in one PUT), version id and LastModified (what a listing says of it).  With
        *content_type* the copy has that type (and no user metadata), not the source's."""
        ...

    def iter_content(
        self, key: str, version_id: str | None = None, chunk_size: int = 8 * 1024 * 1024
    ) -> Iterator[bytes]:
        """The content of *key* (or of one version of it) in chunks."""
        ...

    # -- listings --------------------------------------------------------------------------------
    def iter_objects(self, prefix: str) -> Iterator[ObjectInfo]:
        """Current objects under *prefix*, in key order."""
        ...

    def iter_directory(self, prefix: str, *, start_after: str = "") -> Iterator[ObjectInfo]:
        """The current objects directly under *prefix* (not in its subdirectories), from
        the first key after *start_after*."""
        ...

    def iter_current_versions(
        self, prefix: str, *, parallel: int = 8, page_size: int = 1000
    ) -> Iterator[ObjectVersion]:
        """The current version of every object under *prefix* (no delete markers), in key
        order (*parallel*, *page_size*: how an implementation may list them)."""
        ...

    def iter_versions(self, prefix: str) -> Iterator[ObjectVersion]:
        """Every version and delete marker under *prefix*: by key, newest first within a key."""
        ...

    def latest_version(self, key: str) -> ObjectVersion | None:
        """The current version or delete marker of exactly *key* (``None``: never written)."""
        ...

    def iter_prefixes(self, prefix: str) -> Iterator[str]:
        """The "subdirectories" directly under *prefix*, each ending with ``/``, in order."""
        ...

    # -- removal for good ----------------------------------------------------------------------
    def purge(self, prefix: str) -> int:
        """Delete every version and delete marker under *prefix* for good; returns how many.
        :class:`StorageError` naming a key if the store refuses any of them."""
        ...

    def delete_all_versions(self, key: str) -> None:
        """Delete every version and delete marker of exactly *key* (not of longer keys)."""
        ...

    # -- multipart uploads (blobs) ------------------------------------------------------------
    def create_multipart_upload(
        self,
        key: str,
        content_type: str = "application/octet-stream",
        metadata: dict[str, str] | None = None,
        *,
        full_object_crc32: bool = False,
    ) -> str:
        """Start a multipart upload of *key* (the object gets user *metadata*); its id.  With
        *full_object_crc32*: ``ChecksumAlgorithm=CRC32``, ``ChecksumType=FULL_OBJECT``."""
        ...

    def upload_activity(self, key: str, upload_id: str) -> datetime | None:
        """When an upload last changed (its newest part, else its start); None: no such upload."""
        ...

    def presign_upload_part(
        self,
        key: str,
        upload_id: str,
        part_number: int,
        expires_in: int,
        md5_hex: str | None = None,
    ) -> str:
        """A PUT URL for part *part_number* (1-based) of the upload (signing the part's
        ``Content-MD5`` when *md5_hex* is given)."""
        ...

    def recorded_md5(self, key: str, version_id: str | None = None) -> str | None:
        """The md5 the archive verified and recorded on an object assembled from parts."""
        ...

    def list_parts(self, key: str, upload_id: str) -> dict[int, tuple[str, int]] | None:
        """The parts held (``number -> (etag, size)``); None: no such upload."""
        ...

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
        """Copy bytes *first*..*last* of a version of *source_key* as a part: its ETag and
        the part's CRC32 S3 computed (an upload created with *full_object_crc32*; else
        ``None``)."""
        ...

    def iter_multipart_uploads(self, prefix: str) -> Iterator[tuple[str, str, datetime | None]]:
        """The uploads in progress under *prefix*: ``(key, upload id, initiated)``."""
        ...

    def complete_multipart_upload(
        self, key: str, upload_id: str, parts: Iterable[tuple[int, str]]
    ) -> str:
        """Assemble the parts ``(number, etag)``; returns the object's ETag. Parts missing,
        out of order or too small and unknown uploads: :class:`InvalidInput`."""
        ...

    def complete_multipart(
        self,
        key: str,
        upload_id: str,
        parts: Iterable[tuple[int, str]],
        *,
        part_crc32s: Mapping[int, str] | None = None,
        full_object_crc32: str | None = None,
    ) -> WrittenVersion:
        """:meth:`complete_multipart_upload`, returning the ETag and version id S3 answered.
        With the parts' CRC32s and the whole object's (base64; an upload created with
        *full_object_crc32*): a CRC32 that is not the content's is refused
        (:class:`~zarrchive.errors.ChecksumRefused`, nothing written)."""
        ...

    def abort_multipart_upload(self, key: str, upload_id: str) -> None:
        """Discard an upload and its parts; unknown uploads are ignored."""
        ...

    # -- concurrency ------------------------------------------------------------------------------
    def map(self, fn: Callable[[Any], T], items: Iterable[Any]) -> list[T]:
        """*fn* over *items*, concurrently, results in order."""
        ...

    def map_small(self, fn: Callable[[Any], T], items: Iterable[Any]) -> list[T]:
        """The same for small requests (``.checksum`` nodes read and written, HEADs), never
        queued behind :meth:`map`'s bulk work."""
        ...

    def close(self) -> None:
        """Release the store's threads and connections."""
        ...


def _s3_conforms(store: ObjectStore) -> ObjectStoreProtocol:
    """Never called: mypy checks here that the S3 implementation has every member."""
    return store

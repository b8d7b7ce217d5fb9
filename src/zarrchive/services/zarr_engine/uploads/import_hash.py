"""Server-side import: the md5s of source objects uploaded in parts, computed by the archive
(``POST /api/zarr/{id}/upload/import/hash/``), so that ``zarrchive upload s3://...`` reads no
byte of the source when the archive copies it.

An object uploaded in parts has an ETag ``<hex>-<parts>``, which is no md5; the uploader
needs the md5 before it opens a batch (to plan against the archive's tree, for the source's
Dandi Zarr checksum, and as the md5 the batch declares).  The archive reads each named object
once, streamed (``GetObject`` with ``If-Match`` the listed ETag, at the listed version if
one was given; :data:`HASH_CHUNK` in memory per read, at most :data:`HASH_STREAMS` reads at
once in the process), and answers its md5.  What it may read is what an import may read
(:func:`~.import_rules.check_source`: ``ZARRCHIVE_IMPORT_BUCKETS``, never the archive's own
buckets, only ``{prefix}/{path}``), for a caller who may write the Zarr (checked first).

Bounded per request: at most :data:`MAX_HASH_FILES` objects and :data:`MAX_HASH_BYTES` of
listed sizes (413 beyond), except that one object alone may be of any size (the only way to
hash it).  A source that changed since it was listed (412 or 404, or a size other than the
listed one) refuses the request (409, naming the files).

The md5 answered is not trusted later: the apply copies such an object in parts while it
hashes it again (:func:`~.import_copy.prepare_imported_copy`), and the copy is visible only
if that md5 is the batch's.  So a file is never recorded with the wrong md5, whatever this
route answered.  Answers are kept in a bounded in-process cache keyed by the source's bucket,
key, ETag and version (:class:`_Cache`): asked again (a rerun of the import), the archive
checks the object still has that ETag (``HeadObject`` with ``If-Match``) and reads nothing.
"""

from __future__ import annotations

import hashlib
import threading
from collections import OrderedDict
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError

from zarrchive.errors import (
    InvalidInput,
    PermissionDenied,
    RequestTooLarge,
    StorageError,
)
from zarrchive.paths import validate_path
from zarrchive.services.identity.auth import Caller
from zarrchive.services.runtime import Archive
from zarrchive.services.zarr_engine.uploads.import_copy import SourceChanged
from zarrchive.services.zarr_engine.uploads.import_rules import (
    archive_may_import,
    source_key,
)
from zarrchive.services.zarr_engine.uploads.records import writable_ref
from zarrchive.storage.objects import ObjectStore

#: The most objects one request may name.
MAX_HASH_FILES = 1000
#: The most bytes (listed sizes) one request naming several objects may make the archive read.
MAX_HASH_BYTES = 2 * 1024**3
#: One read's block: the memory of a read in progress.
HASH_CHUNK = 1024**2
#: Reads of one request at once.
HASH_THREADS = 4
#: Reads at once in the process, whatever the number of requests (bounded memory:
#: ``HASH_STREAMS * HASH_CHUNK``).
HASH_STREAMS = 8
#: Answers kept (an entry is a few hundred bytes).
CACHE_ENTRIES = 100_000

_streams = threading.BoundedSemaphore(HASH_STREAMS)


@dataclass(frozen=True)
class HashSource:
    """A source object to hash: the file *path* of the Zarr (its key is ``{prefix}/{path}``)
    and the *size*, *etag* (and version) it was listed with."""

    path: str
    size: int
    etag: str
    version_id: str | None = None


class _Cache:
    """md5s computed, by ``(bucket, key, etag, version)``: the least recently used dropped
    beyond :data:`CACHE_ENTRIES`."""

    def __init__(self, entries: int) -> None:
        self.entries = entries
        self._md5s: OrderedDict[tuple[str, str, str, str | None], str] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: tuple[str, str, str, str | None]) -> str | None:
        with self._lock:
            md5 = self._md5s.get(key)
            if md5 is not None:
                self._md5s.move_to_end(key)
            return md5

    def put(self, key: tuple[str, str, str, str | None], md5: str) -> None:
        with self._lock:
            self._md5s[key] = md5
            self._md5s.move_to_end(key)
            while len(self._md5s) > self.entries:
                self._md5s.popitem(last=False)

    def clear(self) -> None:
        with self._lock:
            self._md5s.clear()


#: The process's answers (see the module).
cache = _Cache(CACHE_ENTRIES)


def hash_sources(
    archive: Archive,
    user: Caller | None,
    zarr_id: str,
    bucket: str,
    prefix: str,
    files: Sequence[HashSource],
) -> dict[str, str]:
    """The md5 of each of *files* (``path -> md5``), read by the archive from
    ``s3://{bucket}/{prefix}/{path}`` if it still has the listed ETag and size.  Raises
    :class:`PermissionDenied` (403) unless *user* may write the Zarr (checked first) and the
    archive may import from the source, :class:`RequestTooLarge` (413) beyond the bounds,
    :class:`InvalidInput` (400) for a bad path, :class:`SourceChanged` (409)."""
    zarr, _status = writable_ref(archive, user, zarr_id)
    settings = archive.settings
    normalized = archive_may_import(settings, bucket, prefix)
    check_bounds(files)
    problems: list[str] = []
    seen: set[str] = set()
    for item in files:
        try:
            path = validate_path(item.path)
        except InvalidInput as exc:
            problems.append(f"{item.path!r}: {exc}")
            continue
        if path != item.path or path in seen:
            problems.append(f"{item.path!r} is named twice or is not a normalised path")
        if item.size < 0:
            problems.append(f"{item.path!r}: a negative size")
        seen.add(path)
    if problems:
        raise InvalidInput(
            f"{len(problems)} sources can't be hashed: " + "; ".join(problems[:10]),
            detail={"message": "sources can't be hashed", "problems": problems},
        )
    store = archive.store_for(zarr.embargoed)
    if not isinstance(store, ObjectStore):
        raise PermissionDenied("server-side import needs the archive on S3: hash the files")
    reader = _Hasher(store.copy_client, bucket, normalized)
    with ThreadPoolExecutor(HASH_THREADS, thread_name_prefix="import-hash") as pool:
        found = list(pool.map(reader.md5, files))
    changed = sorted(item.path for item, md5 in zip(files, found, strict=True) if md5 is None)
    if changed:
        raise SourceChanged(
            f"{len(changed)} source objects changed since they were listed (another ETag, "
            f"size or version, or gone), e.g. {changed[0]!r}: list the source again",
            detail={"message": "source objects changed", "paths": changed},
        )
    return {item.path: md5 for item, md5 in zip(files, found, strict=True) if md5 is not None}


def check_bounds(files: Sequence[HashSource]) -> None:
    """Refuse (413) more than :data:`MAX_HASH_FILES` objects, or several whose listed sizes
    pass :data:`MAX_HASH_BYTES` (one object alone may be of any size)."""
    if len(files) > MAX_HASH_FILES:
        raise RequestTooLarge(
            f"{len(files)} sources named: at most {MAX_HASH_FILES} are hashed by one request"
        )
    total = sum(max(0, f.size) for f in files)
    if len(files) > 1 and total > MAX_HASH_BYTES:
        raise RequestTooLarge(
            f"the sources named hold {total} bytes: at most {MAX_HASH_BYTES} are hashed by one "
            "request (or one object alone, of any size)"
        )


class _Hasher:
    """Reads and hashes one source object at a time (see the module)."""

    def __init__(self, client: Any, bucket: str, prefix: str) -> None:
        self.client = client
        self.bucket = bucket
        self.prefix = prefix

    def md5(self, item: HashSource) -> str | None:
        """The md5 of *item*'s source, or ``None`` when it changed (or is gone)."""
        key = source_key(self.prefix, item.path)
        where: dict[str, Any] = {"Bucket": self.bucket, "Key": key, "IfMatch": item.etag}
        if item.version_id:
            where["VersionId"] = item.version_id
        cached = cache.get((self.bucket, key, _etag(item.etag), item.version_id))
        try:
            if cached is not None:
                head = self.client.head_object(**where)
                return cached if int(head["ContentLength"]) == item.size else None
            with _streams:
                response = self.client.get_object(**where)
                body = response["Body"]
                try:
                    if int(response["ContentLength"]) != item.size:
                        return None
                    digest = hashlib.md5(usedforsecurity=False)
                    for chunk in body.iter_chunks(HASH_CHUNK):
                        digest.update(chunk)
                finally:
                    body.close()
        except ClientError as exc:
            self._refuse(exc, key)
            return None
        except BotoCoreError as exc:
            raise StorageError(
                f"S3 did not answer the read of s3://{self.bucket}/{key}: {exc}"
            ) from None
        md5 = digest.hexdigest()
        cache.put((self.bucket, key, _etag(item.etag), item.version_id), md5)
        return md5

    def _refuse(self, exc: ClientError, key: str) -> None:
        """Raise for S3's refusal of a read, unless it says the source changed."""
        code = str(exc.response.get("Error", {}).get("Code", ""))
        status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
        where = f"s3://{self.bucket}/{key}"
        if code == "NoSuchBucket":
            raise PermissionDenied(f"the archive can't read {where} ({code})")
        if status in (404, 412) or code in _CHANGED:
            return
        if status == 403 or code in ("AccessDenied", "403", "AllAccessDisabled"):
            raise PermissionDenied(f"the archive can't read {where} ({code}): hash it yourself")
        raise StorageError(f"S3 refused the read of {where}: {code} ({status})")


#: S3's codes of a source that changed (or is gone) since it was listed.
_CHANGED = frozenset({"PreconditionFailed", "NoSuchKey", "NoSuchVersion", "404", "412"})


def _etag(etag: str) -> str:
    return etag.strip().strip('"').lower()


__all__ = [
    "HASH_CHUNK",
    "MAX_HASH_BYTES",
    "MAX_HASH_FILES",
    "HashSource",
    "check_bounds",
    "hash_sources",
]

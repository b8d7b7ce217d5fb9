"""Download a Zarr from the archive into a local directory, and verify a local copy.

The remote tree is read from the archive's listing, skipping every subtree whose
digest equals the local one (see :mod:`zarrchive.client.remote`); the files'
contents come straight from S3 through a :class:`Fetcher`:

- :class:`HttpFetcher` (the default): a plain HTTP GET of the object's public
  URL (the archive's bucket is world-readable), through urllib3
  (:class:`~zarrchive.transport.BodyReader`: the transport's user agent, timeouts and TLS, at
  a third of httpx's cost per stream; through httpx behind a proxy or a redirect);
- any object with the same ``fetch`` method, e.g. one reading through boto3
  with credentials, or (for embargoed Zarrs, once the server offers it) through
  presigned GET URLs obtained from the API.

A fetcher makes one attempt; the :class:`Downloader` retries the whole file (the GET,
the stream, the md5 check) under its retry policy (:func:`zarrchive.transport.run`):
a failed attempt of any kind, before or after the first byte, starts the file again.
:class:`HttpFetcher` reads each body into a buffer of its thread (``readinto``, no
allocation per block) and hands out views of it: a fetcher's *write* is called with blocks
valid only during the call.

The files are read on :data:`DOWNLOAD_JOBS` threads (``--jobs``), each taking the next file
when done.  A file of at least :data:`BIG_FILE` bytes, when the fetcher has ``fetch_range``
(:class:`HttpFetcher` has), comes in parallel ranged GETs of :data:`PART_SIZE` written in
place (memory: one block per connection), each part retried alone, the lowest part number
first across the big files under way (:class:`PartsPool`); its md5 is computed over the
finished prefix while later parts arrive, and a record beside the partial copy
(``NAME.zarrchive-partial.parts``) lists the finished parts, so an interrupted download
resumes with the parts it lacks (the whole file's md5 is checked whatever the record says).

A big file may be checked by S3's CRC32 instead of its md5 (about 8x cheaper: 0.15 s of CPU
per GiB against 1.3 s): when the fetcher has ``head`` (:class:`HttpFetcher` has: an anonymous
HEAD of the public URL, or the presigned HEAD the archive gives for an embargoed Zarr, with
``x-amz-checksum-mode: ENABLED``) and the HEAD answers a full-object CRC32
(``x-amz-checksum-type: FULL_OBJECT``), the archive's md5 in the object's metadata
(``x-amz-meta-zarrchive-md5``, written by the archive with the CRC) equal to the md5 the
listing gives, and the listed size.  Every ranged GET then sends ``If-Match`` with the HEAD's
ETag (an object replaced meanwhile answers 412: the file starts again from its HEAD, its
parts not kept), and the CRC32 of the whole file, computed over the finished prefix as the
md5 would be, must equal S3's: the file's md5 is then the listed one (S3 computed the CRC
over the bytes the archive checked by that md5).  In every other case: the md5.
:class:`DownloadResult` lists the files checked by CRC32.  A record of parts says which
check and which ETag it was made under, and is resumed only under the same.

Every small file is written to ``NAME.zarrchive-partial`` next to its place, its md5
checked while it streams, then renamed into place: an interrupted download
leaves no wrong file behind, and a rerun skips every file already present with
the right md5.  The md5s checked go to the digest cache
(:func:`zarrchive.client.local.digest_cache.store_written`): the next download, verify or upload
of the copy stats these files instead of reading them, and a no-op download is a stat per
file (:meth:`Downloader._cached_root_checksum`).  At the end the tree hash of the files is
compared with the archive's checksum.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import itertools
import json
import os
import queue
import sys
import threading
import zlib
from collections.abc import Callable, Mapping
from concurrent.futures import Future, as_completed, wait
from dataclasses import dataclass, field, replace
from functools import partial as partial_call
from typing import IO, NoReturn, Protocol, TypeVar

import httpx

from zarrchive.checksum import EMPTY_CHECKSUM, ZarrEntry, compute_checksum
from zarrchive.client.api import ApiClient, DownloadLink, ZarrInfo, is_zarr_id
from zarrchive.client.local import WrittenFile, default_jobs, hash_local, transfer_jobs
from zarrchive.client.progress import NullProgress, Progress
from zarrchive.client.remote import (
    RemoteFile,
    RemoteState,
    SubtreeFilter,
    local_digests,
    os_path,
    walk_remote,
)
from zarrchive.errors import (
    InvalidInput,
    LocalFileError,
    NetworkError,
    NotFound,
    ObjectChanged,
    PermissionDenied,
    TransferError,
)
from zarrchive.transport import (
    RETRY_EXCEPTIONS,
    RETRY_STATUSES,
    BodyReader,
    RetryHook,
    RetryPolicy,
    TryAgain,
    http_client,
    parse_retry_after,
    run,
    transport_message,
)

T = TypeVar("T")

PARTIAL_SUFFIX = ".zarrchive-partial"
#: Beside the partial copy of a big file: which of its parts are written (resumption).
PARTS_SUFFIX = ".parts"
S3_TIMEOUT = httpx.Timeout(120.0, connect=10.0)
#: Parallel GETs by default: small files are bound by each request's round trip, not by
#: bandwidth, so more connections than cores pay (a download mostly waits).
DOWNLOAD_JOBS = 16
#: Files of at least this size are read in parallel ranged GETs of :data:`PART_SIZE`
#: (written in place, so memory stays one block per connection whatever the file's size).
BIG_FILE = 64 << 20
PART_SIZE = 16 << 20


#: A block of a body, as a fetcher gives it to *write*: valid only during the call (a
#: fetcher may reuse its buffer for the next block).
Block = bytes | memoryview
#: What a fetcher calls with each block, in order.
Write = Callable[[Block], None]
#: ``fetch_range(file, start, end, write)``: bytes ``[start, end)`` of *file* to *write*, in
#: order, one attempt (errors as for :meth:`Fetcher.fetch`).
RangeFetch = Callable[[RemoteFile, int, int, Write], None]
#: ``head(file)``: what S3 says of the object at ``file.head_url`` (:class:`ObjectHead`), or
#: None when it says nothing usable (no HEAD URL, a refusal): the file is then checked by its
#: md5.  One attempt (errors as for :meth:`Fetcher.fetch`).
HeadFetch = Callable[[RemoteFile], "ObjectHead | None"]
#: S3's full-object checksum type (``x-amz-checksum-type``), the one a whole file's CRC32
#: can be compared with.
FULL_OBJECT = "FULL_OBJECT"


class Fetcher(Protocol):
    """Reads an object's bytes from the object store: one attempt per call.

    Optional methods, looked up by name: ``fetch_range`` (:data:`RangeFetch`: big files then
    come in parallel ranged GETs) and ``head`` (:data:`HeadFetch`: big files may then be
    checked by S3's CRC32 instead of their md5).  A fetcher with ``head`` must send every
    GET of a file whose :attr:`~zarrchive.client.remote.RemoteFile.etag` is set with
    ``If-Match`` and raise :class:`~zarrchive.errors.ObjectChanged` on a 412."""

    def fetch(self, file: RemoteFile, write: Write) -> None:
        """Call *write* with the content of *file*, in order, in blocks (each valid only
        during the call).

        May be called from several threads at once.  Raise
        :class:`~zarrchive.errors.NetworkError` or
        :class:`~zarrchive.transport.TryAgain` for a failure worth another
        attempt (before or after some bytes were written): the caller then starts the
        file again, as its retry policy allows.
        """

    def close(self) -> None:
        """Release connections."""


@dataclass(frozen=True)
class ObjectHead:
    """What a HEAD of an object said (``x-amz-checksum-mode: ENABLED``): its size, ETag,
    checksum (``x-amz-checksum-crc32``, base64 of the 4 big-endian bytes, and its
    ``x-amz-checksum-type``) and the md5 the archive wrote in its metadata."""

    size: int | None
    etag: str | None
    crc32: str | None
    checksum_type: str | None
    md5: str | None

    @classmethod
    def from_headers(cls, headers: Mapping[str, str]) -> ObjectHead:
        """From a HEAD's headers (looked up case-insensitively)."""
        lower = {k.lower(): v for k, v in headers.items()}
        length = lower.get("content-length", "")
        return cls(
            size=int(length) if length.isdigit() else None,
            etag=lower.get("etag") or None,
            crc32=lower.get("x-amz-checksum-crc32") or None,
            checksum_type=lower.get("x-amz-checksum-type") or None,
            md5=lower.get("x-amz-meta-zarrchive-md5") or None,
        )

    def crc32_for(self, file: RemoteFile) -> str | None:
        """The CRC32 (8 hex digits) to check *file* by, or None (then: its md5): only for a
        full-object CRC32 of an object of the listed size whose metadata holds the listed
        md5, with an ETag for the GETs to match."""
        if (
            self.etag is None
            or self.crc32 is None
            or (self.checksum_type or "").upper() != FULL_OBJECT
            or self.size != file.size
            or (self.md5 or "").lower() != file.md5.lower()
        ):
            return None
        try:
            raw = base64.b64decode(self.crc32, validate=True)
        except ValueError:
            return None
        return raw.hex() if len(raw) == 4 else None


class HttpFetcher:
    """GETs the objects' public URLs (no credentials), pooled: through urllib3
    (:class:`~zarrchive.transport.BodyReader`, a third of httpx's cost per stream, each
    body read into a buffer of the thread), through httpx when the environment names a
    proxy for the URL or S3 answers with a redirect.  ``head``: a HEAD of the file's
    ``head_url`` through httpx (one per big file)."""

    def __init__(
        self,
        *,
        max_connections: int = 32,
        headers: dict[str, str] | None = None,
    ) -> None:
        self.http = http_client(
            timeout=S3_TIMEOUT,
            max_connections=max_connections,
            headers=headers,
            follow_redirects=True,
        )
        #: The GETs' faster reader (same user agent, timeouts, TLS; no proxy, no redirect:
        #: those go through :attr:`http`).
        self.bodies = BodyReader(
            timeout=S3_TIMEOUT, max_connections=max_connections, headers=headers
        )

    def fetch(self, file: RemoteFile, write: Write) -> None:
        self._read(file, write, _if_match(file, {}), 200)

    def fetch_range(self, file: RemoteFile, start: int, end: int, write: Write) -> None:
        """Bytes ``[start, end)`` of *file* (a ranged GET: 206)."""
        self._read(file, write, _if_match(file, {"Range": f"bytes={start}-{end - 1}"}), 206)

    def head(self, file: RemoteFile) -> ObjectHead | None:
        """A HEAD of ``file.head_url`` asking for S3's checksum; None without a HEAD URL
        or when S3 answers other than 200 (the file is then checked by its md5)."""
        if file.head_url is None:
            return None
        where = file.head_url.partition("?")[0]  # (never a presigned URL's signature)
        try:
            response = self.http.head(file.head_url, headers={"x-amz-checksum-mode": "ENABLED"})
        except RETRY_EXCEPTIONS as exc:
            raise NetworkError(
                f"cannot HEAD {file.path!r} at {where}: {transport_message(exc)}"
            ) from None
        if response.status_code in RETRY_STATUSES:
            raise TryAgain(
                f"S3 answered {response.status_code} to HEAD {where}",
                retry_after=parse_retry_after(response.headers.get("Retry-After")),
                response=response,
            )
        if response.status_code != 200:
            return None
        return ObjectHead.from_headers(response.headers)

    def _read(
        self,
        file: RemoteFile,
        write: Write,
        headers: dict[str, str] | None,
        expected: int,
    ) -> None:
        """One GET of *file* through urllib3 (:class:`~zarrchive.transport.BodyReader`),
        or through httpx when a proxy or a redirect is in the way."""
        if not self.bodies.direct(file.url):
            self._get(file, write, headers, expected)
            return
        try:
            answer = self.bodies.get(file.url, write, expected=expected, headers=headers)
        except RETRY_EXCEPTIONS as exc:
            raise NetworkError(
                f"cannot download {file.path!r} from {file.url}: {transport_message(exc)}"
            ) from None
        if answer.status == expected:
            return
        if 300 <= answer.status < 400 and "location" in answer.headers:
            self._get(file, write, headers, expected)  # httpx follows it
            return
        self._refused(file, answer.status, answer.as_response())

    def _get(
        self,
        file: RemoteFile,
        write: Write,
        headers: dict[str, str] | None,
        expected: int,
    ) -> None:
        try:
            with self.http.stream("GET", file.url, headers=headers) as response:
                status = response.status_code
                if status == expected:
                    for block in response.iter_raw(1 << 20):
                        write(block)
                    return
                response.read()
        except RETRY_EXCEPTIONS as exc:
            raise NetworkError(
                f"cannot download {file.path!r} from {file.url}: {transport_message(exc)}"
            ) from None
        self._refused(file, status, response)

    def _refused(self, file: RemoteFile, status: int, response: httpx.Response) -> NoReturn:
        """The error for an answer other than the one expected."""
        if status in RETRY_STATUSES:
            raise TryAgain(
                f"S3 answered {status} to GET {file.url}",
                retry_after=parse_retry_after(response.headers.get("Retry-After")),
                response=response,
            )
        if status == 403:
            raise TransferError(
                f"S3 refused to serve {file.url} (403): the object is not public "
                "(an embargoed Zarr?): this needs a fetcher with credentials"
            )
        if status == 404:
            raise TransferError(
                f"{file.path!r} is listed by the archive but absent from S3 ({file.url})"
            )
        if status == 412 and file.etag is not None:
            raise ObjectChanged(
                f"{file.path!r} changed on S3 while it was read (its ETag is no longer {file.etag})"
            )
        raise TransferError(f"S3 answered {status} to GET {file.url}")

    def close(self) -> None:
        self.http.close()
        self.bodies.close()


def _if_match(file: RemoteFile, headers: dict[str, str]) -> dict[str, str]:
    """*headers* with ``If-Match`` when *file* names the ETag its GETs must match."""
    if file.etag is not None:
        headers["If-Match"] = file.etag
    return headers


# -- results ----------------------------------------------------------------------------
@dataclass
class DownloadResult:
    zarr_id: str
    remote_checksum: str
    local_checksum: str
    files: int
    downloaded: int = 0
    downloaded_bytes: int = 0
    skipped: int = 0
    deleted: int = 0
    #: Local files that are not in the archive (kept: no --sync).
    extra: list[str] = field(default_factory=list)
    #: The files downloaded that were checked by S3's full-object CRC32 (tied to the listed
    #: md5 by the object's metadata) instead of an md5 of their bytes.
    crc32: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.local_checksum == self.remote_checksum


@dataclass
class VerifyResult:
    zarr_id: str
    remote_checksum: str
    local_checksum: str
    #: In the archive, not local.
    missing: list[str] = field(default_factory=list)
    #: Both, with different content.
    differ: list[str] = field(default_factory=list)
    #: Local, not in the archive.
    extra: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not (self.missing or self.differ or self.extra)


def require_token(client: ApiClient, zarr: ZarrInfo) -> None:
    """Refuse, with a clear message, to read an embargoed Zarr without a token."""
    if client.token is None:
        raise PermissionDenied(
            f"Zarr {zarr.zarr_id} belongs to the embargoed dandiset {zarr.dandiset}: reading it "
            "needs the API token of an owner (--token or ZARRCHIVE_TOKEN)"
        )


def resolve_zarr(client: ApiClient, ref: str) -> ZarrInfo:
    """A Zarr by id, or ``DANDISET/PATH``: the draft's Zarr asset at PATH, else the
    dandiset's Zarr named PATH."""
    ref = ref.strip()
    if is_zarr_id(ref):
        return client.get_zarr(ref)
    dandiset, sep, name = ref.partition("/")
    if not sep or not dandiset or not name:
        raise InvalidInput(f"{ref!r} is neither a Zarr id (a UUID) nor DANDISET/PATH")
    asset = client.find_asset(dandiset, name)
    if asset is not None:
        if asset.zarr_id is None:
            raise InvalidInput(f"the asset {name!r} of dandiset {dandiset} is not a Zarr")
        return client.get_zarr(asset.zarr_id)
    found = client.find_zarr(dandiset, name)
    if found is None:
        raise NotFound(f"dandiset {dandiset} has no Zarr {name!r}")
    return found


@dataclass
class _Comparison:
    zarr: ZarrInfo
    entries: list[ZarrEntry]
    #: Remote files that are absent locally or differ.
    fetch: list[RemoteFile]
    #: Local files (outside identical subtrees) that match the archive.
    matching: list[ZarrEntry]
    missing: list[str]
    differ: list[str]
    extra: list[str]
    identical_files: list[ZarrEntry]


class Downloader:
    """Downloads and verifies Zarrs of the archive of *client*.

    Each file is tried up to *retry*'s attempts (default: the client's policy), and
    *on_retry* (default: the client's hook) hears of every retry.
    """

    def __init__(
        self,
        client: ApiClient,
        *,
        jobs: int | None = None,
        progress: Progress | None = None,
        fetcher: Fetcher | None = None,
        retry: RetryPolicy | None = None,
        on_retry: RetryHook | None = None,
        big_file: int = BIG_FILE,
        part_size: int = PART_SIZE,
    ) -> None:
        self.client = client
        self.retry = retry or client.retry
        self.on_retry = on_retry or client.on_retry
        self.jobs = transfer_jobs(jobs if jobs is not None else max(DOWNLOAD_JOBS, default_jobs()))
        self.progress: Progress = progress or NullProgress()
        self._own_fetcher = fetcher is None
        self.fetcher: Fetcher = fetcher or HttpFetcher(max_connections=2 * self.jobs)
        if part_size < 1:
            raise InvalidInput(f"the part size must be at least 1 byte, got {part_size}")
        self.big_file = big_file
        self.part_size = part_size
        #: The fetcher's ranged reads, if it has them (else big files come in one GET).
        self._range_fetch: RangeFetch | None = getattr(self.fetcher, "fetch_range", None)
        #: The fetcher's HEADs, if it has them (else every file is checked by its md5).
        self._head: HeadFetch | None = getattr(self.fetcher, "head", None)

    def close(self) -> None:
        if self._own_fetcher:
            self.fetcher.close()

    def __enter__(self) -> Downloader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- what to read (overridden by zarrchive.client.snapshot.SnapshotDownloader) -------------
    def _resolve(self, ref: str | ZarrInfo) -> ZarrInfo:
        return ref if isinstance(ref, ZarrInfo) else resolve_zarr(self.client, ref)

    def _remote_state(self, zarr: ZarrInfo, digests: dict[str, str]) -> RemoteState:
        return walk_remote(
            self.client, zarr.zarr_id, digests, root_digest=zarr.checksum, jobs=self.jobs
        )

    def _object_url(self, zarr: ZarrInfo, path: str) -> str:
        return zarr.object_url(path)

    def _private_links(self, zarr: ZarrInfo, paths: list[str]) -> dict[str, DownloadLink]:
        return self.client.download_links(zarr.zarr_id, paths)

    # -- comparing ------------------------------------------------------------------------
    def _local_entries(self, root: str) -> list[ZarrEntry]:
        if not os.listdir(root):
            return []
        self.progress.start("hashing", None, None)
        return hash_local(root, jobs=self.jobs, progress=self.progress.advance)

    def _cached_root_checksum(self, root: str) -> str | None:
        """The local checksum from the digest cache's directory digests (``None`` without
        a usable cache: then :meth:`_compare` hashes, once)."""
        from zarrchive.client.local.digest_cache import default_cache
        from zarrchive.client.local.tree import scan_tree

        cache = default_cache()
        if cache is None:
            return None
        self.progress.start("hashing", None, None)
        done = [0, 0]

        def report(files: int, nbytes: int) -> None:
            self.progress.advance(files - done[0], nbytes - done[1])
            done[0], done[1] = files, nbytes

        jobs = min(self.jobs, default_jobs())
        return scan_tree(root, cache=cache, jobs=jobs, progress=report).checksum

    def _compare(self, zarr: ZarrInfo, root: str) -> _Comparison:
        # (a big file's partial copy kept for resumption is not one of the Zarr's files)
        entries = [e for e in self._local_entries(root) if not _is_partial(e.path)]
        digests = local_digests(entries)
        if not entries:
            digests[""] = EMPTY_CHECKSUM
        remote = self._remote_state(zarr, digests)
        same = SubtreeFilter(remote.identical)
        identical_files: list[ZarrEntry] = []
        local: dict[str, ZarrEntry] = {}
        for entry in entries:
            if same(entry.path):
                identical_files.append(entry)
            else:
                local[entry.path] = entry
        fetch: list[RemoteFile] = []
        matching: list[ZarrEntry] = []
        missing: list[str] = []
        differ: list[str] = []
        for path, (md5, size) in sorted(remote.files.items()):
            mine = local.get(path)
            if mine is not None and mine.md5 == md5:
                matching.append(mine)
                continue
            (missing if mine is None else differ).append(path)
            url = self._object_url(zarr, path)
            head = url if size >= self.big_file else None  # (a public object can be HEADed)
            fetch.append(RemoteFile(path, md5, size, url, head_url=head))
        extra = sorted(p for p in local if p not in remote.files)
        return _Comparison(zarr, entries, fetch, matching, missing, differ, extra, identical_files)

    def verify(self, ref: str | ZarrInfo, local: str | os.PathLike[str]) -> VerifyResult:
        """Compare a local directory with a Zarr of the archive, without transferring data."""
        zarr = self._resolve(ref)
        root = _existing_directory(local)
        # Unchanged local files: the cached directory digests give the root's checksum at the
        # cost of a stat per entry; equal to the archive's, nothing else is needed.
        same = self._cached_root_checksum(root)
        if same is not None and same == zarr.checksum:
            self.progress.stop()
            return VerifyResult(zarr_id=zarr.zarr_id, remote_checksum=same, local_checksum=same)
        comparison = self._compare(zarr, root)
        self.progress.stop()
        return VerifyResult(
            zarr_id=zarr.zarr_id,
            remote_checksum=zarr.checksum,
            local_checksum=local_digests(comparison.entries).get("", EMPTY_CHECKSUM),
            missing=comparison.missing,
            differ=comparison.differ,
            extra=comparison.extra,
        )

    # -- downloading ------------------------------------------------------------------------
    def download(
        self, ref: str | ZarrInfo, dest: str | os.PathLike[str], *, sync: bool = False
    ) -> DownloadResult:
        """Make *dest* hold the Zarr's files (and, with *sync*, nothing else)."""
        zarr = self._resolve(ref)
        # An embargoed Zarr is read through presigned URLs from the API (unless the
        # caller brought a fetcher of its own, e.g. with S3 credentials).
        private = self._own_fetcher and self.client.is_private(zarr.dandiset)
        if private:
            require_token(self.client, zarr)
        root = os.fspath(dest)
        if os.path.lexists(root) and not os.path.isdir(root):
            raise LocalFileError(f"{root!r} exists and is not a directory")
        try:
            os.makedirs(root, exist_ok=True)
        except OSError as exc:
            raise LocalFileError(f"cannot create {root!r}: {exc.strerror}") from None
        resumable = _remove_partials(root)
        if zarr.file_count:
            # Unchanged local files: the cached directory digests give the root's checksum at
            # the cost of a stat per entry; equal to the archive's, there is nothing to do
            # (the checksum covers every file: none is missing, different or extra).
            same = self._cached_root_checksum(root)
            if same is not None and same == zarr.checksum:
                self.progress.stop()
                return DownloadResult(
                    zarr_id=zarr.zarr_id,
                    remote_checksum=same,
                    local_checksum=same,
                    files=zarr.file_count,
                    skipped=zarr.file_count,
                )
        comparison = self._compare(zarr, root)
        result = DownloadResult(
            zarr_id=zarr.zarr_id,
            remote_checksum=zarr.checksum,
            local_checksum="",
            files=zarr.file_count,
            skipped=len(comparison.identical_files) + len(comparison.matching),
        )
        if sync and comparison.extra:
            for path in comparison.extra:
                _unlink(os_path(root, path))
            _prune_empty_directories(root, comparison.extra)
            result.deleted = len(comparison.extra)
        elif comparison.extra:
            result.extra = comparison.extra
        fetch = comparison.fetch
        wanted = {os_path(root, f.path) + PARTIAL_SUFFIX for f in fetch if f.size >= self.big_file}
        for stale in resumable - wanted:  # a big file's parts no longer needed
            _unlink(stale + PARTS_SUFFIX)
            _unlink(stale)
        if private and fetch:
            links = self._private_links(zarr, [f.path for f in fetch])
            fetch = [
                replace(
                    f,
                    url=links[f.path].url,
                    head_url=links[f.path].head_url if f.size >= self.big_file else None,
                )
                for f in fetch
            ]
        verified = self._fetch_all(root, fetch, result)
        final = [
            *comparison.identical_files,
            *comparison.matching,
            *(ZarrEntry(f.path, f.size, f.md5) for f in verified),
        ]
        result.local_checksum = compute_checksum(final) if final else EMPTY_CHECKSUM
        self.progress.stop()
        return result

    def _fetch_all(
        self, root: str, files: list[RemoteFile], result: DownloadResult
    ) -> list[RemoteFile]:
        if not files:
            return []
        self.progress.start("download", len(files), sum(f.size for f in files))
        written: list[WrittenFile] = []
        made: set[str] = {root}
        # Big files first: their parts keep every connection busy while the small ones
        # fill the gaps (a big file last would leave one file's parts as the tail).
        ordered = sorted(files, key=lambda f: f.size < self.big_file)
        parts_pool = (
            PartsPool(self.jobs)
            if ordered[0].size >= self.big_file and self._range_fetch is not None
            else None
        )
        stop = threading.Event()
        by_crc32: list[str] = []
        try:
            _run_all(
                min(self.jobs, len(files)),
                ordered,
                lambda f: written.append(
                    self._fetch_one(root, f, made, parts_pool, stop, by_crc32)
                ),
                stop,
            )
        finally:
            if parts_pool is not None:
                parts_pool.shutdown()
            self._remember(written)
        result.crc32 = sorted(by_crc32)
        result.downloaded = len(files)
        result.downloaded_bytes = sum(f.size for f in files)
        return files

    def _remember(self, written: list[WrittenFile]) -> None:
        """Put the md5s checked while downloading in the digest cache: the next command
        (a no-op download, verify, upload) stats these files instead of reading them."""
        from zarrchive.client.local.digest_cache import default_cache, store_written

        cache = default_cache()
        if cache is not None and written:
            store_written(cache, written)

    def _prepare_place(self, root: str, file: RemoteFile, made: set[str]) -> str:
        final = os_path(root, file.path)
        parent = os.path.dirname(final)
        if parent not in made:
            try:
                os.makedirs(parent, exist_ok=True)
            except FileExistsError:
                raise LocalFileError(
                    f"cannot write {file.path!r}: {parent!r} is a file locally (the archive has "
                    "a directory there); use --sync to replace it"
                ) from None
            except NotADirectoryError:
                raise LocalFileError(
                    f"cannot write {file.path!r}: a parent is a file locally; use --sync"
                ) from None
            made.add(parent)
        if os.path.isdir(final):
            raise LocalFileError(
                f"cannot write {file.path!r}: it is a directory locally (the archive has a "
                "file there); use --sync to replace it"
            )
        return final

    def _fetch_one(
        self,
        root: str,
        file: RemoteFile,
        made: set[str],
        parts_pool: PartsPool | None,
        stop: threading.Event,
        by_crc32: list[str],
    ) -> WrittenFile:
        final = self._prepare_place(root, file, made)
        partial = final + PARTIAL_SUFFIX
        attempt: Callable[[], bool]
        retry_on: tuple[type[Exception], ...] = (NetworkError,)
        if parts_pool is not None and file.size >= self.big_file:
            # (each part retries its own failures: the file is tried again only when its
            # checksum is wrong once all parts are in, or the object changed meanwhile)
            attempt, retry_on = (
                partial_call(self._fetch_ranges, file, partial, parts_pool, stop),
                (),
            )
        else:
            attempt = partial_call(self._fetch_whole, file, partial)
        crc32 = self._retried(attempt, file, f"GET {file.path!r}", retry_on)
        if crc32:
            by_crc32.append(file.path)
        os.replace(partial, final)
        _unlink(partial + PARTS_SUFFIX)
        self.progress.advance(1, 0)
        return os.path.dirname(final), os.path.basename(final), os.stat(final), file.md5

    def _fetch_whole(self, file: RemoteFile, partial: str) -> bool:
        """One attempt at *file* in one GET: *partial* holds its checked bytes after (by
        md5: False)."""
        sink = _Sink(self.progress)
        try:
            with open(partial, "wb") as out:
                sink.out = out
                self.fetcher.fetch(file, sink.write)
        except OSError as exc:
            _unlink(partial)
            self.progress.advance(0, -sink.size)
            raise LocalFileError(f"cannot write {partial!r}: {exc.strerror}") from None
        except BaseException:
            _unlink(partial)
            self.progress.advance(0, -sink.size)
            raise
        md5 = sink.digest.hexdigest()
        if md5 != file.md5 or sink.size != file.size:
            self.progress.advance(0, -sink.size)
            _unlink(partial)
            raise _mismatch(file, md5, sink.size)
        return False

    def _fetch_ranges(
        self, file: RemoteFile, partial: str, pool: PartsPool, stop: threading.Event
    ) -> bool:
        """One attempt at a big *file* in parallel ranged GETs written in place: the parts
        a previous attempt or run finished (:class:`_PartsRecord`) under the same check are
        kept; its checksum (S3's CRC32 when :meth:`_crc32_of` finds one, else the md5) is
        computed over the file's finished prefix while the later parts arrive.  True when
        checked by CRC32."""
        fetch_range = self._range_fetch
        assert fetch_range is not None
        file, crc32 = self._crc32_of(file)
        record = _PartsRecord.load(
            partial, file, self.part_size, "md5" if crc32 is None else "crc32"
        )
        try:
            fd = os.open(partial, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as exc:
            raise LocalFileError(f"cannot write {partial!r}: {exc.strerror}") from None
        hasher = _PrefixHasher(
            fd, record, hashlib.md5(usedforsecurity=False) if crc32 is None else _Crc32()
        )
        try:
            if not record.done:
                os.ftruncate(fd, file.size)
            self.progress.advance(0, record.done_bytes())
            hasher.advance()
            futures = {
                pool.submit(
                    index, partial_call(self._fetch_part, fetch_range, file, fd, start, end)
                ): index
                for index, (start, end) in enumerate(record.ranges)
                if index not in record.done
            }
            try:
                for future in as_completed(futures):
                    if stop.is_set():  # another file failed, or Ctrl-C: keep what is done
                        raise _Stopped
                    future.result()
                    record.finish(futures[future])
                    hasher.advance()
            except BaseException as exc:
                for future in futures:
                    future.cancel()
                wait(futures)
                self.progress.advance(0, -record.done_bytes())
                if isinstance(exc, ObjectChanged):  # its parts are of an older object
                    _unlink(record.path)
                    _unlink(partial)
                    raise TryAgain(exc.args[0]) from None
                raise
            got = hasher.hexdigest()
        except OSError as exc:
            raise LocalFileError(f"cannot write {partial!r}: {exc.strerror}") from None
        finally:
            os.close(fd)
        if got != (file.md5 if crc32 is None else crc32):
            self.progress.advance(0, -file.size)
            _unlink(record.path)
            _unlink(partial)
            if crc32 is None:
                raise _mismatch(file, got, file.size)
            raise TryAgain(
                f"{file.path!r}: the downloaded bytes have CRC32 {got}, S3 says {crc32} "
                f"({file.size} bytes)"
            )
        return crc32 is not None

    def _crc32_of(self, file: RemoteFile) -> tuple[RemoteFile, str | None]:
        """*file* with the ETag its GETs must match and the CRC32 to check it by, when its
        HEAD ties S3's full-object CRC32 to the listed md5 (:meth:`ObjectHead.crc32_for`);
        else *file* as it is and None (check the md5)."""
        head = self._head
        if head is None or file.head_url is None:
            return file, None
        answer = self._retried(partial_call(head, file), file, f"HEAD {file.path!r}")
        crc32 = None if answer is None else answer.crc32_for(file)
        if answer is None or crc32 is None:
            return file, None
        return replace(file, etag=answer.etag), crc32

    def _retried(
        self,
        attempt: Callable[[], T],
        file: RemoteFile,
        what: str,
        retry_on: tuple[type[Exception], ...] = (NetworkError,),
    ) -> T:
        """*attempt* (a request about *file*) under the retry policy (also retrying
        *retry_on*), its last failure as this module's errors."""
        try:
            return run(self.retry, attempt, what=what, on_retry=self.on_retry, retry_on=retry_on)
        except TryAgain as exc:
            raise TransferError(exc.reason) from None
        except RETRY_EXCEPTIONS as exc:  # from a fetcher of the caller's
            raise NetworkError(f"cannot download {file.path!r}: {transport_message(exc)}") from None

    def _fetch_part(
        self, fetch_range: RangeFetch, file: RemoteFile, fd: int, start: int, end: int
    ) -> None:
        """Bytes ``[start, end)`` of *file* written at their place in *fd*, retried alone."""

        def attempt() -> None:
            offset = [start]

            def write(block: Block) -> None:
                if offset[0] + len(block) > end:
                    raise TryAgain(f"{file.path!r}: S3 sent more than the range asked")
                os.pwrite(fd, block, offset[0])
                offset[0] += len(block)
                self.progress.advance(0, len(block))

            try:
                fetch_range(file, start, end, write)
                if offset[0] != end:
                    raise TryAgain(
                        f"{file.path!r}: S3 sent {offset[0] - start} bytes of a range of "
                        f"{end - start}"
                    )
            except BaseException:
                self.progress.advance(0, start - offset[0])
                raise

        self._retried(attempt, file, f"GET {file.path!r} bytes {start}-{end - 1}")


class _Stopped(Exception):
    """The download stops (another file failed, or Ctrl-C): a big file leaves its parts."""


def _mismatch(file: RemoteFile, md5: str, size: int) -> TryAgain:
    return TryAgain(
        f"{file.path!r}: the downloaded bytes have md5 {md5} "
        f"({size} bytes), the archive says {file.md5} ({file.size} bytes)"
    )


def _run_all(
    jobs: int,
    items: list[RemoteFile],
    work: Callable[[RemoteFile], object],
    stop: threading.Event,
) -> None:
    """``work(item)`` for every item on *jobs* threads that take the next item when done
    (no future per item: 10^6 files cost no memory beyond their list); the first error
    (or Ctrl-C) sets *stop* and stops the others (each finishes the small file it has; a big
    file stops after its part under way) and is raised."""
    lock = threading.Lock()
    queue = iter(items)
    failed: list[BaseException] = []

    def worker() -> None:
        while True:
            with lock:
                if failed:
                    return
                item = next(queue, None)
            if item is None:
                return
            try:
                work(item)
            except BaseException as exc:
                with lock:
                    failed.append(exc)
                stop.set()
                return

    threads = [
        threading.Thread(target=worker, name=f"zarrchive-get-{i}", daemon=True) for i in range(jobs)
    ]
    for thread in threads:
        thread.start()
    try:
        for thread in threads:
            while thread.is_alive():
                thread.join(0.5)  # (a bare join would not hear Ctrl-C)
    except BaseException as exc:
        with lock:
            failed.append(exc)
        stop.set()
        for thread in threads:
            thread.join()
        raise
    if failed:
        raise next((e for e in failed if not isinstance(e, _Stopped)), failed[0])


class PartsPool:
    """The threads reading the big files' parts, the lowest part number first across the
    files under way (A0, B0, C0, A1, ...; not one file's parts after another's): every file's
    finished prefix grows at the same pace, so their md5s (:class:`_PrefixHasher`, one thread
    per file) are computed side by side while the parts arrive, and what is left to hash
    when the last part lands is a few parts of each file, hashed in parallel, instead of a
    whole window of parts of the last file, hashed by one thread."""

    def __init__(self, threads: int) -> None:
        self._queue: queue.PriorityQueue[
            tuple[int, int, Future[None] | None, Callable[[], None] | None]
        ] = queue.PriorityQueue()
        self._order = itertools.count()
        self._closing = False
        self._threads = [
            threading.Thread(target=self._work, name=f"zarrchive-range-{i}", daemon=True)
            for i in range(threads)
        ]
        for thread in self._threads:
            thread.start()

    def submit(self, rank: int, work: Callable[[], None]) -> Future[None]:
        """*work* run by the next free thread after every pending work of a lower rank."""
        future: Future[None] = Future()
        self._queue.put((rank, next(self._order), future, work))
        return future

    def _work(self) -> None:
        while True:
            _, _, future, work = self._queue.get()
            if future is None or work is None:
                return
            if self._closing:
                future.cancel()
                continue
            if not future.set_running_or_notify_cancel():
                continue
            try:
                work()
            except BaseException as exc:
                future.set_exception(exc)
            else:
                future.set_result(None)

    def shutdown(self) -> None:
        """Cancel what is pending, wait for the work under way."""
        self._closing = True
        for _ in self._threads:  # (ranked after any pending work: each thread takes one)
            self._queue.put((sys.maxsize, next(self._order), None, None))
        for thread in self._threads:
            thread.join()


class _PartsRecord:
    """Which parts of a big file's partial copy are written: ``NAME.zarrchive-partial.parts``
    beside it (JSON: the file's md5, size and part size, the check (``md5`` or ``crc32``) and
    the ETag its GETs matched (``null``: none), the finished parts), so that an interrupted
    download resumes with the parts it lacks.  Rewritten (atomically) as each part finishes;
    a record for other content, another part size, another check or another ETag starts
    over (a record from before the checks were named: ``md5``, no ETag).  The whole file's
    checksum is checked at the end whatever the record says."""

    def __init__(
        self, path: str, file: RemoteFile, part_size: int, check: str, done: set[int]
    ) -> None:
        self.path = path
        self.file = file
        self.part_size = part_size
        self.check = check
        self.ranges = [
            (start, min(start + part_size, file.size)) for start in range(0, file.size, part_size)
        ]
        self.done = done
        self._lock = threading.Lock()

    @classmethod
    def load(cls, partial: str, file: RemoteFile, part_size: int, check: str) -> _PartsRecord:
        """The record beside *partial*, for *file* (and its ETag) checked by *check*."""
        path = partial + PARTS_SUFFIX
        done: set[int] = set()
        try:
            with open(path, encoding="utf-8") as source:
                saved = json.load(source)
            if (
                isinstance(saved, dict)
                and saved.get("md5") == file.md5
                and saved.get("size") == file.size
                and saved.get("part_size") == part_size
                and saved.get("check", "md5") == check
                and saved.get("etag") == file.etag
                and os.path.getsize(partial) == file.size
            ):
                count = -(-file.size // part_size)
                done = {i for i in saved.get("done", []) if isinstance(i, int) and 0 <= i < count}
        except (OSError, ValueError):
            done = set()
        if not done:
            _unlink(path)
        return cls(path, file, part_size, check, done)

    def done_bytes(self) -> int:
        with self._lock:
            return sum(self.ranges[i][1] - self.ranges[i][0] for i in self.done)

    def finish(self, index: int) -> None:
        with self._lock:
            self.done.add(index)
            text = json.dumps(
                {
                    "md5": self.file.md5,
                    "size": self.file.size,
                    "part_size": self.part_size,
                    "check": self.check,
                    "etag": self.file.etag,
                    "done": sorted(self.done),
                }
            )
        temporary = self.path + ".new"
        with open(temporary, "w", encoding="utf-8") as out:
            out.write(text)
        os.replace(temporary, self.path)


class _Digest(Protocol):
    def update(self, data: Block, /) -> None: ...

    def hexdigest(self) -> str: ...


class _Crc32:
    """A running CRC32 (zlib's: the one S3 computes) with a hash's ``update``/``hexdigest``
    (8 hex digits)."""

    def __init__(self) -> None:
        self.value = 0

    def update(self, data: Block, /) -> None:
        self.value = zlib.crc32(data, self.value)

    def hexdigest(self) -> str:
        return f"{self.value:08x}"


class _PrefixHasher:
    """The checksum (an md5 or a CRC32) of a file written out of order: it reads back (from
    the page cache, into one buffer) and hashes the finished parts that follow what it has
    hashed, so the digest is ready when the last part arrives, with no part held in memory."""

    BLOCK = 1 << 20

    def __init__(self, fd: int, record: _PartsRecord, digest: _Digest) -> None:
        self.fd = fd
        self.record = record
        self.digest = digest
        self.next_part = 0
        self._buffer = memoryview(bytearray(self.BLOCK))

    def advance(self) -> None:
        ranges, done = self.record.ranges, self.record.done
        while self.next_part < len(ranges) and self.next_part in done:
            start, end = ranges[self.next_part]
            while start < end:
                view = self._buffer[: min(self.BLOCK, end - start)]
                count = os.preadv(self.fd, [view], start)
                if not count:
                    raise TryAgain(f"{self.record.file.path!r}: the partial file is short")
                self.digest.update(view[:count])
                start += count
            self.next_part += 1

    def hexdigest(self) -> str:
        return self.digest.hexdigest()


class _Sink:
    """Writes a download to its partial file, hashing it and reporting progress."""

    def __init__(self, progress: Progress) -> None:
        self.progress = progress
        self.digest = hashlib.md5(usedforsecurity=False)
        self.size = 0
        self.out: IO[bytes] | None = None

    def write(self, block: Block) -> None:
        assert self.out is not None
        self.digest.update(block)
        self.size += len(block)
        self.out.write(block)
        self.progress.advance(0, len(block))


def _existing_directory(local: str | os.PathLike[str]) -> str:
    root = os.fspath(local)
    if not os.path.isdir(root):
        if os.path.lexists(root):
            raise LocalFileError(f"{root!r} is not a directory")
        raise LocalFileError(f"{root!r}: no such file or directory")
    return root


def _unlink(path: str) -> None:
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)


def _is_partial(path: str) -> bool:
    return path.endswith((PARTIAL_SUFFIX, PARTIAL_SUFFIX + PARTS_SUFFIX))


def _remove_partials(root: str) -> set[str]:
    """Remove the partial files an interrupted download left behind, except the big files'
    with a record of their parts (:class:`_PartsRecord`): their paths are returned."""
    kept: set[str] = set()
    for directory, _dirs, files in os.walk(root):
        names = set(files)
        for name in files:
            if name.endswith(PARTIAL_SUFFIX):
                if name + PARTS_SUFFIX in names:
                    kept.add(os.path.join(directory, name))
                else:
                    _unlink(os.path.join(directory, name))
            elif (
                name.endswith(PARTIAL_SUFFIX + PARTS_SUFFIX)
                and name[: -len(PARTS_SUFFIX)] not in names
            ) or name.endswith(PARTIAL_SUFFIX + PARTS_SUFFIX + ".new"):
                _unlink(os.path.join(directory, name))
    return kept


def _prune_empty_directories(root: str, deleted: list[str]) -> None:
    """Remove the directories that deleting *deleted* left empty (never *root*)."""
    candidates: set[str] = set()
    for path in deleted:
        parts = path.split("/")[:-1]
        for i in range(len(parts), 0, -1):
            candidates.add("/".join(parts[:i]))
    for directory in sorted(candidates, key=lambda d: d.count("/"), reverse=True):
        with contextlib.suppress(OSError):
            os.rmdir(os_path(root, directory))


__all__ = [
    "BIG_FILE",
    "DOWNLOAD_JOBS",
    "FULL_OBJECT",
    "PARTIAL_SUFFIX",
    "PARTS_SUFFIX",
    "PART_SIZE",
    "Block",
    "DownloadResult",
    "Downloader",
    "Fetcher",
    "HeadFetch",
    "HttpFetcher",
    "ObjectHead",
    "PartsPool",
    "RangeFetch",
    "VerifyResult",
    "Write",
    "require_token",
    "resolve_zarr",
]

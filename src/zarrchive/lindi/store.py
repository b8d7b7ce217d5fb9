"""A read-only zarr-python 3 ``Store`` over a LINDI reference file system.

Byte ranges of other files are read with ``os.pread`` (local files) or HTTP
range requests, concurrently (a thread pool) and through an LRU cache bounded
in bytes.  Raw chunks shorter than their chunk shape (the last row-aligned piece
of a split contiguous dataset) are padded for Zarr; chunks with codecs are
returned untouched.
"""

from __future__ import annotations

import asyncio
import os
import threading
from collections import OrderedDict
from collections.abc import AsyncIterator, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import numpy as np
from zarr.abc.store import (
    ByteRequest,
    OffsetByteRequest,
    RangeByteRequest,
    Store,
    SuffixByteRequest,
)
from zarr.core.buffer import Buffer, BufferPrototype

import zarrchive.lindi.refs as rfs_mod
from zarrchive.errors import InvalidLindiFile, RemoteReadError
from zarrchive.transport import (
    RETRY_EXCEPTIONS,
    RETRY_STATUSES,
    RetryHook,
    RetryPolicy,
    http_client,
    send,
)

DEFAULT_CACHE_BYTES = 256 * 1024 * 1024
DEFAULT_WORKERS = 8
#: Range reads of referenced files: a few quick attempts.
DEFAULT_RETRY = RetryPolicy(attempts=4, base_delay=0.2, max_delay=2.0, max_retry_after=30.0)


_CLIENT: httpx.Client | None = None
_CLIENT_LOCK = threading.Lock()


def shared_client() -> httpx.Client:
    """One HTTP client per process (thread-safe; making one costs tens of milliseconds)."""
    global _CLIENT
    with _CLIENT_LOCK:
        if _CLIENT is None:
            _CLIENT = http_client(
                timeout=httpx.Timeout(60.0, connect=20.0),
                max_connections=4 * DEFAULT_WORKERS,
                follow_redirects=True,
            )
        return _CLIENT


class RangeReader:
    """Concurrent, cached reads of byte ranges of local files and http(s) URLs."""

    def __init__(
        self,
        *,
        max_workers: int = DEFAULT_WORKERS,
        cache_bytes: int = DEFAULT_CACHE_BYTES,
        http_client: httpx.Client | None = None,
        retry: RetryPolicy | None = None,
        on_retry: RetryHook | None = None,
    ) -> None:
        self.retry = retry or DEFAULT_RETRY
        self.on_retry = on_retry
        self._max_workers = max_workers
        self._cache_bytes = cache_bytes
        self._cache: OrderedDict[tuple[str, int, int], bytes] = OrderedDict()
        self._cached = 0
        self._lock = threading.Lock()
        self._fds: dict[str, int] = {}
        self._pool: ThreadPoolExecutor | None = None
        self._client = http_client
        self._own_client = http_client is None
        #: Number of reads that went to a file or the network (not the cache).
        self.fetch_count = 0

    # -- cache --------------------------------------------------------------
    def _cache_get(self, key: tuple[str, int, int]) -> bytes | None:
        with self._lock:
            data = self._cache.get(key)
            if data is not None:
                self._cache.move_to_end(key)
            return data

    def _cache_put(self, key: tuple[str, int, int], data: bytes) -> None:
        if len(data) > self._cache_bytes // 4:
            return
        with self._lock:
            if key in self._cache:
                return
            self._cache[key] = data
            self._cached += len(data)
            while self._cached > self._cache_bytes and self._cache:
                _, old = self._cache.popitem(last=False)
                self._cached -= len(old)

    # -- sources --------------------------------------------------------------
    def _fd(self, path: str) -> int:
        with self._lock:
            fd = self._fds.get(path)
            if fd is None:
                try:
                    fd = os.open(path, os.O_RDONLY)
                except OSError as exc:
                    raise InvalidLindiFile(
                        f"cannot open {path!r}, referenced by the LINDI file: {exc.strerror}"
                    ) from exc
                self._fds[path] = fd
            return fd

    def _http(self) -> httpx.Client:
        if self._client is None:
            self._client = shared_client()
        return self._client

    def _fetch(self, url: str, offset: int, size: int) -> bytes:
        self.fetch_count += 1
        if size == 0:
            return b""
        if not rfs_mod.is_remote(url):
            fd = self._fd(url)
            parts: list[bytes] = []
            got = 0
            while got < size:
                part = os.pread(fd, size - got, offset + got)
                if not part:
                    raise InvalidLindiFile(
                        f"{url!r} ends before byte {offset + size} (range {offset}+{size}):"
                        " the file changed since the LINDI file was made"
                    )
                parts.append(part)
                got += len(part)
            return parts[0] if len(parts) == 1 else b"".join(parts)
        return self._fetch_http(url, offset, size)

    def _fetch_http(self, url: str, offset: int, size: int) -> bytes:
        headers = {"Range": f"bytes={offset}-{offset + size - 1}"}
        try:
            resp = send(
                self._http(),
                "GET",
                url,
                policy=self.retry,
                on_retry=self.on_retry,
                headers=headers,
            )
        except httpx.HTTPError as exc:
            tried = (
                f" after {self.retry.attempts} attempts"
                if isinstance(exc, RETRY_EXCEPTIONS)
                else ""
            )
            raise RemoteReadError(f"reading bytes of {url} failed{tried}: {exc}") from exc
        if resp.status_code == 206:
            data = resp.content
            if len(data) != size:
                raise RemoteReadError(
                    f"{url} returned {len(data)} bytes for a range of {size} bytes"
                )
            return data
        if resp.status_code == 200:  # the server ignores ranges
            data = resp.content[offset : offset + size]
            if len(data) != size:
                raise RemoteReadError(f"{url} is shorter than {offset + size} bytes")
            return data
        if resp.status_code in RETRY_STATUSES:
            raise RemoteReadError(
                f"reading bytes of {url} failed after {self.retry.attempts} attempts: "
                f"{url} answered HTTP {resp.status_code}"
            )
        raise RemoteReadError(
            f"reading bytes {offset}-{offset + size - 1} of {url} failed: HTTP"
            f" {resp.status_code}; check that the URL is right and public"
        )

    # -- public ---------------------------------------------------------------
    def read(self, url: str, offset: int, size: int) -> bytes:
        key = (url, offset, size)
        data = self._cache_get(key)
        if data is None:
            data = self._fetch(url, offset, size)
            self._cache_put(key, data)
        return data

    def read_many(self, ranges: Sequence[rfs_mod.ByteRange]) -> list[bytes]:
        """The bytes of each range, in order.

        Ranges of the same file that are close together are read as one block
        (fewer requests and system calls); remote blocks are fetched concurrently.
        """
        out: list[bytes | None] = [self._cache_get((r.url, r.offset, r.size)) for r in ranges]
        todo = [i for i, d in enumerate(out) if d is None]
        if not todo:
            return [d if d is not None else b"" for d in out]
        blocks = coalesce([ranges[i] for i in todo], todo)
        remote = [b for b in blocks if rfs_mod.is_remote(b.url)]
        results: dict[int, bytes] = {}
        if remote and (len(remote) > 1 or remote[0].size > 2 * REMOTE_PART):
            # every block, large ones in parts, as concurrent requests
            pool = self._executor()
            futures = [
                (b, [pool.submit(self._fetch, b.url, start, size) for start, size in _parts(b)])
                for b in remote
            ]
            for block, parts in futures:
                datas = [fut.result() for fut in parts]
                results[id(block)] = datas[0] if len(datas) == 1 else b"".join(datas)
        for block in blocks:
            data = results.get(id(block))
            if data is None:
                data = self._fetch(block.url, block.offset, block.size)
            view = memoryview(data)
            for index, r in zip(block.indices, block.members, strict=True):
                piece = (
                    data
                    if (r.offset == block.offset and r.size == len(data))
                    else bytes(view[r.offset - block.offset : r.offset - block.offset + r.size])
                )
                self._cache_put((r.url, r.offset, r.size), piece)
                out[index] = piece
        return [d if d is not None else b"" for d in out]

    def _executor(self) -> ThreadPoolExecutor:
        with self._lock:
            if self._pool is None:
                self._pool = ThreadPoolExecutor(self._max_workers, thread_name_prefix="lindi-read")
            return self._pool

    def close(self) -> None:
        with self._lock:
            for fd in self._fds.values():
                os.close(fd)
            self._fds.clear()
            self._cache.clear()
            self._cached = 0
            if self._pool is not None:
                self._pool.shutdown(wait=False)
                self._pool = None
            if self._client is not None and self._own_client:
                self._client = None  # the shared client stays open for other readers


#: Ranges of a local file closer than this are read together.
LOCAL_GAP = 64 * 1024
#: Ranges of a remote file closer than this are read together (one request).
REMOTE_GAP = 512 * 1024
#: The largest block read at once.
MAX_BLOCK = 16 * 1024 * 1024


#: Remote blocks larger than twice this are fetched as concurrent requests of this size.
REMOTE_PART = 256 * 1024


def _parts(block: Block) -> list[tuple[int, int]]:
    if block.size <= 2 * REMOTE_PART:
        return [(block.offset, block.size)]
    return [
        (start, min(REMOTE_PART, block.end - start))
        for start in range(block.offset, block.end, REMOTE_PART)
    ]


class Block:
    """A byte range covering several requested ranges of one file."""

    def __init__(self, url: str, offset: int, end: int) -> None:
        self.url = url
        self.offset = offset
        self.end = end
        self.members: list[rfs_mod.ByteRange] = []
        self.indices: list[int] = []

    @property
    def size(self) -> int:
        return self.end - self.offset


def coalesce(ranges: Sequence[rfs_mod.ByteRange], indices: Sequence[int]) -> list[Block]:
    """Group *ranges* into blocks of nearby ranges of the same file (pure)."""
    order = sorted(range(len(ranges)), key=lambda i: (ranges[i].url, ranges[i].offset))
    blocks: list[Block] = []
    current: Block | None = None
    for i in order:
        r = ranges[i]
        gap = REMOTE_GAP if rfs_mod.is_remote(r.url) else LOCAL_GAP
        end = r.offset + r.size
        if (
            current is None
            or current.url != r.url
            or r.offset > current.end + gap
            or max(end, current.end) - current.offset > MAX_BLOCK
        ):
            current = Block(r.url, r.offset, end)
            blocks.append(current)
        current.end = max(current.end, end)
        current.members.append(r)
        current.indices.append(indices[i])
    return blocks


def _is_chunk_name(name: str) -> bool:
    return bool(name) and all(part.isdigit() for part in name.replace("/", ".").split("."))


class LindiReferenceStore(Store):
    """A read-only zarr-python 3 store over a LINDI reference file system.

    *rfs* is the parsed ``{"version": 1, "refs": ...}`` object; *base* the
    location (path or URL) of the file it came from, used for ``./relative``
    locations.  The synchronous methods :meth:`get_bytes` and
    :meth:`get_many_bytes` serve :class:`zarrchive.lindi.File` directly.
    """

    supports_writes = False
    supports_deletes = False
    supports_listing = True

    def __init__(
        self,
        rfs: Mapping[str, Any],
        *,
        base: str | None = None,
        reader: RangeReader | None = None,
    ) -> None:
        super().__init__(read_only=True)
        self.rfs: dict[str, Any] = rfs_mod.validate(dict(rfs))
        self.base = base
        self.refs: dict[str, Any] = self.rfs["refs"]
        self.templates: dict[str, str] = dict(self.rfs.get("templates") or {})
        self.reader = reader or RangeReader()
        self._own_reader = reader is None
        self._zarray_cache: dict[str, dict[str, Any] | None] = {}
        self._ranges: dict[str, rfs_mod.ByteRange] = {}
        self._urls: dict[str, str] = {}

    def __eq__(self, value: object) -> bool:
        return isinstance(value, LindiReferenceStore) and value.rfs is self.rfs

    def __hash__(self) -> int:
        return id(self.rfs)

    def __repr__(self) -> str:
        return f"LindiReferenceStore({len(self.refs)} keys, base={self.base!r})"

    # -- synchronous core ------------------------------------------------------
    def byte_range(self, key: str) -> rfs_mod.ByteRange | None:
        value = self.refs.get(key)
        if isinstance(value, list):
            return rfs_mod.byte_range(value, self.templates, self.base)
        return None

    def _local(self, key: str) -> bytes | None:
        value = self.refs.get(key)
        if isinstance(value, dict):
            return rfs_mod.meta_bytes(value)
        if isinstance(value, str):
            return rfs_mod.decode_inline(value)
        return None

    def get_bytes(self, key: str) -> bytes | None:
        """The content of *key*, or ``None`` if the key is absent."""
        return self.get_many_bytes([key])[key]

    def get_many_bytes(self, keys: Iterable[str]) -> dict[str, bytes | None]:
        """The content of each key (``None`` if absent), remote ranges read concurrently."""
        out: dict[str, bytes | None] = {}
        remote: list[tuple[str, rfs_mod.ByteRange]] = []
        ranges = self._ranges
        for key in keys:
            rng = ranges.get(key)
            if rng is not None:
                remote.append((key, rng))
                continue
            value = self.refs.get(key)
            if isinstance(value, list):
                url = self._urls.get(value[0])
                if url is None:
                    url = rfs_mod.resolve_location(
                        rfs_mod.expand_template(value[0], self.templates), self.base
                    )
                    self._urls[value[0]] = url
                rng = rfs_mod.ByteRange(url, int(value[1]), int(value[2]))
                ranges[key] = rng
                remote.append((key, rng))
            else:
                out[key] = self._local(key)
        if remote:
            datas = self.reader.read_many([r for _, r in remote])
            for (key, _), data in zip(remote, datas, strict=True):
                out[key] = data
        return out

    def json(self, key: str) -> dict[str, Any] | None:
        value = self.refs.get(key)
        if isinstance(value, dict):
            return value
        data = self.get_bytes(key)
        if data is None:
            return None
        return rfs_mod.json_object(key, data)

    def _pad(self, key: str, data: bytes) -> bytes:
        parent, name = rfs_mod.split_key(key)
        if not _is_chunk_name(name):
            return data
        if parent not in self._zarray_cache:
            self._zarray_cache[parent] = self.json(f"{parent}/.zarray" if parent else ".zarray")
        zarray = self._zarray_cache[parent]
        if zarray is None or zarray.get("filters") or zarray.get("compressor") is not None:
            return data
        try:
            dtype = np.dtype(zarray["dtype"]) if isinstance(zarray["dtype"], str) else None
        except TypeError:
            return data
        if dtype is None or dtype.kind == "O":
            return data
        expected = int(np.prod(zarray["chunks"])) * dtype.itemsize
        if len(data) < expected:
            return data + b"\0" * (expected - len(data))
        return data

    # -- zarr Store API ---------------------------------------------------------
    async def get(
        self, key: str, prototype: BufferPrototype, byte_range: ByteRequest | None = None
    ) -> Buffer | None:
        if key not in self.refs:
            return None
        if isinstance(self.refs[key], list):
            data = await asyncio.to_thread(self.get_bytes, key)
        else:
            data = self._local(key)
        if data is None:
            return None
        data = self._pad(key, data)
        if byte_range is not None:
            data = _slice(data, byte_range)
        return prototype.buffer.from_bytes(data)

    async def get_partial_values(
        self, prototype: BufferPrototype, key_ranges: Iterable[tuple[str, ByteRequest | None]]
    ) -> list[Buffer | None]:
        return list(await asyncio.gather(*(self.get(k, prototype, r) for k, r in key_ranges)))

    async def exists(self, key: str) -> bool:
        return key in self.refs

    async def set(self, key: str, value: Buffer) -> None:
        self._check_writable()

    async def delete(self, key: str) -> None:
        self._check_writable()

    async def list(self) -> AsyncIterator[str]:
        for key in list(self.refs):
            yield key

    async def list_prefix(self, prefix: str) -> AsyncIterator[str]:
        for key in list(self.refs):
            if key.startswith(prefix):
                yield key

    async def list_dir(self, prefix: str) -> AsyncIterator[str]:
        prefix = prefix.rstrip("/")
        start = f"{prefix}/" if prefix else ""
        seen: set[str] = set()
        for key in list(self.refs):
            if key.startswith(start):
                head = key[len(start) :].split("/", 1)[0]
                if head not in seen:
                    seen.add(head)
                    yield head

    def close(self) -> None:
        super().close()
        if self._own_reader:
            self.reader.close()


def _slice(data: bytes, request: ByteRequest) -> bytes:
    if isinstance(request, RangeByteRequest):
        return data[request.start : request.end]
    if isinstance(request, OffsetByteRequest):
        return data[request.offset :]
    if isinstance(request, SuffixByteRequest):
        return data[-request.suffix :] if request.suffix else b""
    raise TypeError(f"unexpected byte request {request!r}")

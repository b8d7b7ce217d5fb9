"""Read a Zarr of the archive with zarr-python 3: :func:`open_store`.

::

    import zarr, zarrchive
    group = zarr.open_group(zarrchive.open_store("ZARR_ID"), mode="r")
    data = group["array"][0:10]

Why a store of our own rather than fsspec's ``HTTPFileSystem`` or obstore: the
objects are plain public S3 objects, read with HTTP GETs (with ``Range`` for
partial reads) through one pooled :mod:`httpx` client, which the client already
depends on (fsspec's HTTP needs aiohttp, obstore a compiled extension; neither is
installed); listing (for ``group.members()``) comes from the archive's API,
which knows the tree from its ``.checksum`` nodes, where a public bucket may not
allow anonymous listing; and reads go through a pluggable :class:`ObjectReader`,
the hook for embargoed Zarrs (reads authorised by the API rather than anonymous).

Sync I/O runs in worker threads (``asyncio.to_thread``), so the store works from
any event loop, including zarr's own.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import AsyncIterator, Iterable
from typing import Protocol
from urllib.parse import quote, urlsplit

import httpx
from zarr.abc.store import (
    ByteRequest,
    OffsetByteRequest,
    RangeByteRequest,
    Store,
    SuffixByteRequest,
)
from zarr.core.buffer import Buffer, BufferPrototype

from zarrchive.client.address import is_versioned_address
from zarrchive.client.api import ApiClient, ZarrInfo, is_zarr_id
from zarrchive.client.download import require_token, resolve_zarr
from zarrchive.errors import ApiError, InvalidInput, NetworkError, TransferError
from zarrchive.transport import (
    RETRY_EXCEPTIONS,
    RetryHook,
    RetryPolicy,
    http_client,
    send,
    transport_message,
)

S3_TIMEOUT = httpx.Timeout(60.0, connect=10.0)


class ObjectReader(Protocol):
    """Reads the objects of one Zarr (synchronously; called from worker threads)."""

    def read(self, path: str, range_header: str | None = None) -> bytes | None:
        """The bytes of the file *path* (``Range``-style slice if given), or None if absent."""

    def exists(self, path: str) -> bool:
        """Whether the file *path* exists."""

    def close(self) -> None:
        """Release connections."""


class HttpObjectReader:
    """Plain HTTP GETs of ``base_url + path`` (a public bucket: no credentials).

    Absent objects answer 404, or 403 from a bucket that does not allow anonymous
    listing (S3 hides whether a key exists then): both read as "absent".
    *headers* are sent with every request (never the archive token: S3 is another host).
    """

    def __init__(
        self,
        base_url: str,
        *,
        headers: dict[str, str] | None = None,
        max_connections: int = 32,
        retry: RetryPolicy | None = None,
        on_retry: RetryHook | None = None,
    ) -> None:
        self.base_url = base_url if base_url.endswith("/") else base_url + "/"
        self.retry = retry or RetryPolicy(attempts=4)
        self.on_retry = on_retry
        self.http = http_client(
            timeout=S3_TIMEOUT,
            max_connections=max_connections,
            headers=headers,
            follow_redirects=True,
        )

    def url(self, path: str) -> str:
        return self.base_url + quote(path, safe="/~")

    def _request(self, method: str, path: str, headers: dict[str, str]) -> httpx.Response:
        url = self.url(path)
        try:
            return send(
                self.http, method, url, policy=self.retry, on_retry=self.on_retry, headers=headers
            )
        except RETRY_EXCEPTIONS as exc:
            raise NetworkError(f"cannot read {url}: {transport_message(exc)}") from None
        except (httpx.HTTPError, httpx.InvalidURL) as exc:  # not the network: the request
            raise TransferError(f"cannot read {url}: {transport_message(exc)}") from None

    def read(self, path: str, range_header: str | None = None) -> bytes | None:
        headers = {"Range": range_header} if range_header else {}
        response = self._request("GET", path, headers)
        if response.status_code in (200, 206):
            return response.content
        if response.status_code in (403, 404):
            return None
        if response.status_code == 416:  # range past the end
            return b""
        raise TransferError(f"S3 answered {response.status_code} to GET {self.url(path)}")

    @staticmethod
    def _content(response: httpx.Response) -> bytes | None:
        """The body of a successful GET; ``None`` for 404; ``b""`` for a range past the end."""
        if response.status_code in (200, 206):
            return response.content
        if response.status_code == 404:
            return None
        if response.status_code == 416:
            return b""
        raise TransferError(f"S3 answered {response.status_code} to GET {response.request.url}")

    def exists(self, path: str) -> bool:
        response = self._request("HEAD", path, {})
        return response.status_code == 200

    def close(self) -> None:
        self.http.close()


class PresignedObjectReader(HttpObjectReader):
    """Reads an embargoed Zarr's objects through presigned URLs the API hands out.

    URLs are asked for one path at a time and kept until shortly before they expire;
    existence is asked of the API (a presigned GET URL cannot answer a HEAD).
    """

    def __init__(self, api: ApiClient, zarr_id: str, *, max_connections: int = 32) -> None:
        super().__init__("presigned://", max_connections=max_connections)
        self.api, self.zarr_id = api, zarr_id
        self._urls: dict[str, tuple[str, float]] = {}
        self._lifetime = 300.0  # re-ask well before any server's presign expiry

    def url(self, path: str) -> str:
        cached = self._urls.get(path)
        if cached is None or cached[1] < time.monotonic():
            cached = (self._presign(path), time.monotonic() + self._lifetime)
            self._urls[path] = cached
        return cached[0]

    def _presign(self, path: str) -> str:
        """A fresh presigned GET URL of *path*, asked of the API."""
        return self.api.download_urls(self.zarr_id, [path])[path]

    def read(self, path: str, range_header: str | None = None) -> bytes | None:
        """A presigned URL answers 403 when it expired (or was revoked): that is never
        "absent".  The URL is asked for again once; a second refusal is an error, so zarr
        never fills a chunk it was not allowed to read."""
        headers = {"Range": range_header} if range_header else {}
        response = self._request("GET", path, headers)
        if response.status_code == 403:
            self._urls.pop(path, None)
            response = self._request("GET", path, headers)
            if response.status_code == 403:
                raise TransferError(
                    f"S3 refused to read {path!r} of Zarr {self.zarr_id} even through a fresh "
                    "presigned URL (403): check the token's access to the dandiset"
                )
        return self._content(response)

    def exists(self, path: str) -> bool:
        return self.api.get_file(self.zarr_id, path) is not None


def range_header(request: ByteRequest | None) -> str | None:
    """The HTTP ``Range`` header of a zarr byte request."""
    if request is None:
        return None
    if isinstance(request, RangeByteRequest):
        if request.end <= request.start:
            return None
        return f"bytes={request.start}-{request.end - 1}"
    if isinstance(request, OffsetByteRequest):
        return f"bytes={request.offset}-"
    if isinstance(request, SuffixByteRequest):
        return f"bytes=-{request.suffix}"
    raise TypeError(f"unexpected byte request {request!r}")


class ZarrchiveStore(Store):
    """A read-only zarr-python 3 store over one Zarr of the archive.

    Reads go through *reader*; listing through *api* (the archive's listing of
    Zarr *zarr_id*) when given, else the store cannot list (opening groups and
    arrays by path still works: zarr reads ``zarr.json`` documents).
    """

    supports_writes = False
    supports_deletes = False
    supports_partial_writes = False
    supports_listing = True

    def __init__(
        self,
        reader: ObjectReader,
        *,
        api: ApiClient | None = None,
        zarr_id: str | None = None,
        own: bool = True,
    ) -> None:
        super().__init__(read_only=True)
        self.reader = reader
        self.api = api
        self.zarr_id = zarr_id
        self._own = own

    def __eq__(self, value: object) -> bool:
        return (
            isinstance(value, ZarrchiveStore)
            and value.reader is self.reader
            and value.zarr_id == self.zarr_id
        )

    def __hash__(self) -> int:
        return hash((id(self.reader), self.zarr_id))

    def __repr__(self) -> str:
        where = getattr(self.reader, "base_url", type(self.reader).__name__)
        return f"ZarrchiveStore({self.zarr_id or where!r})"

    # -- reading ------------------------------------------------------------------------
    async def get(
        self, key: str, prototype: BufferPrototype, byte_range: ByteRequest | None = None
    ) -> Buffer | None:
        if isinstance(byte_range, RangeByteRequest) and byte_range.end <= byte_range.start:
            data = await asyncio.to_thread(self.reader.read, key, None)
            return None if data is None else prototype.buffer.from_bytes(b"")
        data = await asyncio.to_thread(self.reader.read, key, range_header(byte_range))
        if data is None:
            return None
        return prototype.buffer.from_bytes(data)

    async def get_partial_values(
        self, prototype: BufferPrototype, key_ranges: Iterable[tuple[str, ByteRequest | None]]
    ) -> list[Buffer | None]:
        return list(await asyncio.gather(*(self.get(k, prototype, r) for k, r in key_ranges)))

    async def exists(self, key: str) -> bool:
        return await asyncio.to_thread(self.reader.exists, key)

    async def set(self, key: str, value: Buffer) -> None:
        self._check_writable()

    async def delete(self, key: str) -> None:
        self._check_writable()

    # -- listing ------------------------------------------------------------------------
    def _require_api(self) -> tuple[ApiClient, str]:
        if self.api is None or self.zarr_id is None:
            raise InvalidInput(
                "this store cannot list: open it with the Zarr's id or API URL "
                "(open_store(ZARR_ID) or open_store('https://.../api/zarr/ID/'))"
            )
        return self.api, self.zarr_id

    def _list_directory(self, directory: str) -> tuple[list[str], list[str]]:
        api, zarr_id = self._require_api()
        try:
            listing = api.list_directory(zarr_id, directory)
        except ApiError as exc:
            if exc.status_code == 404:
                return [], []
            raise
        return [d.name for d in listing.directories], [f.name for f in listing.files]

    def _walk(self, directory: str) -> list[str]:
        found: list[str] = []
        stack = [directory]
        while stack:
            current = stack.pop()
            dirs, files = self._list_directory(current)
            prefix = f"{current}/" if current else ""
            found.extend(prefix + name for name in files)
            stack.extend(prefix + name for name in dirs)
        return sorted(found)

    async def list(self) -> AsyncIterator[str]:
        for key in await asyncio.to_thread(self._walk, ""):
            yield key

    async def list_prefix(self, prefix: str) -> AsyncIterator[str]:
        directory = prefix.rsplit("/", 1)[0] if "/" in prefix else ""
        for key in await asyncio.to_thread(self._walk, directory):
            if key.startswith(prefix):
                yield key

    async def list_dir(self, prefix: str) -> AsyncIterator[str]:
        dirs, files = await asyncio.to_thread(self._list_directory, prefix.strip("/"))
        for name in sorted([*dirs, *files]):
            yield name

    def close(self) -> None:
        super().close()
        if self._own:
            self.reader.close()
            if self.api is not None:
                self.api.close()


def _split_api_url(url: str) -> tuple[str, str] | None:
    """``(api_url, zarr_id)`` of ``https://host/api/zarr/ID/``, else None."""
    parts = urlsplit(url)
    segments = [s for s in parts.path.split("/") if s]
    for i in range(len(segments) - 2):
        if segments[i : i + 2] == ["api", "zarr"] and is_zarr_id(segments[i + 2]):
            root = "/".join(segments[:i])
            api = f"{parts.scheme}://{parts.netloc}" + (f"/{root}" if root else "")
            return api, segments[i + 2]
    return None


def open_store(
    zarr: str,
    *,
    api_url: str | None = None,
    token: str | None = None,
    reader: ObjectReader | None = None,
) -> ZarrchiveStore:
    """A read-only zarr-python 3 store of a Zarr in the archive.

    *zarr* is the Zarr's id (the API at *api_url* or ``ZARRCHIVE_URL``), its API
    URL (``https://host/api/zarr/ID/``), ``DANDISET/PATH``, ``DANDISET@VERSION/PATH``
    (exactly the state a published version pins: see :mod:`zarrchive.client.snapshot`),
    or the S3 URL of its objects (``https://bucket.s3.amazonaws.com/zarr/ID/``: no API,
    no listing).

    Objects are read straight from S3 over HTTP with no credentials; pass *reader*
    to read them another way (credentials, or the API's authorisation for an
    embargoed Zarr).  *token* (or ``ZARRCHIVE_TOKEN``) authenticates the API calls
    (finding the Zarr, listing), never the reads from S3.
    """
    if reader is None and is_versioned_address(zarr):
        from zarrchive.client.snapshot import open_snapshot_store

        return open_snapshot_store(zarr, api_url=api_url, token=token)
    api: ApiClient | None = None
    info: ZarrInfo | None = None
    split = _split_api_url(zarr) if zarr.startswith(("http://", "https://")) else None
    try:
        if split is not None:
            api = ApiClient.from_env(split[0], token)
            info = api.get_zarr(split[1])
        elif zarr.startswith(("http://", "https://")):
            if reader is None:
                reader = HttpObjectReader(zarr)
            return ZarrchiveStore(reader)
        else:
            if not (api_url or os.environ.get("ZARRCHIVE_URL")):
                raise InvalidInput(
                    f"which archive holds {zarr!r}? set ZARRCHIVE_URL or pass api_url= "
                    "(or open the Zarr by its URL, https://HOST/api/zarr/ID/)"
                )
            api = ApiClient.from_env(api_url, token)
            info = resolve_zarr(api, zarr)
    except BaseException:
        if api is not None:
            api.close()
        raise
    if reader is None:
        if api.is_private(info.dandiset):
            try:
                require_token(api, info)
            except BaseException:
                api.close()
                raise
            reader = PresignedObjectReader(api, info.zarr_id)
        else:
            reader = HttpObjectReader(info.s3_url)
    return ZarrchiveStore(reader, api=api, zarr_id=info.zarr_id)


__all__ = [
    "HttpObjectReader",
    "ObjectReader",
    "PresignedObjectReader",
    "ZarrchiveStore",
    "open_store",
    "range_header",
]

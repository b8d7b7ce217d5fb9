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
allow anonymous listing; and reads go through a pluggable
:class:`~zarrchive.client.readers.ObjectReader`, the hook for embargoed Zarrs (reads
authorised by the API rather than anonymous).

The stores: :class:`ZarrchiveStore` (a Zarr's live state, listed by the API) and
:class:`SnapshotStore` (the state a published version pins, listed from its manifest:
:mod:`zarrchive.client.snapshot`), the one reading zarr's byte requests for both
(:func:`range_header`).

Sync I/O runs in worker threads (``asyncio.to_thread``), so the store works from
any event loop, including zarr's own.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator, Iterable
from urllib.parse import urlsplit

from zarr.abc.store import (
    ByteRequest,
    OffsetByteRequest,
    RangeByteRequest,
    Store,
    SuffixByteRequest,
)
from zarr.core.buffer import Buffer, BufferPrototype

from zarrchive.client.address import is_versioned_address, parse_address
from zarrchive.client.api import ApiClient, ZarrInfo, is_zarr_id
from zarrchive.client.download import require_token, resolve_zarr
from zarrchive.client.readers import HttpObjectReader, ObjectReader, PresignedObjectReader
from zarrchive.client.snapshot import (
    PresignedSnapshotReader,
    Snapshot,
    SnapshotReader,
    open_snapshot,
)
from zarrchive.errors import ApiError, InvalidInput


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


class SnapshotStore(ZarrchiveStore):
    """A read-only zarr-python store of a snapshot: listings from its manifest."""

    def __init__(self, reader: HttpObjectReader, snapshot: Snapshot, api: ApiClient) -> None:
        super().__init__(reader, api=api, zarr_id=snapshot.zarr.zarr_id)
        self.snapshot = snapshot

    def __repr__(self) -> str:
        return f"SnapshotStore({str(self.snapshot.address)!r})"

    def _list_directory(self, directory: str) -> tuple[list[str], list[str]]:
        return self.snapshot.children(directory)


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


def open_snapshot_store(
    ref: str, *, api_url: str | None = None, token: str | None = None
) -> ZarrchiveStore:
    """The store of ``DANDISET@VERSION/PATH`` (see :func:`zarrchive.open_store`): a
    :class:`SnapshotStore`, or the live Zarr's store for ``DANDISET@draft/PATH``."""
    address = parse_address(ref)
    if address.is_draft:
        return open_store(f"{address.dandiset}/{address.path}", api_url=api_url, token=token)
    api = ApiClient.from_env(api_url, token)
    try:
        snapshot = open_snapshot(api, address)
    except BaseException:
        api.close()
        raise
    reader: HttpObjectReader = (
        PresignedSnapshotReader(api, snapshot) if snapshot.private else SnapshotReader(snapshot)
    )
    return SnapshotStore(reader, snapshot, api)


__all__ = [
    "SnapshotStore",
    "ZarrchiveStore",
    "open_snapshot_store",
    "open_store",
    "range_header",
]

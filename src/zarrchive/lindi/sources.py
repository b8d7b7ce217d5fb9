"""Where the keys of a LINDI file come from: a reference file system or any zarr-python 3 store.

:func:`open_source` turns what :class:`zarrchive.lindi.File` is given (a ``.lindi.json``
path or URL, a reference file system dict, a local Zarr directory, a ``Store``, an HDF5
file) into a :class:`Source`: node kinds, children, JSON metadata and raw chunk bytes,
read synchronously.
"""

from __future__ import annotations

import asyncio
import os
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol

import httpx
from zarr.abc.store import Store
from zarr.core.buffer import default_buffer_prototype
from zarr.core.sync import sync
from zarr.storage import LocalStore

import zarrchive.lindi.refs as rfs_mod
from zarrchive.errors import InvalidInput, InvalidLindiFile
from zarrchive.lindi.store import LindiReferenceStore, RangeReader, shared_client

_HDF5_SIGNATURE = b"\x89HDF\r\n\x1a\n"


class Source(Protocol):
    """The keys of a LINDI hierarchy: ``kind`` is ``"group"``, ``"array"`` or ``None``."""

    location: str | None

    def kind(self, path: str) -> str | None: ...

    def children(self, path: str) -> list[str]: ...

    def json(self, key: str) -> dict[str, Any] | None: ...

    def get_many(self, keys: Sequence[str]) -> dict[str, bytes | None]: ...

    def close(self) -> None: ...


def child_key(path: str, name: str) -> str:
    """The key of *name* below the Zarr path *path* (``""`` is the root)."""
    return f"{path}/{name}" if path else name


class RefsSource:
    """Keys of a :class:`LindiReferenceStore`, read synchronously."""

    def __init__(self, store: LindiReferenceStore, *, own: bool) -> None:
        self.store = store
        self.location = store.base
        self._own = own
        self._kinds, self._children = rfs_mod.node_index(store.refs)

    def kind(self, path: str) -> str | None:
        return self._kinds.get(path)

    def children(self, path: str) -> list[str]:
        return self._children.get(path, [])

    def json(self, key: str) -> dict[str, Any] | None:
        return self.store.json(key)

    def get_many(self, keys: Sequence[str]) -> dict[str, bytes | None]:
        return self.store.get_many_bytes(keys)

    def close(self) -> None:
        if self._own:
            self.store.close()


class StoreSource:
    """Keys of any zarr-python 3 store (a local Zarr directory, an archive store...)."""

    def __init__(self, store: Store, *, location: str | None, own: bool) -> None:
        self.store = store
        self.location = location
        self._own = own
        self._kinds: dict[str, str | None] = {}
        self._children: dict[str, list[str]] = {}
        self._lock = threading.Lock()

    async def _get(self, key: str) -> bytes | None:
        buf = await self.store.get(key, prototype=default_buffer_prototype())
        return None if buf is None else buf.to_bytes()

    async def _get_all(self, keys: Sequence[str]) -> list[bytes | None]:
        sem = asyncio.Semaphore(32)

        async def one(key: str) -> bytes | None:
            async with sem:
                return await self._get(key)

        return list(await asyncio.gather(*(one(k) for k in keys)))

    def get_many(self, keys: Sequence[str]) -> dict[str, bytes | None]:
        keys = list(keys)
        if not keys:
            return {}
        values = sync(self._get_all(keys))
        return dict(zip(keys, values, strict=True))

    def json(self, key: str) -> dict[str, Any] | None:
        data = self.get_many([key])[key]
        if data is None:
            return None
        return rfs_mod.json_object(key, data)

    async def _exists_all(self, keys: Sequence[str]) -> list[bool]:
        return list(await asyncio.gather(*(self.store.exists(k) for k in keys)))

    def _kinds_of(self, paths: Sequence[str]) -> list[str | None]:
        keys = [k for p in paths for k in (child_key(p, ".zarray"), child_key(p, ".zgroup"))]
        found = sync(self._exists_all(keys)) if keys else []
        out: list[str | None] = []
        for i in range(len(paths)):
            is_array, is_group = found[2 * i], found[2 * i + 1]
            out.append("array" if is_array else "group" if is_group else None)
        return out

    def kind(self, path: str) -> str | None:
        with self._lock:
            if path in self._kinds:
                return self._kinds[path]
        kind = self._kinds_of([path])[0]
        with self._lock:
            self._kinds[path] = kind
        return kind

    async def _list_dir(self, prefix: str) -> list[str]:
        return [name async for name in self.store.list_dir(prefix)]

    def children(self, path: str) -> list[str]:
        with self._lock:
            if path in self._children:
                return self._children[path]
        names = sorted(n.rstrip("/") for n in sync(self._list_dir(path)) if not n.startswith("."))
        kinds = self._kinds_of([child_key(path, n) for n in names])
        out = [n for n, k in zip(names, kinds, strict=True) if k is not None]
        with self._lock:
            for n, k in zip(names, kinds, strict=True):
                self._kinds[child_key(path, n)] = k
            self._children[path] = out
        return out

    def close(self) -> None:
        if self._own:
            self.store.close()


def open_source(source: Any, reader: RangeReader | None) -> Source:
    """The source of keys of what :class:`zarrchive.lindi.File` was given (see there)."""
    if isinstance(source, LindiReferenceStore):
        return RefsSource(source, own=False)
    if isinstance(source, Store):
        return StoreSource(source, location=None, own=False)
    if isinstance(source, Mapping):
        return RefsSource(LindiReferenceStore(source, reader=reader), own=True)
    if not isinstance(source, str | os.PathLike):
        raise TypeError(f"cannot open a LINDI file from {type(source).__name__}")
    text = os.fspath(source)
    if rfs_mod.is_remote(text):
        head = b"{" if text.endswith(".json") else _remote_head(text)
        if head.startswith(_HDF5_SIGNATURE):
            return _from_hdf5(text, reader)
        rfs = _load_remote_json(text)
        return RefsSource(LindiReferenceStore(rfs, base=text, reader=reader), own=True)
    path = Path(text)
    if path.is_dir():
        if not (path / ".zgroup").exists():
            raise InvalidLindiFile(f"{text} is a directory without .zgroup: not a LINDI Zarr")
        return StoreSource(LocalStore(path, read_only=True), location=str(path.resolve()), own=True)
    if not path.is_file():
        raise InvalidInput(f"{text}: no such file or directory")
    with path.open("rb") as fh:
        head = fh.read(8)
        fh.seek(512)
        head512 = fh.read(8)
    if _HDF5_SIGNATURE in (head, head512):
        return _from_hdf5(text, reader)
    rfs = rfs_mod.load_json_text(path.read_bytes(), source=text)
    return RefsSource(LindiReferenceStore(rfs, base=str(path.resolve()), reader=reader), own=True)


def _from_hdf5(location: str, reader: RangeReader | None) -> Source:
    from zarrchive.lindi.h5source import hdf5_to_rfs

    rfs = hdf5_to_rfs(location)
    base = location if rfs_mod.is_remote(location) else os.path.abspath(location)
    return RefsSource(LindiReferenceStore(rfs, base=base, reader=reader), own=True)


def _remote_head(url: str) -> bytes:
    try:
        resp = shared_client().get(url, headers={"Range": "bytes=0-7"})
    except httpx.HTTPError as exc:
        raise InvalidInput(f"cannot read {url}: {exc}") from exc
    if resp.status_code not in (200, 206):
        raise InvalidInput(f"cannot read {url}: HTTP {resp.status_code}")
    return resp.content[:8]


def _load_remote_json(url: str) -> dict[str, Any]:
    from zarrchive.lindi.writers import load_lindi_json

    try:
        return load_lindi_json(url)
    except httpx.HTTPError as exc:
        raise InvalidInput(f"cannot read {url}: {exc}") from exc

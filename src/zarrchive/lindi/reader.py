"""An h5py-like, read-only view of a LINDI file: :class:`File`, :class:`Group`, :class:`Dataset`.

The classes derive from their h5py counterparts so that code checking
``isinstance(obj, h5py.Dataset)`` (hdmf, pynwb) accepts them, but they never
touch the HDF5 library except to read ``_EXTERNAL_ARRAY_LINK`` datasets.
Every LINDI annotation is honoured: ``_SCALAR`` datasets have shape ``()``,
``_SOFT_LINK`` groups are links, ``_REFERENCE`` values are :class:`Reference`
objects usable as ``f[ref]`` (checked against ``object_id``), ``_COMPOUND_DTYPE``
datasets are structured arrays and ``_EXTERNAL_ARRAY_LINK`` datasets are read
from the linked HDF5 file.
"""

from __future__ import annotations

import asyncio
import itertools
import os
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Protocol

import h5py
import httpx
import numpy as np
from zarr.abc.store import Store
from zarr.core.buffer import default_buffer_prototype
from zarr.core.sync import sync
from zarr.storage import LocalStore

import zarrchive.lindi.annotations as ann
import zarrchive.lindi.refs as rfs_mod
from zarrchive.errors import InvalidInput, InvalidLindiFile, ReferenceMismatch, UnsupportedLink
from zarrchive.lindi.codecs import CodecChain, decode_chunk, summarize
from zarrchive.lindi.store import LindiReferenceStore, RangeReader, _shared_client

#: h5py's link classes, returned by ``get(name, getlink=True)``.
SoftLink = h5py.SoftLink
HardLink = h5py.HardLink

_HDF5_SIGNATURE = b"\x89HDF\r\n\x1a\n"
_MAX_LINK_DEPTH = 40
_REF_DTYPE: np.dtype[Any] = h5py.ref_dtype
_STR_DTYPE: np.dtype[Any] = h5py.string_dtype("utf-8")


# -- sources of keys ------------------------------------------------------------------
class _Source(Protocol):
    location: str | None

    def kind(self, path: str) -> str | None: ...

    def children(self, path: str) -> list[str]: ...

    def json(self, key: str) -> dict[str, Any] | None: ...

    def get_many(self, keys: Sequence[str]) -> dict[str, bytes | None]: ...

    def close(self) -> None: ...


def _key(path: str, name: str) -> str:
    return f"{path}/{name}" if path else name


class _RefsSource:
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


class _StoreSource:
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
        keys = [k for p in paths for k in (_key(p, ".zarray"), _key(p, ".zgroup"))]
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
        kinds = self._kinds_of([_key(path, n) for n in names])
        out = [n for n, k in zip(names, kinds, strict=True) if k is not None]
        with self._lock:
            for n, k in zip(names, kinds, strict=True):
                self._kinds[_key(path, n)] = k
            self._children[path] = out
        return out

    def close(self) -> None:
        if self._own:
            self.store.close()


# -- references -------------------------------------------------------------------------
class Reference(h5py.Reference):  # type: ignore[misc]
    """An object reference read from a LINDI file; use it as ``f[ref]``."""

    def __init__(self, target: ann.ReferenceTarget) -> None:
        self.target = target

    @property
    def path(self) -> str:
        return self.target.path

    @property
    def object_id(self) -> str | None:
        return self.target.object_id

    @property
    def source_object_id(self) -> str | None:
        return self.target.source_object_id

    def to_json(self) -> dict[str, Any]:
        return self.target.to_json()

    def __bool__(self) -> bool:
        return True

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Reference) and other.target == self.target

    def __hash__(self) -> int:
        return hash(self.target)

    def __repr__(self) -> str:
        return f"<zarrchive.lindi.Reference to {self.target.path!r} (object_id {self.target.object_id})>"

    def __reduce__(self) -> tuple[Any, ...]:
        return (Reference, (self.target,))


# -- attributes ---------------------------------------------------------------------------
class Attributes(Mapping[str, Any]):
    """The attributes of a group or dataset, decoded as h5py would return them."""

    def __init__(self, raw: Mapping[str, Any]) -> None:
        self._raw = {k: v for k, v in raw.items() if k not in ann.SPECIAL_KEYS}

    def __getitem__(self, name: str) -> Any:
        if name not in self._raw:
            raise KeyError(f"Can't open attribute (attribute {name!r} doesn't exist)")
        return ann.decode_attribute(self._raw[name], Reference)

    def __iter__(self) -> Iterator[str]:
        return iter(self._raw)

    def __len__(self) -> int:
        return len(self._raw)

    def __contains__(self, name: object) -> bool:
        return name in self._raw

    def __repr__(self) -> str:
        return f"<Attributes of {len(self._raw)} items>"

    def __setitem__(self, name: str, value: Any) -> None:
        raise InvalidInput("LINDI files are opened read-only: attributes cannot be set")

    def __delitem__(self, name: str) -> None:
        raise InvalidInput("LINDI files are opened read-only: attributes cannot be deleted")


def _read_only(*_args: Any, **_kwargs: Any) -> Any:
    raise InvalidInput("LINDI files are opened read-only")


# -- nodes ----------------------------------------------------------------------------------
class _Node:
    _file: File
    _path: str

    @property
    def name(self) -> str:
        return "/" + self._path

    @property
    def file(self) -> File:
        return self._file

    @property
    def parent(self) -> Group:
        parent = self._path.rpartition("/")[0]
        return Group(self._file, parent)

    @property
    def id(self) -> str:
        return f"{self._file.token}:{self._path}"

    @property
    def attrs(self) -> Attributes:
        return Attributes(self._file.raw_attrs(self._path))

    @property
    def ref(self) -> Reference:
        object_id = self._file.raw_attrs(self._path).get("object_id")
        root_id = self._file.raw_attrs("").get("object_id")
        return Reference(
            ann.ReferenceTarget(
                self.name,
                None if object_id is None else str(object_id),
                None if root_id is None else str(root_id),
            )
        )

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _Node) and other.id == self.id

    def __hash__(self) -> int:
        return hash(self.id)

    def __bool__(self) -> bool:
        return bool(self._file)


class Group(_Node, h5py.Group):  # type: ignore[misc]
    """A group of a LINDI file (h5py's reading API)."""

    def __init__(self, file: File, path: str) -> None:
        self._file = file
        self._path = path

    def _abs(self, name: str) -> str:
        return ann.join_path(self.name, name)

    def __getitem__(self, name: Any) -> Group | Dataset:
        if isinstance(name, Reference):
            return self._file.dereference(name)
        if isinstance(name, h5py.Reference):
            raise TypeError("this h5py reference belongs to another file")
        if isinstance(name, bytes):
            name = name.decode("utf-8")
        if not isinstance(name, str):
            raise TypeError(f"Accessing a group is done with bytes or str, not {type(name)}")
        path = self._file.resolve(self._abs(name))
        return self._file.node(path)

    def get(
        self, name: Any, default: Any = None, getclass: bool = False, getlink: bool = False
    ) -> Any:
        if isinstance(name, Reference):
            obj: Any = self[name]
            return type(obj) if getclass else obj
        if isinstance(name, bytes):
            name = name.decode("utf-8")
        if getlink:
            link = self._file.link(self._abs(name))
            if link is None:
                return default
            return type(link) if getclass else link
        try:
            obj = self[name]
        except KeyError:
            return default
        return type(obj) if getclass else obj

    def keys(self) -> list[str]:
        return list(self._file.source.children(self._path))

    def __iter__(self) -> Iterator[str]:
        return iter(self.keys())

    def __len__(self) -> int:
        return len(self.keys())

    def __contains__(self, name: object) -> bool:
        if isinstance(name, bytes):
            name = name.decode("utf-8")
        if not isinstance(name, str):
            return False
        try:
            self._file.resolve(self._abs(name))
        except KeyError:
            return False
        return True

    def values(self) -> list[Group | Dataset]:
        return [self[k] for k in self.keys()]

    def items(self) -> list[tuple[str, Group | Dataset]]:
        return [(k, self[k]) for k in self.keys()]

    def __reversed__(self) -> Iterator[str]:
        return iter(reversed(self.keys()))

    def visititems(self, func: Callable[[str, Group | Dataset], Any]) -> Any:
        """Call ``func(name, obj)`` for every object below this group (soft links are not followed)."""
        source = self._file.source

        def walk(path: str, rel: str) -> Any:
            for child in source.children(path):
                child_path = _key(path, child)
                child_rel = f"{rel}/{child}" if rel else child
                kind = source.kind(child_path)
                if (
                    kind == "group"
                    and ann.soft_link_path(self._file.raw_attrs(child_path)) is not None
                ):
                    continue
                obj = self._file.node(child_path)
                result = func(child_rel, obj)
                if result is not None:
                    return result
                if kind == "group":
                    result = walk(child_path, child_rel)
                    if result is not None:
                        return result
            return None

        return walk(self._path, "")

    def visit(self, func: Callable[[str], Any]) -> Any:
        return self.visititems(lambda name, _obj: func(name))

    def __repr__(self) -> str:
        if not self._file:
            return "<Closed zarrchive.lindi.Group>"
        return f'<zarrchive.lindi.Group "{self.name}" ({len(self)} members)>'

    # read-only
    __setitem__ = _read_only
    __delitem__ = _read_only
    create_group = _read_only
    create_dataset = _read_only
    require_group = _read_only
    require_dataset = _read_only
    copy = _read_only
    move = _read_only


class File(Group, h5py.File):  # type: ignore[misc]
    """A LINDI file opened for reading, with h5py's API.

    *source* is a ``.lindi.json`` path or URL, a reference file system dict, a
    local Zarr directory, any zarr-python 3 ``Store`` holding a LINDI hierarchy,
    or an HDF5 file (path or URL), converted on the fly.
    """

    def __init__(
        self,
        source: str | os.PathLike[str] | Mapping[str, Any] | Store,
        mode: str = "r",
        *,
        reader: RangeReader | None = None,
    ) -> None:
        if mode != "r":
            raise InvalidInput(f"LINDI files open read-only: mode must be 'r', not {mode!r}")
        self._file = self
        self._path = ""
        self._open = True
        self.token = f"lindi{id(self):x}"
        self._meta_lock = threading.Lock()
        self._attrs_cache: dict[str, dict[str, Any]] = {}
        self._zarray_cache: dict[str, dict[str, Any]] = {}
        self._external: dict[str, tuple[h5py.File, Any]] = {}
        self.source: _Source = _open_source(source, reader)
        self._filename = self.source.location or "<lindi>"
        if self.source.kind("") != "group":
            self.source.close()
            raise InvalidLindiFile(
                f"{self._filename} has no root group (.zgroup): not a LINDI file"
            )

    # -- h5py.File API -----------------------------------------------------------
    @property
    def filename(self) -> str:
        return self._filename

    @property
    def mode(self) -> str:
        return "r"

    @property
    def driver(self) -> str:
        return "lindi"

    @property
    def libver(self) -> tuple[str, str]:
        return ("earliest", "latest")

    @property
    def userblock_size(self) -> int:
        return 0

    @property
    def meta_block_size(self) -> int:
        return 0

    @property
    def swmr_mode(self) -> bool:
        return False

    @property
    def parent(self) -> Group:
        return self

    @property
    def name(self) -> str:
        return "/"

    def flush(self) -> None:
        pass

    def close(self) -> None:
        if not self._open:
            return
        self._open = False
        for h5, handle in self._external.values():
            h5.close()
            if handle is not None:
                handle.close()
        self._external.clear()
        self.source.close()

    def __bool__(self) -> bool:
        return self._open

    def __enter__(self) -> File:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "open" if self._open else "closed"
        return f'<zarrchive.lindi.File "{self._filename}" ({state})>'

    def __hash__(self) -> int:
        return hash(self.token)

    # -- metadata ---------------------------------------------------------------------
    def _check_open(self) -> None:
        if not self._open:
            raise ValueError("the LINDI file is closed")

    def raw_attrs(self, path: str) -> dict[str, Any]:
        with self._meta_lock:
            cached = self._attrs_cache.get(path)
        if cached is None:
            self._check_open()
            cached = self.source.json(_key(path, ".zattrs")) or {}
            with self._meta_lock:
                self._attrs_cache[path] = cached
        return cached

    def zarray(self, path: str) -> dict[str, Any]:
        with self._meta_lock:
            cached = self._zarray_cache.get(path)
        if cached is None:
            self._check_open()
            cached = self.source.json(_key(path, ".zarray"))
            if cached is None:
                raise InvalidLindiFile(f"/{path} has no .zarray")
            with self._meta_lock:
                self._zarray_cache[path] = cached
        return cached

    def node(self, path: str) -> Group | Dataset:
        kind = self.source.kind(path)
        if kind == "array":
            return Dataset(self, path)
        if kind == "group":
            return self if path == "" else Group(self, path)
        raise KeyError(f"Unable to open object (object '/{path}' doesn't exist)")

    def resolve(self, abs_path: str, *, follow_last: bool = True, depth: int = 0) -> str:
        """The Zarr path of the object at *abs_path*, following soft links."""
        self._check_open()
        if depth > _MAX_LINK_DEPTH:
            raise UnsupportedLink(f"too many levels of soft links resolving {abs_path}")
        parts = [p for p in abs_path.split("/") if p]
        current = ""
        for i, part in enumerate(parts):
            candidate = _key(current, part)
            kind = self.source.kind(candidate)
            if kind is None:
                raise KeyError(f"Unable to open object (object '{abs_path}' doesn't exist)")
            last = i == len(parts) - 1
            if kind == "group" and (follow_last or not last):
                target = ann.soft_link_path(self.raw_attrs(candidate))
                if target is not None:
                    current = self.resolve(ann.join_path("/" + current, target), depth=depth + 1)
                    continue
            if kind == "array" and not last:
                raise KeyError(f"Unable to open object ('/{candidate}' is a dataset, not a group)")
            current = candidate
        return current

    def link(self, abs_path: str) -> h5py.SoftLink | h5py.HardLink | None:
        try:
            path = self.resolve(abs_path, follow_last=False)
        except KeyError:
            return None
        if path == "":
            return HardLink()
        target = (
            ann.soft_link_path(self.raw_attrs(path)) if self.source.kind(path) == "group" else None
        )
        if target is not None:
            return SoftLink(target)
        return HardLink()

    def dereference(self, ref: Reference) -> Group | Dataset:
        """The object a reference points to, after checking its ``object_id``."""
        target = ref.target
        root_id = self.raw_attrs("").get("object_id")
        if (
            target.source_object_id is not None
            and root_id is not None
            and str(root_id) != target.source_object_id
        ):
            raise ReferenceMismatch(
                f"the reference to {target.path} comes from the file with object_id"
                f" {target.source_object_id}, not this one ({root_id})"
            )
        try:
            obj = self[target.path]
        except KeyError:
            raise ReferenceMismatch(
                f"the reference points to {target.path}, which does not exist in this file"
            ) from None
        found = obj.attrs.get("object_id") if target.object_id is not None else None
        if target.object_id is not None and (found is None or str(found) != target.object_id):
            raise ReferenceMismatch(
                f"the reference to {target.path} expects object_id {target.object_id},"
                f" the object there has {found}: the file is inconsistent"
            )
        return obj

    def external_dataset(self, url: str, name: str) -> Any:
        """The h5py dataset an ``_EXTERNAL_ARRAY_LINK`` points to (files opened once)."""
        self._check_open()
        with self._meta_lock:
            entry = self._external.get(url)
            if entry is None:
                if rfs_mod.is_remote(url):
                    import remfile

                    handle: Any = remfile.File(url, verbose=False)
                    entry = (h5py.File(handle, "r"), handle)
                else:
                    local = rfs_mod.resolve_location(url, self.source.location)
                    try:
                        entry = (h5py.File(local, "r"), None)
                    except OSError as exc:
                        raise InvalidLindiFile(
                            f"cannot open {local}, the HDF5 file of an external array link: {exc}"
                        ) from exc
                self._external[url] = entry
        try:
            return entry[0][name]
        except KeyError:
            raise InvalidLindiFile(
                f"the external array link names {name}, absent from {url}"
            ) from None


def _open_source(source: Any, reader: RangeReader | None) -> _Source:
    if isinstance(source, LindiReferenceStore):
        return _RefsSource(source, own=False)
    if isinstance(source, Store):
        return _StoreSource(source, location=None, own=False)
    if isinstance(source, Mapping):
        return _RefsSource(LindiReferenceStore(source, reader=reader), own=True)
    if not isinstance(source, str | os.PathLike):
        raise TypeError(f"cannot open a LINDI file from {type(source).__name__}")
    text = os.fspath(source)
    if rfs_mod.is_remote(text):
        head = b"{" if text.endswith(".json") else _remote_head(text)
        if head.startswith(_HDF5_SIGNATURE):
            return _from_hdf5(text, reader)
        rfs = _load_remote_json(text)
        return _RefsSource(LindiReferenceStore(rfs, base=text, reader=reader), own=True)
    path = Path(text)
    if path.is_dir():
        if not (path / ".zgroup").exists():
            raise InvalidLindiFile(f"{text} is a directory without .zgroup: not a LINDI Zarr")
        return _StoreSource(
            LocalStore(path, read_only=True), location=str(path.resolve()), own=True
        )
    if not path.is_file():
        raise InvalidInput(f"{text}: no such file or directory")
    with path.open("rb") as fh:
        head = fh.read(8)
        fh.seek(512)
        head512 = fh.read(8)
    if _HDF5_SIGNATURE in (head, head512):
        return _from_hdf5(text, reader)
    rfs = rfs_mod.load_json_text(path.read_bytes(), source=text)
    return _RefsSource(LindiReferenceStore(rfs, base=str(path.resolve()), reader=reader), own=True)


def _from_hdf5(location: str, reader: RangeReader | None) -> _Source:
    from zarrchive.lindi.h5source import hdf5_to_rfs

    rfs = hdf5_to_rfs(location)
    base = location if rfs_mod.is_remote(location) else os.path.abspath(location)
    return _RefsSource(LindiReferenceStore(rfs, base=base, reader=reader), own=True)


def _remote_head(url: str) -> bytes:
    try:
        resp = _shared_client().get(url, headers={"Range": "bytes=0-7"})
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


# -- datasets -------------------------------------------------------------------------------
def _decode_fill(value: Any, dtype: np.dtype[Any]) -> Any:
    if dtype.kind == "O" or dtype.names is not None:
        return None
    if value is None:
        return np.zeros((), dtype=dtype)[()]
    if dtype.kind == "S" and isinstance(value, str):
        import base64

        return np.array(base64.b64decode(value), dtype=dtype)[()]
    if dtype.kind == "c" and isinstance(value, list):
        re_, im = (float(ann.decode_special_float(v)) for v in value)  # type: ignore[arg-type]
        return np.array(complex(re_, im), dtype=dtype)[()]
    return np.array(ann.decode_special_float(value), dtype=dtype)[()]


class _Selection:
    """A numpy-style selection normalised against a shape."""

    def __init__(self, args: Any, shape: tuple[int, ...]) -> None:
        if not isinstance(args, tuple):
            args = (args,)
        n_ellipsis = sum(1 for a in args if a is Ellipsis)
        if n_ellipsis > 1:
            raise IndexError("an index can only have a single ellipsis ('...')")
        if n_ellipsis:
            i = next(i for i, a in enumerate(args) if a is Ellipsis)
            fill = len(shape) - (len(args) - 1)
            args = args[:i] + (slice(None),) * max(0, fill) + args[i + 1 :]
        if len(args) > len(shape):
            raise IndexError(
                f"too many indices: the dataset has {len(shape)} dimensions, got {len(args)}"
            )
        args = args + (slice(None),) * (len(shape) - len(args))
        #: per dimension: a slice (start, stop, step normalised) or an array of coordinates
        self.dims: list[slice | np.ndarray] = []
        self.drop: list[bool] = []
        for arg, n in zip(args, shape, strict=True):
            if isinstance(arg, int | np.integer) and not isinstance(arg, bool | np.bool_):
                i = int(arg)
                if i < -n or i >= n:
                    raise IndexError(f"index {i} is out of range for a dimension of size {n}")
                i %= n
                self.dims.append(slice(i, i + 1, 1))
                self.drop.append(True)
            elif isinstance(arg, slice):
                start, stop, step = arg.indices(n)
                if step < 1:
                    raise ValueError(f"Step must be >= 1 (got {step})")
                stop = max(start, stop)
                self.dims.append(slice(start, stop, step))
                self.drop.append(False)
            else:
                arr = np.asarray(arg)
                if arr.dtype == bool:
                    if arr.shape != (n,):
                        raise IndexError(
                            f"a boolean index must have the length of its dimension ({n})"
                        )
                    arr = np.nonzero(arr)[0]
                elif arr.ndim != 1 or (arr.size and arr.dtype.kind not in "iu"):
                    raise TypeError(f"unsupported index {arg!r:.60}")
                arr = arr.astype(np.int64)
                if arr.size and (arr.min() < -n or arr.max() >= n):
                    raise IndexError(f"index out of range for a dimension of size {n}")
                self.dims.append(np.where(arr < 0, arr + n, arr))
                self.drop.append(False)

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(
            len(range(d.start, d.stop, d.step)) if isinstance(d, slice) else len(d)
            for d in self.dims
        )

    @property
    def final_shape(self) -> tuple[int, ...]:
        return tuple(n for n, drop in zip(self.shape, self.drop, strict=True) if not drop)

    def per_chunk(self, chunks: Sequence[int]) -> list[list[tuple[int, Any, Any]]]:
        """For each dimension: ``(chunk index, output selection, chunk selection)``."""
        out: list[list[tuple[int, Any, Any]]] = []
        for sel, c in zip(self.dims, chunks, strict=True):
            parts: list[tuple[int, Any, Any]] = []
            if isinstance(sel, slice):
                start, stop, step = sel.start, sel.stop, sel.step
                if stop > start:
                    for k in range(start // c, (stop - 1) // c + 1):
                        lo = max(start, k * c)
                        first = start + -(-(lo - start) // step) * step
                        hi = min(stop, (k + 1) * c)
                        if first >= hi:
                            continue
                        count = len(range(first, hi, step))
                        o = (first - start) // step
                        parts.append(
                            (
                                k,
                                slice(o, o + count),
                                slice(first - k * c, first - k * c + (count - 1) * step + 1, step),
                            )
                        )
            else:
                ids = sel // c
                for k in np.unique(ids):
                    pos = np.nonzero(ids == k)[0]
                    parts.append((int(k), pos, sel[pos] - int(k) * c))
            out.append(parts)
        return out


class _LowLevelDataset:
    """The few low-level calls h5py's own ``Dataset`` methods make on ``self.id``.

    Wrappers deriving from ``h5py.Dataset`` that delegate attribute access to
    the dataset they wrap (hdmf's ``StrDataset``) run h5py's methods (``shape``,
    ``dtype``, ``__array__``, ``read_direct``) against this object.
    """

    def __init__(self, ds: Dataset) -> None:
        self._ds = ds
        self.valid = True

    @property
    def shape(self) -> tuple[int, ...]:
        return self._ds.shape

    @property
    def rank(self) -> int:
        return self._ds.ndim

    @property
    def dtype(self) -> np.dtype[Any]:
        return self._ds.dtype

    def get_space(self) -> Any:
        return (
            h5py.h5s.create_simple(self._ds.shape)
            if self._ds.shape
            else h5py.h5s.create(h5py.h5s.SCALAR)
        )

    @staticmethod
    def _box(space: Any, shape: tuple[int, ...]) -> tuple[slice, ...]:
        if space is None or space.get_select_type() == h5py.h5s.SEL_ALL or not shape:
            return tuple(slice(0, n) for n in shape)
        start, end = space.get_select_bounds()
        box = tuple(slice(a, b + 1) for a, b in zip(start, end, strict=True))
        if space.get_select_npoints() != int(np.prod([b.stop - b.start for b in box])):
            raise InvalidInput("only rectangular selections are supported on LINDI datasets")
        return box

    def read(
        self, mspace: Any, fspace: Any, arr: np.ndarray, mtype: Any = None, dxpl: Any = None
    ) -> None:
        data = self._ds[self._box(fspace, self._ds.shape)] if self._ds.shape else self._ds[()]
        target = self._box(mspace, arr.shape)
        arr[target] = np.asarray(data).reshape(arr[target].shape)


class Dataset(_Node, h5py.Dataset):  # type: ignore[misc]
    """A dataset of a LINDI file: h5py's reading API with numpy-style slicing."""

    _readonly = True
    _dxpl = None

    def __init__(self, file: File, path: str) -> None:
        self._file = file
        self._path = path
        self._id = _LowLevelDataset(self)
        self._cache_props: dict[str, Any] = {}
        self._meta = file.zarray(path)
        raw = file.raw_attrs(path)
        self._scalar = bool(raw.get(ann.SCALAR, False))
        self._zshape = tuple(int(s) for s in self._meta["shape"])
        self._zchunks = tuple(int(c) for c in self._meta["chunks"])
        zdtype = self._meta["dtype"]
        self._zdtype: np.dtype[Any] = np.dtype(
            [tuple(f) for f in zdtype] if isinstance(zdtype, list) else zdtype
        )
        self._compound: np.dtype[Any] | None = None
        if ann.COMPOUND_DTYPE in raw:
            self._compound = ann.parse_compound_dtype(
                raw[ann.COMPOUND_DTYPE], _REF_DTYPE, _STR_DTYPE
            )
        self._external: tuple[str, str] | None = None
        if ann.EXTERNAL_ARRAY_LINK in raw:
            self._external = ann.parse_external_array_link(raw[ann.EXTERNAL_ARRAY_LINK])
        self._chain: CodecChain | None = None
        self._object_kind: str | None = None

    # -- properties ---------------------------------------------------------------------
    @property
    def shape(self) -> tuple[int, ...]:
        return () if self._scalar else self._zshape

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def size(self) -> int:
        return int(np.prod(self.shape))

    @property
    def dtype(self) -> np.dtype[Any]:
        if self._compound is not None:
            return self._compound
        if self._zdtype.kind in "OU":  # numpy unicode: written by lindi for strings
            kind = self._kind()
            return _REF_DTYPE if kind == "ref" else _STR_DTYPE
        return self._zdtype

    @property
    def nbytes(self) -> int:
        return self.size * self.dtype.itemsize

    @property
    def chunks(self) -> tuple[int, ...] | None:
        return None if self._scalar else self._zchunks

    @property
    def maxshape(self) -> tuple[int, ...]:
        return self.shape

    @property
    def _codec_info(self) -> dict[str, Any]:
        return summarize(self._meta.get("filters") or [], self._meta.get("compressor"))

    @property
    def compression(self) -> str | None:
        return self._codec_info["compression"]  # type: ignore[no-any-return]

    @property
    def compression_opts(self) -> Any:
        return self._codec_info["compression_opts"]

    @property
    def shuffle(self) -> bool:
        return bool(self._codec_info["shuffle"])

    @property
    def fletcher32(self) -> bool:
        return bool(self._codec_info["fletcher32"])

    @property
    def scaleoffset(self) -> None:
        return None

    @property
    def fillvalue(self) -> Any:
        return _decode_fill(self._meta.get("fill_value"), self.dtype)

    @property
    def is_virtual(self) -> bool:
        return False

    @property
    def external(self) -> None:
        return None

    @property
    def is_scale(self) -> bool:
        return False

    @property
    def _is_empty(self) -> bool:
        return False

    @property
    def external_array_link(self) -> tuple[str, str] | None:
        """``(url, name)`` if the data live in an HDF5 file (``_EXTERNAL_ARRAY_LINK``)."""
        return self._external

    def __len__(self) -> int:
        if self._scalar:
            raise TypeError("Attempt to take len() of scalar dataset")
        return self._zshape[0]

    def len(self) -> int:
        return self.__len__()

    def __iter__(self) -> Iterator[Any]:
        if self._scalar:
            raise TypeError("Can't iterate over a scalar dataset")
        for i in range(self._zshape[0]):
            yield self[i]

    def __repr__(self) -> str:
        if not self._file:
            return "<Closed zarrchive.lindi.Dataset>"
        return (
            f'<zarrchive.lindi.Dataset "{self.name}": shape {self.shape}, type "{self.dtype.str}">'
        )

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        arr = np.asarray(self[...])
        return arr.astype(dtype) if dtype is not None else arr

    def asstr(self, encoding: str = "utf-8", errors: str = "strict") -> _View:
        def convert(value: Any) -> Any:
            if isinstance(value, bytes):
                return value.decode(encoding, errors)
            if isinstance(value, np.ndarray):
                out = np.empty(value.shape, dtype=object)
                flat = out.reshape(-1)
                for i, v in enumerate(value.reshape(-1)):
                    flat[i] = v.decode(encoding, errors) if isinstance(v, bytes) else v
                return out
            return value

        return _View(self, convert)

    def astype(self, dtype: Any) -> _View:
        return _View(self, lambda value: np.asarray(value).astype(dtype))

    def fields(self, names: str | Sequence[str]) -> _View:
        names_t = (names,) if isinstance(names, str) else tuple(names)
        return _View(self, lambda value: value, fields=names_t)

    def iter_chunks(self, sel: Any = None) -> Iterator[tuple[slice, ...]]:
        grid = [range(0, n, c) for n, c in zip(self._zshape, self._zchunks, strict=True)]
        for starts in itertools.product(*grid):
            yield tuple(
                slice(s, min(s + c, n))
                for s, c, n in zip(starts, self._zchunks, self._zshape, strict=True)
            )

    def read_direct(self, dest: np.ndarray, source_sel: Any = None, dest_sel: Any = None) -> None:
        data = self[source_sel if source_sel is not None else ...]
        dest[dest_sel if dest_sel is not None else ...] = data

    __setitem__ = _read_only
    resize = _read_only
    write_direct = _read_only

    # -- reading ---------------------------------------------------------------------------
    def _codec_chain(self) -> CodecChain:
        if self._chain is None:
            self._chain = CodecChain.from_zarray(self._meta)
        return self._chain

    def _chunk_key(self, coords: Sequence[int]) -> str:
        sep = self._meta.get("dimension_separator") or "."
        name = sep.join(str(c) for c in coords) if coords else "0"
        return _key(self._path, name)

    def _kind(self) -> str:
        """For object arrays without ``_COMPOUND_DTYPE``: ``"str"`` or ``"ref"`` (first element)."""
        if self._object_kind is None:
            kind = "str"
            if int(np.prod(self._zshape)):
                key = self._chunk_key((0,) * len(self._zshape))
                data = self._file.source.get_many([key])[key]
                if data is not None:
                    chunk = decode_chunk(
                        data,
                        self._codec_chain(),
                        dtype=self._zdtype,
                        chunk_shape=self._zchunks,
                        label=key,
                    )
                    first = chunk.reshape(-1)[0] if chunk.size else None
                    if ann.parse_reference(first) is not None:
                        kind = "ref"
            self._object_kind = kind
        return self._object_kind

    def _convert_objects(self, chunk: np.ndarray) -> np.ndarray:
        """JSON values of a chunk as h5py returns them (bytes, references, records)."""
        flat = chunk.reshape(-1)
        if self._compound is not None:
            dtype = self._compound
            assert dtype.names is not None
            out = np.zeros(flat.shape, dtype=dtype)
            fields = [(name, dtype[name]) for name in dtype.names]
            for i, rec in enumerate(flat):
                if isinstance(rec, np.void | np.ndarray):
                    rec = list(rec.tolist()) if isinstance(rec, np.void) else list(rec)
                values: list[Any] = []
                for (_name, fdt), v in zip(fields, rec, strict=True):
                    if fdt == _REF_DTYPE:
                        target = ann.parse_reference(v)
                        values.append(Reference(target) if target is not None else None)
                    elif fdt.kind == "O":
                        values.append(v.encode("utf-8") if isinstance(v, str) else v)
                    elif fdt.kind == "S" and isinstance(v, str):
                        values.append(v.encode("utf-8"))
                    else:
                        values.append(ann.decode_special_float(v))
                out[i] = tuple(values)
            return out.reshape(chunk.shape)
        out = np.empty(flat.shape, dtype=object)
        for i, v in enumerate(flat):
            if isinstance(v, str):
                out[i] = v.encode("utf-8")
            elif isinstance(v, dict):
                target = ann.parse_reference(v)
                out[i] = Reference(target) if target is not None else v
            else:
                out[i] = v
        return out.reshape(chunk.shape)

    def _out_dtype(self) -> np.dtype[Any]:
        if self._compound is not None:
            return self._compound
        if self._zdtype.kind in "OU":
            return np.dtype(object)
        return self._zdtype

    def _read(self, sel: _Selection) -> np.ndarray:
        dtype = self._out_dtype()
        out_shape = sel.shape
        parts = sel.per_chunk(self._zchunks) if 0 not in out_shape else []
        combos = list(itertools.product(*parts)) if parts else []
        sep = self._meta.get("dimension_separator") or "."
        prefix = f"{self._path}/" if self._path else ""
        names = [{p[0]: str(p[0]) for p in dim} for dim in parts]
        keys = [
            prefix + sep.join([n[p[0]] for n, p in zip(names, combo, strict=True)])
            for combo in combos
        ]
        datas = self._file.source.get_many(list(dict.fromkeys(keys))) if keys else {}
        items: list[tuple[Any, Any, str]] = [
            (combo, datas[key], key)
            for combo, key in zip(combos, keys, strict=True)
            if datas.get(key) is not None
        ]
        if len(items) == len(combos) and combos:
            out = np.empty(out_shape, dtype=dtype)  # every element is written below
        else:
            fill = _decode_fill(self._meta.get("fill_value"), self._zdtype)
            if fill is None:
                out = (
                    np.full(out_shape, b"", dtype=object)
                    if dtype.kind == "O"
                    else np.zeros(out_shape, dtype=dtype)
                )
            else:
                out = np.full(out_shape, fill, dtype=dtype)
        chain = self._codec_chain()
        order = str(self._meta.get("order") or "C")
        is_object = self._zdtype.kind in "OU"
        zdtype, zchunks = self._zdtype, self._zchunks
        simple = all(isinstance(d, slice) for d in sel.dims)

        def assign(batch: Sequence[tuple[Any, bytes, str]]) -> None:
            for combo, data, key in batch:
                chunk = decode_chunk(
                    data, chain, dtype=zdtype, chunk_shape=zchunks, order=order, label=key
                )
                osel: Any = tuple([p[1] for p in combo])
                csel: Any = tuple([p[2] for p in combo])
                if not simple:
                    osel = np.ix_(*(_as_index(s, n) for s, n in zip(osel, out_shape, strict=True)))
                    csel = np.ix_(*(_as_index(s, c) for s, c in zip(csel, zchunks, strict=True)))
                piece = chunk[csel]
                if is_object:
                    piece = self._convert_objects(np.asarray(piece))
                out[osel] = piece

        workers = _decode_workers()
        if is_object or len(items) < _PARALLEL_MIN_CHUNKS or workers < 2:
            assign(items)
        else:
            # chunks write disjoint parts of the output: decode them in parallel
            # (zlib and blosc release the GIL)
            batches = [items[i::workers] for i in range(workers)]
            list(_decode_pool().map(assign, batches))
        return out

    def __getitem__(self, args: Any) -> Any:
        fields: tuple[str, ...] = ()
        if isinstance(args, str):
            fields, args = (args,), ()
        elif isinstance(args, tuple) and any(isinstance(a, str) for a in args):
            fields = tuple(a for a in args if isinstance(a, str))
            args = tuple(a for a in args if not isinstance(a, str))
        if fields and self._compound is None:
            raise ValueError(f"field names {fields} given for {self.name}, which is not compound")
        value = self._get(args)
        if fields:
            value = value[fields[0]] if len(fields) == 1 else value[list(fields)]
            if isinstance(value, np.ndarray):
                value = value.copy()
        return value

    def _get(self, args: Any) -> Any:
        if self._external is not None:
            url, name = self._external
            return self._file.external_dataset(url, name)[args]
        empty = isinstance(args, tuple) and args == ()
        if self._scalar:
            if empty or args is Ellipsis:
                arr = self._read(_Selection((), self._zshape)).reshape(())
                return arr[()] if empty else arr
            raise ValueError(f"Illegal slicing argument for scalar dataspace: {args!r}")
        if (
            isinstance(args, np.ndarray)
            and args.dtype == bool
            and args.ndim == len(self._zshape) > 1
        ):
            return self._read(_Selection((), self._zshape))[args]
        if empty:
            args = Ellipsis
        sel = _Selection(args, self._zshape)
        arr = self._read(sel)
        if any(sel.drop):
            arr = arr.reshape(sel.final_shape)
            if arr.ndim == 0:
                return arr[()]
        return arr


_PARALLEL_MIN_CHUNKS = 32
_POOL: ThreadPoolExecutor | None = None
_POOL_LOCK = threading.Lock()


def _decode_workers() -> int:
    """Threads decoding chunks: half the cores, up to 4 (none on 2-core machines, where
    the thread hand-offs cost more than they win)."""
    return min(4, (os.cpu_count() or 1) // 2)


def _decode_pool() -> ThreadPoolExecutor:
    global _POOL
    with _POOL_LOCK:
        if _POOL is None:
            _POOL = ThreadPoolExecutor(_decode_workers(), thread_name_prefix="lindi-decode")
        return _POOL


def _as_index(sel: Any, _n: int) -> np.ndarray:
    if isinstance(sel, slice):
        return np.arange(sel.start, sel.stop, sel.step or 1)
    return np.asarray(sel)


class _View:
    """``asstr()``, ``astype()`` and ``fields()`` wrappers of a dataset."""

    def __init__(
        self, ds: Dataset, convert: Callable[[Any], Any], fields: tuple[str, ...] = ()
    ) -> None:
        self._ds = ds
        self._convert = convert
        self._fields = fields

    def __getitem__(self, args: Any) -> Any:
        if self._fields:
            args = (*(args if isinstance(args, tuple) else (args,)), *self._fields)
        return self._convert(self._ds[args])

    def __len__(self) -> int:
        return len(self._ds)

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        arr = np.asarray(self[()])
        return arr.astype(dtype) if dtype is not None else arr

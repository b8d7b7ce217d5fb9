"""An h5py-like, read-only view of a LINDI file: :class:`File` (the root :class:`Group`).

The classes derive from their h5py counterparts so that code checking
``isinstance(obj, h5py.Dataset)`` (hdmf, pynwb) accepts them, but they never
touch the HDF5 library except to read ``_EXTERNAL_ARRAY_LINK`` datasets.
Every LINDI annotation is honoured: ``_SCALAR`` datasets have shape ``()``,
``_SOFT_LINK`` groups are links, ``_REFERENCE`` values are :class:`Reference`
objects usable as ``f[ref]`` (checked against ``object_id``), ``_COMPOUND_DTYPE``
datasets are structured arrays and ``_EXTERNAL_ARRAY_LINK`` datasets are read
from the linked HDF5 file.

The parts: ``sources`` (where keys come from), ``selection`` (pure selection maths),
``base`` (references, attributes, what nodes share), ``group``, ``dataset`` and this module.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Mapping
from typing import Any

import h5py
from zarr.abc.store import Store

import zarrchive.lindi.annotations as ann
import zarrchive.lindi.refs as rfs_mod
from zarrchive.errors import InvalidInput, InvalidLindiFile, ReferenceMismatch, UnsupportedLink
from zarrchive.lindi.base import Reference
from zarrchive.lindi.dataset import Dataset
from zarrchive.lindi.group import Group
from zarrchive.lindi.sources import Source, child_key, open_source
from zarrchive.lindi.store import RangeReader

#: h5py's link classes, returned by ``get(name, getlink=True)``.
SoftLink = h5py.SoftLink
HardLink = h5py.HardLink

_MAX_LINK_DEPTH = 40


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
        self.source: Source = open_source(source, reader)
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
            cached = self.source.json(child_key(path, ".zattrs")) or {}
            with self._meta_lock:
                self._attrs_cache[path] = cached
        return cached

    def zarray(self, path: str) -> dict[str, Any]:
        with self._meta_lock:
            cached = self._zarray_cache.get(path)
        if cached is None:
            self._check_open()
            cached = self.source.json(child_key(path, ".zarray"))
            if cached is None:
                raise InvalidLindiFile(f"/{path} has no .zarray")
            with self._meta_lock:
                self._zarray_cache[path] = cached
        return cached

    def group_at(self, path: str) -> Group:
        """The group at the Zarr path *path* (not checked)."""
        return Group(self, path)

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
            candidate = child_key(current, part)
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

"""Groups of a LINDI file, with h5py's reading API."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any, Protocol

import h5py

import zarrchive.lindi.annotations as ann
from zarrchive.lindi.base import FileView, Node, Reference, read_only
from zarrchive.lindi.sources import child_key

if TYPE_CHECKING:
    from zarrchive.lindi.dataset import Dataset


class GroupFile(FileView, Protocol):
    """What a group reads through its file: paths resolved (soft links followed), links,
    the object at a path, references dereferenced."""

    def resolve(self, abs_path: str, *, follow_last: bool = True, depth: int = 0) -> str: ...

    def link(self, abs_path: str) -> h5py.SoftLink | h5py.HardLink | None: ...

    def node(self, path: str) -> Group | Dataset: ...

    def dereference(self, ref: Reference) -> Group | Dataset: ...

    def group_at(self, path: str) -> Group: ...


class Group(Node, h5py.Group):  # type: ignore[misc]
    """A group of a LINDI file (h5py's reading API)."""

    _file: GroupFile

    def __init__(self, file: GroupFile, path: str) -> None:
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
                child_path = child_key(path, child)
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
    __setitem__ = read_only
    __delitem__ = read_only
    create_group = read_only
    create_dataset = read_only
    require_group = read_only
    require_dataset = read_only
    copy = read_only
    move = read_only

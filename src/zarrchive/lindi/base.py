"""What groups, files and datasets of a LINDI file share: references, attributes, the node base.

The modules stack without cycles, as h5py's ``_hl`` does: this one at the bottom, then
``dataset``, ``group`` (which answers datasets), ``file`` (the root group, which builds every
node).  A node knows its file only by what it reads through it: :class:`FileView` here (what
every node reads), widened by ``dataset.DatasetFile`` and ``group.GroupFile``;
:class:`~zarrchive.lindi.file.File` is their one implementation.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any, Protocol

import h5py

import zarrchive.lindi.annotations as ann
from zarrchive.errors import InvalidInput

if TYPE_CHECKING:
    from zarrchive.lindi.sources import Source


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


def read_only(*_args: Any, **_kwargs: Any) -> Any:
    """Every writing method of h5py's API: LINDI files open read-only."""
    raise InvalidInput("LINDI files are opened read-only")


# -- nodes ----------------------------------------------------------------------------------
class FileView(Protocol):
    """What every node reads through the file it belongs to (the open file's token, its
    key source, each object's attributes, the group at a path)."""

    @property
    def token(self) -> str: ...

    @property
    def source(self) -> Source: ...

    def __bool__(self) -> bool: ...

    def raw_attrs(self, path: str) -> dict[str, Any]: ...

    def group_at(self, path: str) -> Node: ...


class Node:
    """The h5py object API common to groups, files and datasets (``name``, ``attrs``, ``ref``...)."""

    _file: FileView
    _path: str

    @property
    def name(self) -> str:
        return "/" + self._path

    @property
    def file(self) -> h5py.File:
        """The :class:`~zarrchive.lindi.file.File` this object belongs to."""
        return self._file

    @property
    def parent(self) -> h5py.Group:
        """The :class:`~zarrchive.lindi.group.Group` holding this object."""
        parent = self._path.rpartition("/")[0]
        return self._file.group_at(parent)

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
        return isinstance(other, Node) and other.id == self.id

    def __hash__(self) -> int:
        return hash(self.id)

    def __bool__(self) -> bool:
        return bool(self._file)

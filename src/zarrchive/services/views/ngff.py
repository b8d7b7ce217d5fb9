"""PURE: the OME-NGFF ``multiscales`` of a Zarr group, read and checked for a page.

Where it is: NGFF 0.4 (and earlier) in the attributes of a Zarr v2 group (``.zattrs``,
``multiscales``); NGFF 0.5 in a Zarr v3 group's ``zarr.json`` attributes, under ``ome``
(``ome.version``, ``ome.multiscales``).  A v3 group that has no ``ome`` but a top-level
``multiscales`` (0.5 drafts) is read the same way.

The document is the uploader's: its types are checked, and what a page shows is bounded
(:data:`MAX_AXES` axes, :data:`MAX_LEVELS` levels, at most a scale and a translation per
coordinate transformation list, as NGFF says).  Something malformed is an
:class:`InvalidMultiscales` with the reason, never an exception.  Only the first multiscale
image is read (NGFF: the first is the one to use when there are several).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from zarrchive.errors import InvalidPath
from zarrchive.paths import validate_directory_path
from zarrchive.services.dandi.metadata_limits import short

#: The most axes a multiscale image may declare (NGFF allows 2 to 5).
MAX_AXES = 8
#: The most levels (``datasets``) shown; those after are counted, not read.
MAX_LEVELS = 32
#: The longest level path read, characters.
MAX_LEVEL_PATH_CHARS = 256
#: The transformation types of NGFF 0.4/0.5 multiscales, in the order they must come.
TRANSFORM_TYPES = ("scale", "translation")
#: NGFF versions whose datasets may lack ``coordinateTransformations`` and whose axes may
#: be missing (0.1, 0.2: implied ``t, c, z, y, x``) or plain names (0.3).
_EARLY_VERSIONS = ("0.1", "0.2", "0.3")
_IMPLIED_AXES = ("t", "c", "z", "y", "x")

Number = int | float


@dataclass(frozen=True)
class Axis:
    name: str
    #: ``space``, ``time``, ``channel`` or another the uploader chose (``None``: not said).
    type: str | None
    unit: str | None


@dataclass(frozen=True)
class Transform:
    """A ``scale`` or ``translation``: one value per axis, or the path of a binary
    document holding them."""

    type: str
    values: tuple[Number, ...] | None
    path: str | None

    @property
    def text(self) -> str:
        if self.values is None:
            return f"from {self.path}"
        return ", ".join(short(v, 40) for v in self.values)


@dataclass(frozen=True)
class Level:
    path: str
    transforms: tuple[Transform, ...]

    def transform(self, kind: str) -> Transform | None:
        return next((t for t in self.transforms if t.type == kind), None)


@dataclass(frozen=True)
class Multiscale:
    #: The NGFF version (``ome.version`` in 0.5; the image's own ``version`` before).
    version: str | None
    name: str | None
    axes: tuple[Axis, ...]
    #: The levels, as listed (NGFF: largest first), the first :data:`MAX_LEVELS`.
    levels: tuple[Level, ...]
    #: Levels declared after the first :data:`MAX_LEVELS` (not read).
    more_levels: int
    #: The image's own transformations (applied after each level's).
    transforms: tuple[Transform, ...]
    #: Multiscale images declared after this one (not read).
    more_images: int


@dataclass(frozen=True)
class InvalidMultiscales:
    reason: str


class _Invalid(Exception):
    pass


def read_multiscales(
    zarr_format: int, attributes: Mapping[str, Any]
) -> Multiscale | InvalidMultiscales | None:
    """The first multiscale image the attributes of a group of Zarr *zarr_format* declare;
    ``None`` when they declare none."""
    try:
        found = _locate(zarr_format, attributes)
        if found is None:
            return None
        version, multiscales = found
        return _multiscale(version, multiscales)
    except _Invalid as exc:
        return InvalidMultiscales(str(exc))


def _locate(zarr_format: int, attributes: Mapping[str, Any]) -> tuple[str | None, Any] | None:
    """``(ome.version, multiscales)`` as stored, or ``None``."""
    if zarr_format == 3 and "ome" in attributes:
        ome = attributes["ome"]
        if not isinstance(ome, dict):
            raise _Invalid(f"ome is {_kind(ome)}, not an object")
        if "multiscales" not in ome:
            return None
        version = ome.get("version")
        if version is not None and not isinstance(version, str):
            raise _Invalid(f"ome.version is {_kind(version)}, not a string")
        return version, ome["multiscales"]
    if "multiscales" in attributes:
        return None, attributes["multiscales"]
    return None


def _kind(value: object) -> str:
    """What JSON value *value* is, for a reason."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, dict):
        return "an object"
    return type(value).__name__  # pragma: no cover - JSON has no other kind


def _optional_text(holder: Mapping[str, Any], key: str, where: str) -> str | None:
    value = holder.get(key)
    if value is None:
        return None
    if not isinstance(value, str):
        raise _Invalid(f"{where}.{key} is {_kind(value)}, not a string")
    return short(value)


def _multiscale(ome_version: str | None, multiscales: Any) -> Multiscale:
    if not isinstance(multiscales, list):
        raise _Invalid(f"multiscales is {_kind(multiscales)}, not a list")
    if not multiscales:
        raise _Invalid("multiscales is an empty list")
    image = multiscales[0]
    where = "multiscales[0]"
    if not isinstance(image, dict):
        raise _Invalid(f"{where} is {_kind(image)}, not an object")
    version = ome_version
    if version is None:
        version = _optional_text(image, "version", where)
    axes = _axes(image.get("axes"), version, where)
    datasets = image.get("datasets")
    if not isinstance(datasets, list):
        raise _Invalid(f"{where}.datasets is {_kind(datasets)}, not a list")
    if not datasets:
        raise _Invalid(f"{where}.datasets is an empty list")
    early = version in _EARLY_VERSIONS
    levels = tuple(
        _level(dataset, len(axes), early, f"{where}.datasets[{i}]")
        for i, dataset in enumerate(datasets[:MAX_LEVELS])
    )
    paths = [level.path for level in levels]
    if len(set(paths)) != len(paths):
        raise _Invalid(f"{where}.datasets name a path twice")
    transforms: tuple[Transform, ...] = ()
    if image.get("coordinateTransformations") is not None:
        transforms = _transforms(
            image["coordinateTransformations"], len(axes), f"{where}.coordinateTransformations"
        )
    return Multiscale(
        version=short(version) if version is not None else None,
        name=_optional_text(image, "name", where),
        axes=axes,
        levels=levels,
        more_levels=max(0, len(datasets) - MAX_LEVELS),
        transforms=transforms,
        more_images=len(multiscales) - 1,
    )


def _axes(axes: Any, version: str | None, where: str) -> tuple[Axis, ...]:
    if axes is None:
        if version in ("0.1", "0.2"):
            return tuple(Axis(name, None, None) for name in _IMPLIED_AXES)
        raise _Invalid(f"{where} has no axes")
    if not isinstance(axes, list):
        raise _Invalid(f"{where}.axes is {_kind(axes)}, not a list")
    if not axes:
        raise _Invalid(f"{where}.axes is an empty list")
    if len(axes) > MAX_AXES:
        raise _Invalid(f"{where} declares {len(axes)} axes; at most {MAX_AXES} are read")
    found: list[Axis] = []
    for i, axis in enumerate(axes):
        here = f"{where}.axes[{i}]"
        if isinstance(axis, str) and version == "0.3":
            found.append(Axis(short(axis), None, None))
            continue
        if not isinstance(axis, dict):
            raise _Invalid(f"{here} is {_kind(axis)}, not an object")
        name = axis.get("name")
        if not isinstance(name, str) or not name:
            raise _Invalid(f"{here}.name is {_kind(name)}, not a non-empty string")
        found.append(
            Axis(
                short(name),
                _optional_text(axis, "type", here),
                _optional_text(axis, "unit", here),
            )
        )
    names = [axis.name for axis in found]
    if len(set(names)) != len(names):
        raise _Invalid(f"{where}.axes name an axis twice")
    return tuple(found)


def _level(dataset: Any, axes: int, early: bool, where: str) -> Level:
    if not isinstance(dataset, dict):
        raise _Invalid(f"{where} is {_kind(dataset)}, not an object")
    path = dataset.get("path")
    if not isinstance(path, str):
        raise _Invalid(f"{where}.path is {_kind(path)}, not a string")
    if len(path) > MAX_LEVEL_PATH_CHARS:
        raise _Invalid(f"{where}.path is longer than {MAX_LEVEL_PATH_CHARS} characters")
    try:
        path = validate_directory_path(path)
    except InvalidPath as exc:
        raise _Invalid(f"{where}.path: {exc.message}") from None
    if path == "":
        raise _Invalid(f"{where}.path is empty")
    transforms = dataset.get("coordinateTransformations")
    if transforms is None:
        if early:
            return Level(path, ())
        raise _Invalid(f"{where} has no coordinateTransformations")
    return Level(path, _transforms(transforms, axes, f"{where}.coordinateTransformations"))


def _transforms(transforms: Any, axes: int, where: str) -> tuple[Transform, ...]:
    """NGFF: a ``scale``, then at most one ``translation``."""
    if not isinstance(transforms, list):
        raise _Invalid(f"{where} is {_kind(transforms)}, not a list")
    if not 1 <= len(transforms) <= len(TRANSFORM_TYPES):
        raise _Invalid(
            f"{where} has {len(transforms)} transformations; NGFF wants a scale, then at most "
            "a translation"
        )
    found: list[Transform] = []
    for i, (transform, expected) in enumerate(zip(transforms, TRANSFORM_TYPES, strict=False)):
        here = f"{where}[{i}]"
        if not isinstance(transform, dict):
            raise _Invalid(f"{here} is {_kind(transform)}, not an object")
        kind = transform.get("type")
        if kind != expected:
            shown = short(kind, 40) if isinstance(kind, str) else _kind(kind)
            raise _Invalid(f"{here}.type is {shown}; NGFF wants {expected!r} here")
        found.append(_transform(transform, expected, axes, here))
    return tuple(found)


def _transform(transform: dict[str, Any], kind: str, axes: int, where: str) -> Transform:
    if kind not in transform:
        path = transform.get("path")
        if isinstance(path, str) and path:
            return Transform(kind, None, short(path))
        raise _Invalid(f"{where} has neither {kind!r} values nor a path")
    values = transform[kind]
    if not isinstance(values, list):
        raise _Invalid(f"{where}.{kind} is {_kind(values)}, not a list")
    if len(values) != axes:
        raise _Invalid(f"{where}.{kind} has {len(values)} values for {axes} axes")
    for value in values:
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise _Invalid(f"{where}.{kind} holds {_kind(value)}, not a number")
        if isinstance(value, float) and not math.isfinite(value):
            raise _Invalid(f"{where}.{kind} holds {value}, not a finite number")
    return Transform(kind, tuple(values), None)

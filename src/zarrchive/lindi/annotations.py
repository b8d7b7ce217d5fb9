"""The special LINDI attributes and the JSON encoding of HDF5 attribute values (pure).

LINDI stores HDF5 features Zarr lacks as reserved attributes (see
``lindi-annotations.md``): ``_SCALAR``, ``_SOFT_LINK``, ``_REFERENCE``,
``_COMPOUND_DTYPE`` and ``_EXTERNAL_ARRAY_LINK``.  Attribute values are JSON:
non-finite floats are the strings ``"NaN"``, ``"Infinity"`` and ``"-Infinity"``
and object references are ``{"_REFERENCE": {...}}`` objects.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from zarrchive.errors import InvalidLindiFile, UnsupportedDatatype

SCALAR = "_SCALAR"
SOFT_LINK = "_SOFT_LINK"
REFERENCE = "_REFERENCE"
COMPOUND_DTYPE = "_COMPOUND_DTYPE"
EXTERNAL_ARRAY_LINK = "_EXTERNAL_ARRAY_LINK"
#: Attribute names that are annotations, never user attributes.
SPECIAL_KEYS = frozenset({SCALAR, SOFT_LINK, REFERENCE, COMPOUND_DTYPE, EXTERNAL_ARRAY_LINK})
#: The dtype name of a reference field in ``_COMPOUND_DTYPE``.
REFERENCE_DTYPE_NAME = "<REFERENCE>"
#: The only ``link_type`` of ``_EXTERNAL_ARRAY_LINK``.
HDF5_DATASET_LINK = "hdf5_dataset"

_SPECIAL_FLOATS = {"NaN": math.nan, "Infinity": math.inf, "-Infinity": -math.inf}

JSON = Any
#: Turns a value that is an HDF5 object reference into its ``_REFERENCE`` JSON,
#: or returns ``None`` if the value is not a reference.
RefEncoder = Callable[[Any], "dict[str, Any] | None"]


@dataclass(frozen=True)
class ReferenceTarget:
    """The content of a ``_REFERENCE`` annotation."""

    path: str
    object_id: str | None
    source_object_id: str | None
    source: str = "."

    def to_json(self) -> dict[str, Any]:
        return {
            REFERENCE: {
                "source": self.source,
                "path": self.path,
                "object_id": self.object_id,
                "source_object_id": self.source_object_id,
            }
        }


def reference_json(
    path: str, object_id: str | None, source_object_id: str | None
) -> dict[str, Any]:
    """The ``{"_REFERENCE": ...}`` JSON of a reference to the object at *path*."""
    return ReferenceTarget(path, object_id, source_object_id).to_json()


def parse_reference(value: object) -> ReferenceTarget | None:
    """The target of a ``{"_REFERENCE": ...}`` value, or ``None`` for any other value."""
    if not isinstance(value, dict) or REFERENCE not in value:
        return None
    body = value[REFERENCE]
    if not isinstance(body, dict) or not isinstance(body.get("path"), str):
        raise InvalidLindiFile(f"malformed {REFERENCE} value {value!r}: it needs a string 'path'")
    source = body.get("source", ".")
    if source != ".":
        raise InvalidLindiFile(
            f"{REFERENCE} with source {source!r} is not supported: only '.' (this file) is"
        )
    object_id = body.get("object_id")
    source_object_id = body.get("source_object_id")
    return ReferenceTarget(
        path=body["path"],
        object_id=None if object_id is None else str(object_id),
        source_object_id=None if source_object_id is None else str(source_object_id),
    )


def soft_link_attrs(path: str) -> dict[str, Any]:
    """The ``.zattrs`` of the (otherwise empty) group that stands for a soft link."""
    return {SOFT_LINK: {"path": path}}


def soft_link_path(attrs: dict[str, Any]) -> str | None:
    """The target path if *attrs* mark a soft link, else ``None``."""
    link = attrs.get(SOFT_LINK)
    if link is None:
        return None
    if not isinstance(link, dict) or not isinstance(link.get("path"), str):
        raise InvalidLindiFile(f"malformed {SOFT_LINK} value {link!r}: it needs a string 'path'")
    return str(link["path"])


def external_array_link(url: str, name: str) -> dict[str, Any]:
    """The value of ``_EXTERNAL_ARRAY_LINK`` for dataset *name* of the HDF5 file at *url*."""
    return {"link_type": HDF5_DATASET_LINK, "url": url, "name": name}


def parse_external_array_link(value: object) -> tuple[str, str]:
    """``(url, name)`` of an ``_EXTERNAL_ARRAY_LINK`` value."""
    if (
        not isinstance(value, dict)
        or value.get("link_type") != HDF5_DATASET_LINK
        or not isinstance(value.get("url"), str)
        or not isinstance(value.get("name"), str)
    ):
        raise InvalidLindiFile(
            f"malformed {EXTERNAL_ARRAY_LINK} value {value!r}: expected"
            f" {{'link_type': '{HDF5_DATASET_LINK}', 'url': ..., 'name': ...}}"
        )
    return str(value["url"]), str(value["name"])


def join_path(parent: str, name: str) -> str:
    """The absolute HDF5 path of *name* (absolute or relative, with ``..``) seen from *parent*."""
    parts = [] if name.startswith("/") else [p for p in parent.split("/") if p]
    for part in name.split("/"):
        if part in ("", "."):
            continue
        if part == "..":
            if parts:
                parts.pop()
        else:
            parts.append(part)
    return "/" + "/".join(parts)


# -- floats -------------------------------------------------------------------
def encode_float(value: float) -> float | str:
    """A float as JSON: non-finite values become ``"NaN"``, ``"Infinity"``, ``"-Infinity"``."""
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "Infinity" if value > 0 else "-Infinity"
    return float(value)


def decode_special_float(value: object) -> object:
    """The float for ``"NaN"``, ``"Infinity"``, ``"-Infinity"``; other values unchanged."""
    if isinstance(value, str) and value in _SPECIAL_FLOATS:
        return _SPECIAL_FLOATS[value]
    return value


# -- attributes: HDF5 -> JSON ---------------------------------------------------
def encode_attribute(value: Any, *, label: str, encode_ref: RefEncoder) -> JSON:
    """The JSON of an HDF5 attribute value as h5py returns it.

    Supported: numbers (non-finite floats included), booleans, ``str`` and
    ``bytes`` (UTF-8), arrays and lists of those (nested lists), references and
    arrays of references.  Anything else raises :class:`UnsupportedDatatype`.
    """
    ref = encode_ref(value)
    if ref is not None:
        return ref
    if isinstance(value, bool | np.bool_):
        return bool(value)
    if isinstance(value, int | np.integer):
        return int(value)
    if isinstance(value, float | np.floating):
        return encode_float(float(value))
    if isinstance(value, str):
        if value in _SPECIAL_FLOATS:
            raise UnsupportedDatatype(
                f"attribute {label} is the string {value!r}, which LINDI cannot tell apart"
                " from the float it stands for: store it as a float or change the text"
            )
        return value
    if isinstance(value, bytes | np.bytes_):
        try:
            return encode_attribute(
                bytes(value).decode("utf-8"), label=label, encode_ref=encode_ref
            )
        except UnicodeDecodeError as exc:
            raise UnsupportedDatatype(
                f"attribute {label} holds bytes that are not UTF-8 text; LINDI stores text only"
            ) from exc
    if isinstance(value, list | tuple):
        value = np.asarray(value)
    if isinstance(value, np.ndarray):
        if value.dtype.kind == "c":
            raise UnsupportedDatatype(f"attribute {label} is complex: LINDI attributes are JSON")
        if value.dtype.names is not None:
            raise UnsupportedDatatype(
                f"attribute {label} has a compound type: LINDI supports compound datasets,"
                " not compound attributes"
            )
        if value.dtype.kind in "iub":
            return value.tolist()
        if value.dtype.kind == "f":
            return _map_nested(value.tolist(), lambda x: encode_float(float(x)))
        if value.dtype.kind in "OSU":
            return _map_nested(
                value.tolist(),
                lambda x: encode_attribute(x, label=label, encode_ref=encode_ref),
            )
        raise UnsupportedDatatype(f"attribute {label} has the unsupported type {value.dtype}")
    raise UnsupportedDatatype(
        f"attribute {label} has the unsupported type {type(value).__name__}"
        " (empty/null attributes and opaque types cannot be stored as JSON)"
    )


def _map_nested(value: Any, fn: Callable[[Any], Any]) -> Any:
    if isinstance(value, list):
        return [_map_nested(v, fn) for v in value]
    return fn(value)


# -- attributes: JSON -> h5py-like values -----------------------------------------
def decode_attribute(value: JSON, make_ref: Callable[[ReferenceTarget], Any]) -> Any:
    """The h5py-like value of a JSON attribute.

    Like h5py: numbers become numpy scalars (``int64``, ``float64``, ``bool``),
    strings stay ``str``, lists become numpy arrays (strings and references as
    object arrays), references become ``make_ref(target)``.
    """
    target = parse_reference(value)
    if target is not None:
        return make_ref(target)
    if isinstance(value, bool):
        return np.bool_(value)
    if isinstance(value, int):
        return _integer(value)
    if isinstance(value, float):
        return np.float64(value)
    if isinstance(value, str):
        special = decode_special_float(value)
        return np.float64(special) if isinstance(special, float) else value
    if isinstance(value, list):
        return _decode_list(value, make_ref)
    if isinstance(value, dict):
        return value
    return value


_INT64_MAX = 2**63 - 1


def _integer(value: int) -> np.integer[Any]:
    """``int64`` like h5py, ``uint64`` for values only that type holds."""
    if value > _INT64_MAX:
        return np.uint64(value)
    return np.int64(value)


def _flatten(value: Any) -> list[Any]:
    if isinstance(value, list):
        return [x for v in value for x in _flatten(v)]
    return [value]


def _decode_list(value: list[Any], make_ref: Callable[[ReferenceTarget], Any]) -> np.ndarray:
    flat = _flatten(value)
    if flat and all(isinstance(x, bool) for x in flat):
        return np.array(value, dtype=bool)
    if all(isinstance(x, int) and not isinstance(x, bool) for x in flat):
        big = any(x > _INT64_MAX for x in flat)
        return np.array(value, dtype=np.uint64 if big else np.int64)
    if all(
        (isinstance(x, int | float) and not isinstance(x, bool))
        or (isinstance(x, str) and x in _SPECIAL_FLOATS)
        for x in flat
    ):
        return np.array(_map_nested(value, decode_special_float), dtype=np.float64)
    if all(isinstance(x, str) for x in flat):
        return _object_array(value, lambda x: x)
    if all(parse_reference(x) is not None for x in flat):
        return _object_array(value, lambda x: make_ref(parse_reference(x)))  # type: ignore[arg-type]
    raise InvalidLindiFile(f"attribute list {value!r:.80} mixes types that HDF5 cannot hold")


def _object_array(value: list[Any], fn: Callable[[Any], Any]) -> np.ndarray:
    shape = np.shape(np.array(_map_nested(value, lambda _: 0)))
    out = np.empty(shape, dtype=object)
    flat = out.reshape(-1)
    for i, x in enumerate(_flatten(value)):
        flat[i] = fn(x)
    return out


# -- compound dtypes ------------------------------------------------------------
def compound_dtype_json(
    dtype: np.dtype[Any], is_reference: Callable[[np.dtype[Any]], bool], *, label: str
) -> list[list[str]]:
    """The ``_COMPOUND_DTYPE`` of a numpy structured dtype."""
    assert dtype.names is not None
    out: list[list[str]] = []
    for name in dtype.names:
        field = dtype[name]
        if is_reference(field):
            out.append([name, REFERENCE_DTYPE_NAME])
        elif field.kind in "iufbS" and field.shape == ():
            out.append([name, str(field)])
        elif field.kind == "O":
            out.append([name, "object"])  # variable-length string
        else:
            raise UnsupportedDatatype(
                f"compound dataset {label} has field {name!r} of type {field}: LINDI supports"
                " numeric, boolean, string and reference fields"
            )
    return out


def parse_compound_dtype(
    value: object, reference_dtype: np.dtype[Any], string_dtype: np.dtype[Any]
) -> np.dtype[Any]:
    """The numpy structured dtype of a ``_COMPOUND_DTYPE`` value."""
    if not isinstance(value, list) or not all(
        isinstance(f, list | tuple) and len(f) == 2 and all(isinstance(x, str) for x in f)
        for f in value
    ):
        raise InvalidLindiFile(
            f"malformed {COMPOUND_DTYPE} value {value!r}: expected [[name, dtype], ...]"
        )
    fields: list[tuple[str, Any]] = []
    for name, type_name in value:
        if type_name == REFERENCE_DTYPE_NAME:
            fields.append((name, reference_dtype))
        elif type_name in ("object", "|O", "O"):
            fields.append((name, string_dtype))
        else:
            try:
                fields.append((name, np.dtype(type_name)))
            except TypeError as exc:
                raise InvalidLindiFile(
                    f"{COMPOUND_DTYPE} field {name!r} has unknown type {type_name!r}"
                ) from exc
    return np.dtype(fields)


def encode_compound_value(
    value: Any, field: np.dtype[Any], *, label: str, encode_ref: RefEncoder
) -> JSON:
    """The JSON of one field value of a compound record."""
    ref = encode_ref(value)
    if ref is not None:
        return ref
    if field.kind == "b":
        return bool(value)
    if field.kind in "iu":
        return int(value)
    if field.kind == "f":
        return encode_float(float(value))
    if isinstance(value, bytes | np.bytes_):
        return bytes(value).decode("utf-8", errors="surrogateescape")
    if isinstance(value, str):
        return value
    raise UnsupportedDatatype(f"compound dataset {label} holds the unsupported value {value!r:.60}")

"""The pure rules that turn HDF5 facts into LINDI reference file system entries.

No I/O here: :mod:`zarrchive.lindi.h5source` reads the HDF5 file and feeds
these functions plain values (shapes, dtypes, byte ranges, decoded data).
"""

from __future__ import annotations

import base64
import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from zarrchive.errors import InvalidInput
from zarrchive.lindi.annotations import encode_float

#: ``filters`` entry of object arrays: numcodecs' JSON codec with its defaults.
JSON_CODEC: dict[str, Any] = {
    "id": "json2",
    "encoding": "utf-8",
    "skipkeys": False,
    "ensure_ascii": True,
    "check_circular": True,
    "allow_nan": True,
    "indent": None,
    "separators": [",", ":"],
    "sort_keys": True,
    "strict": True,
}
ZGROUP: dict[str, Any] = {"zarr_format": 2}


@dataclass(frozen=True)
class ConvertOptions:
    """Options of the HDF5 -> LINDI conversion.

    - ``external_array_link_threshold``: chunked datasets with more chunks than
      this become ``_EXTERNAL_ARRAY_LINK``s (``None``: never);
    - ``contiguous_max_chunk_bytes``: contiguous datasets larger than this are
      referenced as several row-aligned chunks of about this size (``None``: one chunk);
    - ``inline_max_elements``: numeric datasets with fewer elements are stored inline;
    - ``use_templates``: URLs used 5 times or more become ``{{uN}}`` templates;
    - ``max_objects``, ``max_depth``, ``max_refs``, ``max_decoded_bytes``: bounds of a
      conversion of hostile input (``None``: none): groups and datasets, nesting of groups,
      entries of the reference file system, bytes of one dataset decoded into the JSON
      (strings, compounds, references).  Past one, :class:`~zarrchive.errors.LindiTooLarge`;
    - ``max_attributes``, ``max_object_references``, ``max_inline_bytes``: bounds of the
      whole file: attributes of all its objects, object references resolved, bytes of all
      the chunks stored inline (decoded data, before base64).
    """

    external_array_link_threshold: int | None = 1000
    contiguous_max_chunk_bytes: int | None = 20_000_000
    inline_max_elements: int = 1000
    use_templates: bool = True
    max_objects: int | None = None
    max_depth: int | None = None
    max_refs: int | None = None
    max_decoded_bytes: int | None = None
    max_attributes: int | None = None
    max_object_references: int | None = None
    max_inline_bytes: int | None = None

    def __post_init__(self) -> None:
        if (
            self.external_array_link_threshold is not None
            and self.external_array_link_threshold < 0
        ):
            raise InvalidInput("external_array_link_threshold must be >= 0 or None")
        if self.contiguous_max_chunk_bytes is not None and self.contiguous_max_chunk_bytes < 1:
            raise InvalidInput("contiguous_max_chunk_bytes must be >= 1 or None")
        if self.inline_max_elements < 0:
            raise InvalidInput("inline_max_elements must be >= 0")
        for name in (
            "max_objects",
            "max_depth",
            "max_refs",
            "max_decoded_bytes",
            "max_attributes",
            "max_object_references",
            "max_inline_bytes",
        ):
            value = getattr(self, name)
            if value is not None and value < 1:
                raise InvalidInput(f"{name} must be >= 1 or None")


def check_bounds(
    options: ConvertOptions, *, objects: int, depth: int, refs: int, decoded_bytes: int = 0
) -> str | None:
    """What bound of *options* a conversion passes (``None``: within them all)."""
    if options.max_objects is not None and objects > options.max_objects:
        return f"too big to convert: more than {options.max_objects} groups and datasets"
    if options.max_depth is not None and depth > options.max_depth:
        return f"too deep to convert: groups nested more than {options.max_depth} levels"
    if options.max_refs is not None and refs > options.max_refs:
        return f"too big to convert: more than {options.max_refs} LINDI entries"
    if options.max_decoded_bytes is not None and decoded_bytes > options.max_decoded_bytes:
        return (
            f"too big to convert: a dataset of {decoded_bytes} bytes to decode into the LINDI"
            f" file (at most {options.max_decoded_bytes})"
        )
    return None


def check_file_bounds(
    options: ConvertOptions, *, attributes: int = 0, object_references: int = 0
) -> str | None:
    """What bound of the whole file a conversion passes (``None``: within them)."""
    if options.max_attributes is not None and attributes > options.max_attributes:
        return f"too big to convert: more than {options.max_attributes} attributes"
    if (
        options.max_object_references is not None
        and object_references > options.max_object_references
    ):
        return f"too big to convert: more than {options.max_object_references} object references"
    return None


def check_inline_bytes(
    options: ConvertOptions, *, stored: int, adding: int, label: str
) -> str | None:
    """Whether *adding* bytes of *label* inline, after *stored*, passes the file's bound."""
    limit = options.max_inline_bytes
    if limit is None or stored + adding <= limit:
        return None
    return (
        f"too big to convert: more than {limit} bytes of data stored inline in the LINDI file"
        f" ({label} brings them to at least {stored + adding})"
    )


# -- what points outside the file ------------------------------------------------
#: HDF5 filters the archive knows: HDF5's own and the registered ids LINDI converts.  Any
#: other is a user-defined filter, which HDF5 would look for as a plugin (code loaded from
#: a path): a file that names one is refused before anything is read.
KNOWN_FILTERS = frozenset({1, 2, 3, 4, 5, 6, 32000, 32001, 32004, 32008, 32015, 32026})


def storage_refusal(
    label: str, *, external_files: int, virtual: bool, filter_ids: Sequence[int]
) -> str | None:
    """Why the dataset *label* can't be converted because it points outside its file
    (``None``: it does not).  External raw data files and virtual datasets name other files;
    unknown filters name plugins."""
    if external_files > 0:
        return (
            f"dataset {label} keeps its data in external files (HDF5 external storage): the"
            " archive never reads outside the uploaded file; copy the data into the file first"
        )
    if virtual:
        return (
            f"dataset {label} is a virtual dataset (its data lives in other files): the archive"
            " never reads outside the uploaded file; copy its data into a regular dataset first"
        )
    unknown = sorted({int(f) for f in filter_ids} - KNOWN_FILTERS)
    if unknown:
        return (
            f"dataset {label} uses the user-defined HDF5 filter {unknown[0]}: the archive loads"
            " no filter plugins; repack the file without it (e.g. h5repack -f NONE)"
        )
    return None


# -- dtypes and metadata ------------------------------------------------------
def is_numeric(dtype: np.dtype[Any]) -> bool:
    """Numbers and booleans: referenced in place when large enough."""
    return dtype.kind in "iufcb" and dtype.names is None and dtype.shape == ()


def zarr_dtype(dtype: np.dtype[Any]) -> str:
    """The Zarr v2 ``dtype`` string: numpy's typestr, ``|O`` for JSON-encoded values."""
    if dtype.kind in "iufcbS" and dtype.names is None:
        return dtype.str
    return "|O"


def fill_value_json(value: Any, dtype: np.dtype[Any]) -> Any:
    """A fill value as Zarr v2 ``.zarray`` JSON (``None`` for object arrays)."""
    if value is None or dtype.kind not in "iufcbS" or dtype.names is not None:
        return None
    if dtype.kind == "b":
        return bool(value)
    if dtype.kind in "iu":
        return int(value)
    if dtype.kind == "f":
        return encode_float(float(value))
    if dtype.kind == "c":
        c = complex(value)
        return [encode_float(c.real), encode_float(c.imag)]
    return base64.b64encode(bytes(value)).decode("ascii")


def zarray(
    shape: Sequence[int],
    chunks: Sequence[int],
    dtype: str,
    *,
    fill_value: Any = None,
    filters: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """A Zarr v2 ``.zarray`` (codecs all in ``filters``, ``compressor`` null)."""
    return {
        "zarr_format": 2,
        "shape": [int(s) for s in shape],
        "chunks": [int(c) for c in chunks],
        "dtype": dtype,
        "compressor": None,
        "fill_value": fill_value,
        "filters": filters or None,
        "order": "C",
        "dimension_separator": ".",
    }


def zarr_chunks(shape: Sequence[int], chunks: Sequence[int] | None) -> list[int]:
    """The Zarr chunk shape: the HDF5 one, or the whole array; never 0."""
    source = chunks if chunks is not None else shape
    return [max(1, int(c)) for c in source]


def chunk_key(path: str, coords: Sequence[int]) -> str:
    """The key of the chunk at grid *coords* of the array at *path* (``"0"`` for 0-d)."""
    name = ".".join(str(int(c)) for c in coords) if len(coords) else "0"
    return f"{path}/{name}" if path else name


def chunk_coords(offset: Sequence[int], chunks: Sequence[int]) -> tuple[int, ...]:
    """The grid coordinates of the chunk whose first element is at *offset*."""
    return tuple(int(o) // int(c) for o, c in zip(offset, chunks, strict=True))


def grid_shape(shape: Sequence[int], chunks: Sequence[int]) -> tuple[int, ...]:
    return tuple(
        math.ceil(int(s) / int(c)) if int(c) else 0 for s, c in zip(shape, chunks, strict=True)
    )


def chunk_count(shape: Sequence[int], chunks: Sequence[int]) -> int:
    """The number of chunks of the grid (allocated or not)."""
    return math.prod(grid_shape(shape, chunks))


def needs_external_link(
    shape: Sequence[int], chunks: Sequence[int] | None, threshold: int | None
) -> bool:
    """Whether a dataset becomes an ``_EXTERNAL_ARRAY_LINK``: chunked, more chunks than *threshold*."""
    if threshold is None or chunks is None:
        return False
    return chunk_count(shape, chunks) > threshold


def is_inline_numeric(shape: Sequence[int], *, inline_max_elements: int) -> bool:
    size = math.prod(shape)
    return 0 < size < inline_max_elements


@dataclass(frozen=True)
class Piece:
    """A referenced chunk: its grid coordinates and its byte range in the HDF5 file."""

    coords: tuple[int, ...]
    offset: int
    size: int


def split_contiguous(
    shape: Sequence[int], itemsize: int, offset: int, nbytes: int, max_chunk_bytes: int | None
) -> tuple[list[int], list[Piece]]:
    """Chunk shape and byte ranges of a contiguous dataset.

    One chunk (the whole array) unless it is larger than *max_chunk_bytes*: then
    chunks of whole rows (first dimension), about *max_chunk_bytes* each; the
    last one may be short.
    """
    ndim = len(shape)
    whole = zarr_chunks(shape, None)
    if ndim == 0 or max_chunk_bytes is None or nbytes <= max_chunk_bytes or shape[0] <= 1:
        return whole, [Piece((0,) * ndim, offset, nbytes)]
    row_bytes = math.prod(shape[1:]) * itemsize
    rows = max(1, max_chunk_bytes // max(1, row_bytes))
    chunk_bytes = rows * row_bytes
    pieces = []
    for i in range(math.ceil(shape[0] / rows)):
        start = i * chunk_bytes
        pieces.append(
            Piece((i,) + (0,) * (ndim - 1), offset + start, min(chunk_bytes, nbytes - start))
        )
    return [rows, *whole[1:]], pieces


def numeric_chunk_bytes(array: np.ndarray) -> bytes:
    """The raw bytes (C order) of an inline numeric or fixed-string chunk."""
    return np.ascontiguousarray(array).tobytes()


def object_chunk_bytes(items: list[Any], shape: Sequence[int]) -> bytes:
    """An inline chunk of JSON values, as numcodecs' JSON codec encodes it."""
    payload = [*items, "|O", [int(s) for s in shape]]
    text = json.dumps(
        payload, ensure_ascii=True, allow_nan=False, sort_keys=True, separators=(",", ":")
    )
    return text.encode("utf-8")


def nest(flat: list[Any], shape: Sequence[int]) -> list[Any]:
    """*flat* (C order) as nested lists of *shape* (as ``ndarray.tolist`` would give)."""
    if len(shape) <= 1:
        return list(flat)
    step = math.prod(shape[1:])
    return [nest(flat[i * step : (i + 1) * step], shape[1:]) for i in range(shape[0])]

"""HDF5 filter pipelines as numcodecs codec chains, and chunk decoding (pure).

A LINDI ``.zarray`` lists the HDF5 filters, in pipeline (encoding) order, as
Zarr v2 ``filters`` with ``compressor: null``: the bytes of a chunk in the HDF5
file are then exactly what the codec chain produces.

Decoding pads a *decoded* chunk that is shorter than the chunk shape (the last
piece of a contiguous dataset split into row-aligned chunks).  Padding the
encoded bytes, as some readers do, corrupts compressed or checksummed chunks.
"""

from __future__ import annotations

import math
import zlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numcodecs
import numpy as np

from zarrchive.errors import InvalidLindiFile, UnsupportedFilter

# HDF5 filter identifiers (H5Zpublic.h and the registered plugin ids).
H5Z_DEFLATE = 1
H5Z_SHUFFLE = 2
H5Z_FLETCHER32 = 3
H5Z_SZIP = 4
H5Z_NBIT = 5
H5Z_SCALEOFFSET = 6
H5Z_LZF = 32000
H5Z_BLOSC = 32001
H5Z_LZ4 = 32004
H5Z_BITSHUFFLE = 32008
H5Z_ZSTD = 32015
H5Z_BLOSC2 = 32026

_FILTER_NAMES = {
    H5Z_DEFLATE: "deflate (gzip)",
    H5Z_SHUFFLE: "shuffle",
    H5Z_FLETCHER32: "fletcher32",
    H5Z_SZIP: "szip",
    H5Z_NBIT: "nbit",
    H5Z_SCALEOFFSET: "scaleoffset",
    H5Z_LZF: "lzf",
    H5Z_BLOSC: "blosc",
    H5Z_LZ4: "lz4",
    H5Z_BITSHUFFLE: "bitshuffle",
    H5Z_ZSTD: "zstd",
    H5Z_BLOSC2: "blosc2",
}
_BLOSC_COMPRESSORS = ("blosclz", "lz4", "lz4hc", "snappy", "zlib", "zstd")

#: numcodecs ids a LINDI file may name.  ``pickle`` (code execution on decode)
#: is deliberately absent.
ALLOWED_CODEC_IDS = frozenset(
    {
        "zlib",
        "gzip",
        "shuffle",
        "fletcher32",
        "blosc",
        "zstd",
        "lz4",
        "bz2",
        "lzma",
        "delta",
        "fixedscaleoffset",
        "quantize",
        "packbits",
        "categorize",
        "astype",
        "json2",
        "vlen-utf8",
        "vlen-bytes",
        "vlen-array",
        "msgpack2",
        "crc32",
        "adler32",
        "crc32c",
    }
)
#: Codecs that turn an object array into bytes (the first filter of an object array).
OBJECT_CODEC_IDS = frozenset({"json2", "vlen-utf8", "vlen-bytes", "msgpack2"})


@dataclass(frozen=True)
class H5Filter:
    """One filter of an HDF5 dataset's pipeline: its id and client data."""

    id: int
    client_data: tuple[int, ...] = ()
    name: str = ""


def filter_name(filter_id: int, fallback: str = "") -> str:
    return _FILTER_NAMES.get(filter_id, fallback or f"filter {filter_id}")


def filters_to_codecs(
    pipeline: Sequence[H5Filter], *, itemsize: int, dataset: str
) -> list[dict[str, Any]]:
    """The numcodecs configurations, in encoding order, of an HDF5 filter pipeline.

    Raises :class:`UnsupportedFilter` naming the filter and the dataset for
    filters that have no numcodecs equivalent.
    """
    out: list[dict[str, Any]] = []
    for flt in pipeline:
        cd = flt.client_data
        if flt.id == H5Z_DEFLATE:
            out.append({"id": "zlib", "level": int(cd[0]) if cd else 6})
        elif flt.id == H5Z_SHUFFLE:
            out.append({"id": "shuffle", "elementsize": int(cd[0]) if cd else itemsize})
        elif flt.id == H5Z_FLETCHER32:
            out.append({"id": "fletcher32"})
        elif flt.id == H5Z_ZSTD:
            out.append({"id": "zstd", "level": int(cd[0]) if cd else 0})
        elif flt.id == H5Z_BLOSC:
            # cd: version, format version, typesize, buffer size, clevel, shuffle, compressor
            compressor = int(cd[6]) if len(cd) > 6 else 0
            if compressor >= len(_BLOSC_COMPRESSORS):
                raise UnsupportedFilter(
                    f"dataset {dataset} uses blosc with unknown compressor code {compressor}"
                )
            out.append(
                {
                    "id": "blosc",
                    "cname": _BLOSC_COMPRESSORS[compressor],
                    "clevel": int(cd[4]) if len(cd) > 4 else 5,
                    "shuffle": int(cd[5]) if len(cd) > 5 else 1,
                    "blocksize": 0,
                }
            )
        else:
            name = filter_name(flt.id, flt.name)
            raise UnsupportedFilter(
                f"dataset {dataset} uses the HDF5 filter {name!r} (id {flt.id}), which has no"
                " numcodecs equivalent: LINDI supports shuffle, deflate/gzip, blosc, zstd and"
                " fletcher32; repack the file without it (e.g. h5repack -f NONE) or keep it as HDF5"
            )
    return out


# -- decoding -----------------------------------------------------------------
def get_codec(config: object) -> Any:
    """A numcodecs codec from its configuration, refusing unsafe or unknown ids."""
    if not isinstance(config, dict) or not isinstance(config.get("id"), str):
        raise InvalidLindiFile(f"malformed codec configuration {config!r}")
    if config["id"] not in ALLOWED_CODEC_IDS:
        raise InvalidLindiFile(
            f"the codec {config['id']!r} is not allowed in a LINDI file"
            f" (allowed: {', '.join(sorted(ALLOWED_CODEC_IDS))})"
        )
    try:
        return numcodecs.get_codec(dict(config))
    except Exception as exc:  # numcodecs raises ValueError/TypeError/KeyError
        raise InvalidLindiFile(f"cannot build the codec {config!r}: {exc}") from exc


@dataclass
class CodecChain:
    """The decoding side of a Zarr v2 array's ``filters`` and ``compressor``."""

    filters: list[Any] = field(default_factory=list)
    compressor: Any = None

    @classmethod
    def from_zarray(cls, zarray: dict[str, Any]) -> CodecChain:
        filters = [get_codec(c) for c in (zarray.get("filters") or [])]
        comp = zarray.get("compressor")
        return cls(filters=filters, compressor=None if comp is None else get_codec(comp))

    @property
    def is_raw(self) -> bool:
        return not self.filters and self.compressor is None

    def ids(self) -> list[str]:
        codecs = [*self.filters, *([self.compressor] if self.compressor is not None else [])]
        return [str(c.codec_id) for c in codecs]

    def decode(self, data: bytes) -> Any:
        out: Any = data
        if self.compressor is not None:
            out = _decode_one(self.compressor, out)
        for codec in reversed(self.filters):
            out = _decode_one(codec, out)
        return out


def _decode_one(codec: Any, data: Any) -> Any:
    # zlib streams (HDF5 deflate) straight to the C library: numcodecs adds
    # buffer conversions that cost more than small chunks take to inflate.
    if codec.codec_id == "zlib" and isinstance(data, bytes | bytearray | memoryview):
        return zlib.decompress(data)
    return codec.decode(data)


def decode_chunk(
    data: bytes,
    chain: CodecChain,
    *,
    dtype: np.dtype[Any],
    chunk_shape: tuple[int, ...],
    order: str = "C",
    label: str = "",
) -> np.ndarray:
    """The array of one chunk.

    A fixed-size chunk whose decoded size falls short of the chunk shape is
    padded with zeros after decoding (the missing part lies beyond the array's
    end); a longer one is an error.
    """
    decoded = chain.decode(data)
    count = math.prod(chunk_shape)
    if dtype.kind == "O":
        arr = np.asarray(decoded, dtype=object).reshape(-1)
        if arr.size != count:
            raise InvalidLindiFile(
                f"chunk {label} holds {arr.size} objects, the chunk shape {list(chunk_shape)} needs {count}"
            )
        return arr.reshape(chunk_shape, order="F" if order == "F" else "C")
    raw = decoded if isinstance(decoded, bytes | bytearray | memoryview) else np.asarray(decoded)
    buf = (
        memoryview(raw).cast("B")
        if not isinstance(raw, np.ndarray)
        else raw.reshape(-1).view(np.uint8)
    )
    expected = count * dtype.itemsize
    if len(buf) < expected:
        padded = np.zeros(expected, dtype=np.uint8)
        padded[: len(buf)] = np.frombuffer(buf, dtype=np.uint8)
        buf = padded
    elif len(buf) > expected:
        raise InvalidLindiFile(
            f"chunk {label} decodes to {len(buf)} bytes, more than the {expected} of its chunk shape"
        )
    arr = np.frombuffer(buf, dtype=dtype, count=count)
    return arr.reshape(chunk_shape, order="F" if order == "F" else "C")


def summarize(
    filters: Sequence[dict[str, Any]], compressor: dict[str, Any] | None
) -> dict[str, Any]:
    """h5py-like ``compression``, ``compression_opts``, ``shuffle``, ``fletcher32``.

    ``"gzip"`` for a zlib codec, ``"unknown"`` (as h5py says of plugin filters)
    for other codecs among the ``filters``, where LINDI puts the HDF5 pipeline;
    a ``compressor`` (how some writers store inline data) is not an HDF5 filter.
    """
    configs = [*filters, *([compressor] if compressor else [])]
    ids = [str(c.get("id")) for c in configs]
    compression: str | None = None
    opts: Any = None
    for cid, cfg in zip(ids, configs, strict=True):
        if cid in ("zlib", "gzip"):
            compression, opts = "gzip", cfg.get("level")
    if compression is None and any(
        str(c.get("id")) not in ("shuffle", "fletcher32")
        and str(c.get("id")) not in OBJECT_CODEC_IDS
        for c in filters
    ):
        compression = "unknown"
    return {
        "compression": compression,
        "compression_opts": opts,
        "shuffle": "shuffle" in ids,
        "fletcher32": "fletcher32" in ids,
    }

"""Hostile Zarr files, made cheaply: decompression bombs, attribute bombs, absurd metadata."""

from __future__ import annotations

import bz2
import functools
import json
import zlib
from typing import Any

MiB = 1024 * 1024
GiB = 1024 * MiB


@functools.cache
def bz2_zeros(size: int, unit: int = 8 * MiB) -> bytes:
    """bz2 data of *size* zero bytes: one stream of *unit* zeros repeated (numcodecs' bz2,
    like ``bz2.decompress``, reads concatenated streams as one)."""
    assert size % unit == 0
    return bz2.compress(b"\0" * unit, 9) * (size // unit)


@functools.cache
def zlib_zeros(size: int) -> bytes:
    """One zlib stream of *size* zero bytes (a multiple of 1 MiB), built without compressing
    them all: after the first MiB, each further MiB compresses (sync-flushed) to the same
    bytes, so those are repeated; then an empty final block and the Adler-32 of the zeros."""
    assert size % MiB == 0 and size >= 2 * MiB
    zeros = b"\0" * MiB
    compressor = zlib.compressobj(9)
    first = compressor.compress(zeros) + compressor.flush(zlib.Z_SYNC_FLUSH)
    again = compressor.compress(zeros) + compressor.flush(zlib.Z_SYNC_FLUSH)
    assert again == compressor.compress(zeros) + compressor.flush(zlib.Z_SYNC_FLUSH)
    adler = ((size % 65521) << 16) | 1  # a = 1 + sum of bytes, b = sum of a's: n for zeros
    final_empty_fixed_block = b"\x03\x00"
    return first + again * (size // MiB - 1) + final_empty_fixed_block + adler.to_bytes(4, "big")


def zarray(
    shape: tuple[int, ...],
    chunks: tuple[int, ...],
    *,
    dtype: str = "|u1",
    compressor: dict[str, Any] | None = None,
) -> bytes:
    """A v2 ``.zarray`` document."""
    return json.dumps(
        {
            "zarr_format": 2,
            "shape": list(shape),
            "chunks": list(chunks),
            "dtype": dtype,
            "compressor": compressor,
            "fill_value": 0,
            "order": "C",
            "filters": None,
        }
    ).encode()


def nested_attributes(depth: int, items: int) -> bytes:
    """A ``.zattrs`` of *items* zeros inside *depth* nested lists: a few hundred KB whose
    ``json.dumps(indent=2)`` indents every item by its depth."""
    inner = ",".join(["0"] * items)
    return ('{"bomb": ' + "[" * depth + inner + "]" * depth + "}").encode()

"""PURE: the index of a Zarr v3 shard (``sharding_indexed``), read from an uploader's bytes,
and which byte ranges of which shards a reader of some inner chunks needs.

A shard holds the inner chunks of a block of the array and an index: for each inner chunk,
in C order of the shard's inner grid, its ``(offset, length)`` as two little-endian uint64,
both ``2**64 - 1`` for an inner chunk that is not stored (it reads as the fill value),
optionally followed by the index's crc32c (4 bytes, little-endian).  The index lies at the
start or the end of the shard (``index_location``).

Everything in an index is uploader-controlled: :func:`parse_index` refuses
(:class:`InvalidShard`) a wrong checksum and every entry that is not the empty marker or a
range of at most ``max_chunk_bytes`` bytes within the shard, off its index, so that a reader
then fetches only bounded ranges of the object.  No I/O here:
:mod:`zarrchive.services.views.arrays` reads the ranges this module names.
"""

from __future__ import annotations

import math
import struct
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import overload

import google_crc32c
import numpy as np
import numpy.typing as npt

#: One index entry: offset and length, two little-endian uint64.
ENTRY_BYTES = 16
#: The index's crc32c, when its codecs say so.
CHECKSUM_BYTES = 4
#: The marker of an inner chunk that is not stored (offset and length both).
EMPTY = 2**64 - 1


class InvalidShard(ValueError):
    """A shard (or its index) that is not what its array's metadata declares."""


@dataclass(frozen=True, slots=True, order=True)
class ByteRange:
    """``length`` bytes of an object from byte ``start``."""

    start: int
    length: int

    @property
    def end(self) -> int:
        """One past the last byte."""
        return self.start + self.length

    def within(self, outer: ByteRange) -> ByteRange:
        """This range relative to *outer*, which holds it."""
        if self.start < outer.start or self.end > outer.end:
            raise ValueError(f"{self} is not within {outer}")
        return ByteRange(self.start - outer.start, self.length)


@dataclass(frozen=True, slots=True)
class IndexLayout:
    """How a shard's index is laid out, from its array's sharding codec."""

    #: Inner chunks per shard along each dimension.
    chunks_per_shard: tuple[int, ...]
    at_start: bool
    checksum: bool

    @property
    def count(self) -> int:
        """Inner chunks per shard (entries of the index)."""
        return math.prod(self.chunks_per_shard)

    @property
    def nbytes(self) -> int:
        """The index's size, its checksum included."""
        return self.count * ENTRY_BYTES + (CHECKSUM_BYTES if self.checksum else 0)

    def index_range(self, object_size: int) -> ByteRange:
        """Where the index of a shard of *object_size* bytes lies."""
        if object_size < self.nbytes:
            raise InvalidShard(
                f"the shard is {object_size} bytes, shorter than its {self.nbytes}-byte index"
            )
        start = 0 if self.at_start else object_size - self.nbytes
        return ByteRange(start, self.nbytes)

    def data_range(self, object_size: int) -> ByteRange:
        """Where the inner chunks of a shard of *object_size* bytes may lie (off its index)."""
        index = self.index_range(object_size)
        start = index.end if self.at_start else 0
        return ByteRange(start, object_size - self.nbytes)

    def local_index(self, local: Sequence[int]) -> int:
        """The position in the index (C order) of the inner chunk at *local* in the shard."""
        if len(local) != len(self.chunks_per_shard) or any(
            not 0 <= i < n for i, n in zip(local, self.chunks_per_shard, strict=True)
        ):
            raise ValueError(f"{tuple(local)} is not in a shard of {self.chunks_per_shard}")
        position = 0
        for i, n in zip(local, self.chunks_per_shard, strict=True):
            position = position * n + i
        return position


def encode_index(layout: IndexLayout, entries: Sequence[ByteRange | None]) -> bytes:
    """The index of *entries* (``None``: not stored) as a writer lays it out."""
    if len(entries) != layout.count:
        raise ValueError(f"{len(entries)} entries for a shard of {layout.count} chunks")
    raw = b"".join(
        struct.pack("<QQ", EMPTY, EMPTY) if e is None else struct.pack("<QQ", e.start, e.length)
        for e in entries
    )
    if layout.checksum:
        raw += struct.pack("<I", google_crc32c.value(raw))
    return raw


class ShardIndex(Sequence[ByteRange | None]):
    """The validated entries of a shard's index, by position (``None``: not stored); held
    as two arrays, so that an index of many entries costs no object per entry."""

    def __init__(self, offsets: npt.NDArray[np.uint64], lengths: npt.NDArray[np.uint64]) -> None:
        self._offsets = offsets
        self._lengths = lengths
        self._empty = offsets == np.uint64(EMPTY)

    def __len__(self) -> int:
        return len(self._offsets)

    @overload
    def __getitem__(self, position: int) -> ByteRange | None: ...

    @overload
    def __getitem__(self, position: slice) -> Sequence[ByteRange | None]: ...

    def __getitem__(self, position: int | slice) -> ByteRange | Sequence[ByteRange | None] | None:
        if isinstance(position, slice):
            return [self[i] for i in range(len(self))[position]]
        if self._empty[position]:
            return None
        return ByteRange(int(self._offsets[position]), int(self._lengths[position]))


def parse_index(
    layout: IndexLayout, raw: bytes, object_size: int, max_chunk_bytes: int
) -> ShardIndex:
    """The byte range of each inner chunk (in C order; ``None``: not stored) of a shard of
    *object_size* bytes whose index is *raw*; :class:`InvalidShard` unless the index is
    exactly as long as *layout* says, its checksum matches, and every entry is the empty
    marker or a range of 1 to *max_chunk_bytes* bytes within the shard and off its index."""
    if len(raw) != layout.nbytes:
        raise InvalidShard(f"the shard index is {len(raw)} bytes, not {layout.nbytes}")
    data = layout.data_range(object_size)
    entries_bytes = layout.count * ENTRY_BYTES
    if layout.checksum:
        (declared,) = struct.unpack_from("<I", raw, entries_bytes)
        if declared != google_crc32c.value(raw[:entries_bytes]):
            raise InvalidShard("the shard index fails its crc32c checksum")
    pairs = np.frombuffer(raw, dtype="<u8", count=layout.count * 2).reshape(-1, 2)
    offsets, lengths = pairs[:, 0].astype(np.uint64), pairs[:, 1].astype(np.uint64)
    empty_offset, empty_length = offsets == np.uint64(EMPTY), lengths == np.uint64(EMPTY)
    start, end = np.uint64(data.start), np.uint64(data.end)
    longest = np.uint64(min(max_chunk_bytes, EMPTY - 1))
    bad = (empty_offset != empty_length) | (
        ~empty_offset
        & (
            (lengths == 0)
            | (lengths > longest)
            | (offsets < start)
            | (lengths > end)
            | (offsets > end - np.minimum(lengths, end))  # offset + length > end, unwrapped
        )
    )
    if bad.any():
        position = int(np.argmax(bad))
        _refuse(position, int(offsets[position]), int(lengths[position]), data, max_chunk_bytes)
    return ShardIndex(offsets, lengths)


def _refuse(position: int, offset: int, length: int, data: ByteRange, max_chunk: int) -> None:
    """:class:`InvalidShard` saying what is wrong with the index's entry at *position*."""
    where = f"the shard index's entry {position} ({offset}, {length})"
    if offset == EMPTY or length == EMPTY:
        raise InvalidShard(f"{where} is half an empty marker")
    if length == 0:
        raise InvalidShard(f"{where} is an inner chunk of no bytes")
    if length > max_chunk:
        raise InvalidShard(
            f"{where} is an inner chunk of {length} bytes; its declared size allows {max_chunk}"
        )
    raise InvalidShard(
        f"{where} points outside the shard's data (bytes {data.start} to {data.end})"
    )


# -- which inner chunks, which shards, which ranges -----------------------------------------
@dataclass(frozen=True, slots=True)
class ShardRead:
    """The inner chunks one reader needs of one shard."""

    #: The shard's coordinates in the array's shard grid.
    shard: tuple[int, ...]
    #: ``(position in the index, the inner chunk's coordinates in the array's inner grid)``,
    #: by position.
    chunks: tuple[tuple[int, tuple[int, ...]], ...]


def group_by_shard(inner_chunks: Iterable[Sequence[int]], layout: IndexLayout) -> list[ShardRead]:
    """The shards that hold *inner_chunks* (coordinates in the array's inner-chunk grid),
    each with the inner chunks needed of it; in shard order, each inner chunk once."""
    by_shard: dict[tuple[int, ...], dict[int, tuple[int, ...]]] = {}
    per = layout.chunks_per_shard
    for chunk in inner_chunks:
        coords = tuple(int(i) for i in chunk)
        if len(coords) != len(per) or any(i < 0 for i in coords):
            raise ValueError(f"{coords} is not an inner chunk of a grid of {len(per)} dimensions")
        shard = tuple(i // n for i, n in zip(coords, per, strict=True))
        local = tuple(i % n for i, n in zip(coords, per, strict=True))
        by_shard.setdefault(shard, {})[layout.local_index(local)] = coords
    return [
        ShardRead(shard, tuple(sorted(chunks.items())))
        for shard, chunks in sorted(by_shard.items())
    ]


def coalesce(ranges: Iterable[ByteRange], max_gap: int) -> list[ByteRange]:
    """The fewest ranges, in order, that cover *ranges*, where ranges apart by at most
    *max_gap* bytes (or overlapping) are read as one: each range lies within one of them,
    and no byte is read that lies more than *max_gap* from a range asked for."""
    if max_gap < 0:
        raise ValueError("max_gap must be >= 0")
    merged: list[ByteRange] = []
    for item in sorted(ranges):
        if merged and item.start <= merged[-1].end + max_gap:
            last = merged[-1]
            merged[-1] = ByteRange(last.start, max(last.end, item.end) - last.start)
        else:
            merged.append(item)
    return merged


def holder(reads: Sequence[ByteRange], wanted: ByteRange) -> ByteRange:
    """The range of *reads* (from :func:`coalesce`) that holds *wanted*."""
    low, high = 0, len(reads)
    while low < high:  # the last read starting at or before *wanted*
        middle = (low + high) // 2
        if reads[middle].start <= wanted.start:
            low = middle + 1
        else:
            high = middle
    if low == 0 or reads[low - 1].end < wanted.end:
        raise ValueError(f"{wanted} is not within the reads")
    return reads[low - 1]

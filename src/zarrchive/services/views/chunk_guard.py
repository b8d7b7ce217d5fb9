"""PURE: decoding an uploader's chunk objects within bounds, before zarr-python decodes them.

A thumbnail knows from the array's metadata how many bytes each stored object (chunk, or
shard) holds once decoded.  A compressed object can claim anything: 1.5 KB of bz2 is 2 GiB of
zeros.  So before zarr-python opens the chunks a thumbnail reads, each one goes through
:func:`check_object`, which refuses it (:class:`NoThumbnail`) when

- the object is larger than its decoded size could make it (:meth:`Layout.object_limit`);
- a decompressor of its codec chain would produce more than the decoded size allows:
  zlib, gzip, bz2 and lzma are decompressed incrementally with an output cap (``max_length``)
  and stopped one byte past it; blosc, lz4 and zstd say their decompressed size in their
  header, which is read and checked *before* decompressing (a zstd frame that does not say
  it is refused, since numcodecs would then decompress it without a bound);
- its codecs are not ones whose output is bounded (the known compressors and checksums,
  filters that change the item size by a known factor, transposes, sharding).

An object that passes is then decoded by zarr-python as usual, and can't allocate more than
its declared size (plus a small allowance for headers) at any step.  The bounded
decompression costs one more pass over a bounded amount of data.
"""

from __future__ import annotations

import bz2
import enum
import lzma
import math
import struct
import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import numcodecs
import numpy as np
import zarr
from numcodecs.abc import Codec as NumcodecsCodec
from numcodecs.checksum32 import Checksum32
from zarr.codecs import (
    BloscCodec,
    BytesCodec,
    Crc32cCodec,
    GzipCodec,
    ShardingCodec,
    TransposeCodec,
    ZstdCodec,
)
from zarr.codecs.numcodecs._codecs import _NumcodecsCodec

from zarrchive.services.dandi.metadata_limits import MAX_CODECS, short
from zarrchive.services.views.shard_index import IndexLayout, InvalidShard, parse_index
from zarrchive.services.views.thumbnail import NoThumbnail

#: The most inner chunks a shard may hold for a thumbnail to read it.
MAX_INNER_CHUNKS = 16_384
#: The most memory an lzma decoder may use (its dictionary is declared by the stream).
LZMA_MEMORY_LIMIT = 64 * 1024 * 1024
_ZSTD_MAGIC = 0xFD2FB528


def with_overhead(size: int) -> int:
    """The most bytes *size* bytes of data can take once compressed (any compressor numcodecs
    knows adds less than 1/64 plus a header to incompressible data), or its intermediate
    forms between two codecs."""
    return size + size // 64 + 4096


class Kind(enum.Enum):
    """How a bytes-to-bytes codec is kept within bounds."""

    #: Decompressed incrementally with an output cap.
    STREAM = "stream"
    #: Says its decompressed size in a header, read before decompressing.
    HEADER = "header"
    #: Its output is never larger than its input (checksums, byte shuffles).
    SHRINKS = "shrinks"


class _Decompressor(Protocol):
    @property
    def eof(self) -> bool: ...

    @property
    def unused_data(self) -> bytes: ...

    def decompress(self, data: bytes, max_length: int = ..., /) -> bytes: ...


@dataclass(frozen=True)
class Stage:
    """One bytes-to-bytes codec of a chain, with how its output is bounded."""

    name: str
    kind: Kind
    #: Decodes *data* into at most *cap* bytes (:class:`NoThumbnail` past it); for
    #: ``HEADER`` codecs, checks the header only when *decode* is false.
    run: Callable[[bytes, int, bool], bytes | None]


@dataclass(frozen=True)
class Shard:
    """How a shard is laid out: its inner chunks' index and their codec chain."""

    inner_count: int
    index_at_start: bool
    index_checksum: bool
    inner: Layout
    #: The shape of an inner chunk, and how many of them a shard holds along each dimension.
    inner_shape: tuple[int, ...] = ()
    chunks_per_shard: tuple[int, ...] = ()

    @property
    def index_bytes(self) -> int:
        return self.index_layout.nbytes

    @property
    def index_layout(self) -> IndexLayout:
        per = self.chunks_per_shard or (self.inner_count,)
        return IndexLayout(per, at_start=self.index_at_start, checksum=self.index_checksum)


@dataclass(frozen=True)
class Layout:
    """What one stored object (chunk or shard) of an array may be, and its codec chain."""

    #: The bytes-to-bytes codecs, in encoding order (decoding runs them backwards).
    stages: tuple[Stage, ...]
    #: The most bytes the chain may output (the decoded chunk, allowing for its filters).
    decoded_limit: int
    #: A shard: its index and inner chunks (``stages`` is then empty).
    shard: Shard | None = None

    def object_limit(self) -> int:
        """The largest object this layout can legitimately be."""
        if self.shard is not None:
            inner = self.shard.inner.object_limit()
            return self.shard.inner_count * inner + self.shard.index_bytes
        return with_overhead(self.decoded_limit)


def _too_large(what: str, cap: int) -> NoThumbnail:
    return NoThumbnail(f"{what} decompresses to more than {cap} bytes (its declared size)")


def _streamed(
    make: Callable[[], _Decompressor], data: bytes, cap: int, name: str, *, multi: bool
) -> bytes:
    """*data* decompressed stream by stream (*multi*: concatenated streams are one), stopped
    one byte past *cap*."""
    out = bytearray()
    while True:
        decompressor = make()
        try:
            piece = decompressor.decompress(data, cap + 1 - len(out))
        except (OSError, EOFError, ValueError, zlib.error, lzma.LZMAError) as exc:
            raise NoThumbnail(f"its {name} data is not valid ({exc})") from None
        out += piece
        if len(out) > cap:
            raise _too_large(f"its {name} data", cap)
        rest = decompressor.unused_data
        if not multi or not decompressor.eof or not rest:
            return bytes(out)
        data = rest


def _zlib(wbits: int, name: str, *, multi: bool) -> Callable[[bytes, int, bool], bytes | None]:
    def run(data: bytes, cap: int, decode: bool) -> bytes:
        return _streamed(lambda: zlib.decompressobj(wbits), data, cap, name, multi=multi)

    return run


def _bz2(data: bytes, cap: int, decode: bool) -> bytes:
    return _streamed(bz2.BZ2Decompressor, data, cap, "bz2", multi=True)


def _lzma(codec: numcodecs.LZMA) -> Callable[[bytes, int, bool], bytes | None]:
    if codec.format == lzma.FORMAT_RAW or codec.filters:
        raise NoThumbnail("lzma with raw filters is not a codec a thumbnail decodes")

    def make() -> _Decompressor:
        return lzma.LZMADecompressor(codec.format, memlimit=LZMA_MEMORY_LIMIT)

    def run(data: bytes, cap: int, decode: bool) -> bytes:
        return _streamed(make, data, cap, "lzma", multi=True)

    return run


def zstd_content_size(data: bytes) -> int | None:
    """The decompressed size a zstd frame declares in its header (``None``: it doesn't)."""
    if len(data) < 5 or struct.unpack_from("<I", data)[0] != _ZSTD_MAGIC:
        raise NoThumbnail("its zstd data is not a zstd frame")
    descriptor = data[4]
    size_flag, single_segment, dict_flag = descriptor >> 6, (descriptor >> 5) & 1, descriptor & 3
    position = 5 + (0 if single_segment else 1) + (0, 1, 2, 4)[dict_flag]
    width = (1 if single_segment else 0, 2, 4, 8)[size_flag]
    if width == 0:
        return None
    if len(data) < position + width:
        raise NoThumbnail("its zstd header is truncated")
    value = int.from_bytes(data[position : position + width], "little")
    return value + 256 if width == 2 else value


def _header_checked(
    size_of: Callable[[bytes], int | None], codec: NumcodecsCodec, name: str
) -> Callable[[bytes, int, bool], bytes | None]:
    def run(data: bytes, cap: int, decode: bool) -> bytes | None:
        size = size_of(data)
        if size is None:
            raise NoThumbnail(f"its {name} data does not declare its decompressed size")
        if size > cap:
            raise _too_large(f"its {name} data", cap)
        if not decode:
            return None
        try:
            return bytes(codec.decode(data))
        except Exception as exc:  # the codec's own refusal of bad data
            raise NoThumbnail(f"its {name} data could not be decoded ({exc})") from None

    return run


def blosc_sizes(data: bytes) -> tuple[int, int]:
    """``(nbytes, cbytes)`` of a blosc header: the decompressed and compressed sizes."""
    if len(data) < 16:
        raise NoThumbnail("its blosc data is shorter than a blosc header")
    nbytes, _block, cbytes = struct.unpack_from("<III", data, 4)
    return nbytes, cbytes


def _blosc_size(data: bytes) -> int:
    nbytes, cbytes = blosc_sizes(data)
    if cbytes > len(data):
        raise NoThumbnail("its blosc data is shorter than its header says")
    return nbytes


def _lz4_size(data: bytes) -> int:
    if len(data) < 4:
        raise NoThumbnail("its lz4 data is shorter than an lz4 header")
    size = int(struct.unpack_from("<i", data)[0])
    if size < 0:
        raise NoThumbnail("its lz4 header declares a negative size")
    return size


def _shrinking(codec: Any, name: str) -> Callable[[bytes, int, bool], bytes | None]:
    def run(data: bytes, cap: int, decode: bool) -> bytes:
        try:
            return bytes(codec.decode(data))
        except Exception as exc:  # a checksum mismatch, a truncated chunk
            raise NoThumbnail(f"it fails its {name} ({exc})") from None

    return run


def _crc32c_v3(data: bytes, cap: int, decode: bool) -> bytes:
    if len(data) < 4:
        raise NoThumbnail("it is shorter than its crc32c checksum")
    return data[:-4]


def _numcodecs_of(codec: Any) -> Any:
    """The numcodecs codec a zarr v3 ``numcodecs.*`` codec wraps, else *codec*."""
    if isinstance(codec, _NumcodecsCodec):
        return codec._codec
    return codec


def bytes_stage(codec: Any) -> Stage:
    """The bounded form of a bytes-to-bytes codec (v2 compressor, v3 bytes codec);
    :class:`NoThumbnail` for a codec whose output can't be bounded."""
    codec = _numcodecs_of(codec)
    if isinstance(codec, GzipCodec | numcodecs.GZip):
        return Stage("gzip", Kind.STREAM, _zlib(16 + zlib.MAX_WBITS, "gzip", multi=True))
    if isinstance(codec, numcodecs.Zlib):
        return Stage("zlib", Kind.STREAM, _zlib(zlib.MAX_WBITS, "zlib", multi=False))
    if isinstance(codec, numcodecs.BZ2):
        return Stage("bz2", Kind.STREAM, _bz2)
    if isinstance(codec, numcodecs.LZMA):
        return Stage("lzma", Kind.STREAM, _lzma(codec))
    if isinstance(codec, ZstdCodec):
        codec = numcodecs.Zstd(level=codec.level, checksum=codec.checksum)
    if isinstance(codec, numcodecs.Zstd):
        return Stage("zstd", Kind.HEADER, _header_checked(zstd_content_size, codec, "zstd"))
    if isinstance(codec, BloscCodec):
        codec = numcodecs.Blosc()  # decoding reads every setting from the chunk's header
    if isinstance(codec, numcodecs.Blosc):
        return Stage("blosc", Kind.HEADER, _header_checked(_blosc_size, codec, "blosc"))
    if isinstance(codec, numcodecs.LZ4):
        return Stage("lz4", Kind.HEADER, _header_checked(_lz4_size, codec, "lz4"))
    if isinstance(codec, Crc32cCodec):
        return Stage("crc32c", Kind.SHRINKS, _crc32c_v3)
    if isinstance(codec, Checksum32):
        return Stage(codec.codec_id, Kind.SHRINKS, _shrinking(codec, codec.codec_id))
    if isinstance(codec, numcodecs.Shuffle):
        return Stage("shuffle", Kind.SHRINKS, _shrinking(codec, "shuffle"))
    raise NoThumbnail(f"{_name(codec)} is not a codec a thumbnail decodes")


def _name(codec: Any) -> str:
    name = getattr(codec, "codec_id", None) or type(codec).__name__
    return str(name)[:80]


def filter_ratio(codec: Any) -> float:
    """How many times larger a filter's (array-to-array codec's) encoded form is than its
    decoded form, at most; :class:`NoThumbnail` for a filter whose sizes are unknown."""
    codec = _numcodecs_of(codec)
    if isinstance(codec, TransposeCodec | numcodecs.Shuffle | numcodecs.BitRound):
        return 1.0
    if isinstance(codec, numcodecs.PackBits):
        return 1.0  # bits: an eighth of the booleans, plus one byte
    if isinstance(codec, numcodecs.AsType):
        return float(np.dtype(codec.encode_dtype).itemsize / np.dtype(codec.decode_dtype).itemsize)
    if isinstance(codec, numcodecs.Delta | numcodecs.FixedScaleOffset | numcodecs.Quantize):
        return float(np.dtype(codec.astype).itemsize / np.dtype(codec.dtype).itemsize)
    raise NoThumbnail(f"the filter {_name(codec)} is not one a thumbnail decodes")


def _decoded_limit(decoded_bytes: int, filters: Sequence[Any]) -> int:
    ratio = math.prod(filter_ratio(f) for f in filters)
    return max(decoded_bytes, math.ceil(decoded_bytes * ratio))


def v2_layout(compressor: Any, filters: Sequence[Any], decoded_bytes: int) -> Layout:
    """The layout of a v2 array's chunks of *decoded_bytes* bytes."""
    if len(filters) + 1 > MAX_CODECS:
        raise NoThumbnail(
            f"the array has {len(filters)} filters; a thumbnail decodes at most {MAX_CODECS - 1}"
        )
    stages = () if compressor is None else (bytes_stage(compressor),)
    return Layout(stages, _decoded_limit(decoded_bytes, filters))


def v3_layout(codecs: Sequence[Any], chunk_shape: Sequence[int], itemsize: int) -> Layout:
    """The layout of a v3 array's stored objects of *chunk_shape* (shards when the chain is
    sharding)."""
    if _count(codecs) > MAX_CODECS:
        raise NoThumbnail(f"the array has more than {MAX_CODECS} codecs")
    to_bytes = [c for c in codecs if isinstance(c, BytesCodec | ShardingCodec)]
    if len(to_bytes) != 1:
        kinds = ", ".join(_name(c) for c in codecs)
        raise NoThumbnail(f"the codecs {kinds} are not ones a thumbnail decodes")
    split = list(codecs).index(to_bytes[0])
    filters, after = codecs[:split], codecs[split + 1 :]
    decoded = math.prod(chunk_shape) * itemsize
    if isinstance(to_bytes[0], BytesCodec):
        return Layout(tuple(bytes_stage(c) for c in after), _decoded_limit(decoded, filters))
    sharding = to_bytes[0]
    if filters or after:
        raise NoThumbnail("codecs around sharding are not ones a thumbnail decodes")
    inner_shape = tuple(int(n) for n in sharding.chunk_shape)
    if (
        len(inner_shape) != len(chunk_shape)
        or any(n < 1 for n in inner_shape)
        or any(s % i for s, i in zip(chunk_shape, inner_shape, strict=True))
    ):
        raise NoThumbnail(
            f"the shards' inner chunk shape {short(inner_shape, 80)} does not divide the shard "
            f"shape {short(tuple(chunk_shape), 80)}"
        )
    per = tuple(s // i for s, i in zip(chunk_shape, inner_shape, strict=True))
    count = math.prod(per)
    if count > MAX_INNER_CHUNKS:
        raise NoThumbnail(
            f"a shard holds {count} chunks; a thumbnail reads at most {MAX_INNER_CHUNKS}"
        )
    inner = v3_layout(sharding.codecs, inner_shape, itemsize)
    if inner.shard is not None:
        raise NoThumbnail("shards within shards are not ones a thumbnail decodes")
    index = list(sharding.index_codecs)
    checksum = len(index) == 2 and isinstance(index[1], Crc32cCodec)
    plain = isinstance(index[0], BytesCodec) and getattr(index[0].endian, "value", "little") in (
        "little",
        None,
    )
    if not plain or len(index) > 2 or (len(index) == 2 and not checksum):
        raise NoThumbnail("the shard index codecs are not ones a thumbnail decodes")
    at_start = getattr(sharding.index_location, "value", "end") == "start"
    shard = Shard(count, at_start, checksum, inner, inner_shape, per)
    return Layout((), inner.decoded_limit * count, shard)


def layout_of(array: zarr.Array[Any]) -> Layout:
    """The layout of *array*'s stored objects (shards when sharded, else chunks)."""
    metadata = array.metadata
    grid = tuple(int(n) for n in metadata.chunk_grid.chunk_shape)  # type: ignore[attr-defined]
    itemsize = int(array.dtype.itemsize)
    if metadata.zarr_format == 2:
        decoded = math.prod(grid) * itemsize
        return v2_layout(metadata.compressor, metadata.filters or (), decoded)
    return v3_layout(metadata.codecs, grid, itemsize)


def _count(codecs: Sequence[Any]) -> int:
    total = 0
    for codec in codecs:
        total += 1
        if isinstance(codec, ShardingCodec):
            total += len(codec.codecs) + len(codec.index_codecs)
    return total


def check_object(layout: Layout, data: bytes, where: str) -> None:
    """:class:`NoThumbnail` unless *data*, a stored object of *layout*, decodes within the
    layout's bounds (see the module's doc)."""
    limit = layout.object_limit()
    if len(data) > limit:
        raise NoThumbnail(f"{where} is {len(data)} bytes; its declared size allows {limit}")
    if layout.shard is None:
        _check_chain(layout, data, where)
        return
    shard = layout.shard
    try:
        index = shard.index_layout.index_range(len(data))
        entries = parse_index(
            shard.index_layout, data[index.start : index.end], len(data), shard.inner.object_limit()
        )
    except InvalidShard as exc:
        raise NoThumbnail(f"{where}: {exc}") from None
    for entry in entries:
        if entry is not None:
            check_inner_chunk(layout, data[entry.start : entry.end], f"an inner chunk of {where}")


def check_inner_chunk(layout: Layout, data: bytes, where: str) -> None:
    """:class:`NoThumbnail` unless *data*, an inner chunk of a shard of *layout*, decodes
    within its inner chain's bounds (the caller has bounded its length by the index)."""
    if layout.shard is None:
        raise ValueError("not the layout of a sharded array")
    inner = layout.shard.inner
    limit = inner.object_limit()
    if len(data) > limit:
        raise NoThumbnail(f"{where} is {len(data)} bytes; its declared size allows {limit}")
    _check_chain(inner, data, where)


def _check_chain(layout: Layout, data: bytes, where: str) -> None:
    cap = layout.decoded_limit
    current: bytes | None = data
    stages = layout.stages[::-1]
    for position, stage in enumerate(stages):
        assert current is not None
        last = position == len(stages) - 1
        limit = cap if last else with_overhead(cap)
        try:
            current = stage.run(current, limit, not last)
        except NoThumbnail as exc:
            raise NoThumbnail(f"{where}: {exc}") from None
    if current is not None and len(current) > cap:
        raise NoThumbnail(f"{where} holds more than {cap} bytes (its declared size)")

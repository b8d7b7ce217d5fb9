"""Zarr array and group metadata of a directory of an archived Zarr, and thumbnails.

The metadata (``.zarray``/``.zattrs`` or ``zarr.json``) and the few chunks a thumbnail needs
are read from the archive's S3 objects into an in-memory store that zarr-python opens: zarr
decodes every codec it knows (v2 compressors and filters, v3 codec chains, sharding), and a
chunk that is not stored reads as the fill value.  The slice maths are in
:mod:`zarrchive.services.views.thumbnail`.

A sharded array's shards are not read whole: a thumbnail reads each touched shard's index
by a range request, validates it (:mod:`~zarrchive.services.views.shard_index`), then reads only
the inner chunks the slice needs, by range (close ones joined into one request), and
zarr-python decodes them as the chunks of the same array without sharding.

Everything here is uploader-controlled, so each read is bounded before it is done: metadata
documents by size (and by :mod:`~zarrchive.services.dandi.metadata_limits` before zarr-python
parses them), chunk objects by the size their declared shape allows (known from the
directory's ``.checksum`` node before any download, and enforced while reading), their
decompressed size by :mod:`~zarrchive.services.views.chunk_guard` before zarr-python decodes them.
A thumbnail that can't be drawn is remembered like one that can (by the directory's digest),
so a page view repeats no work, and at most :data:`MAX_CONCURRENT_THUMBNAILS` are drawn at
once.
"""

from __future__ import annotations

import io
import math
import threading
from collections import OrderedDict
from dataclasses import dataclass, field, replace
from typing import Any, cast

import numpy as np
import zarr
from PIL import Image
from zarr.codecs import ShardingCodec
from zarr.core.buffer import default_buffer_prototype
from zarr.core.chunk_grids import RegularChunkGrid
from zarr.core.metadata import ArrayV3Metadata
from zarr.storage import MemoryStore

from zarrchive.errors import ArchiveBusy, InvalidPath, StorageError
from zarrchive.paths import validate_directory_path
from zarrchive.services.dandi import metadata_limits
from zarrchive.services.dandi.metadata_limits import V2_ARRAY, V2_ATTRS, V2_GROUP, V3_META, short
from zarrchive.services.runtime import Archive
from zarrchive.services.views import chunk_guard, codec_names, ngff, open_with
from zarrchive.services.views.shard_index import (
    ByteRange,
    InvalidShard,
    ShardRead,
    coalesce,
    group_by_shard,
    holder,
    parse_index,
)
from zarrchive.services.views.thumbnail import (
    MAX_CHUNKS,
    MAX_INNER_CHUNKS,
    NoThumbnail,
    SlicePlan,
    plan_slice,
    stretch,
)
from zarrchive.services.zarr_engine.node_cache import NODE_CACHE, NodeView
from zarrchive.services.zarr_engine.zarrs import ZarrRef
from zarrchive.storage.keys import checksum_node_key, zarr_object_key, zarr_prefix
from zarrchive.storage.protocol import ObjectStoreProtocol

#: The largest metadata document read for a page or a thumbnail, bytes.
MAX_METADATA_BYTES = 1024 * 1024
#: The largest metadata document read of a child directory a group page probes, bytes.
MAX_PROBED_METADATA_BYTES = 64 * 1024
#: Child directories whose metadata a group page reads to tell arrays from groups.
MAX_CHILDREN_PROBED = 32
#: Thumbnails drawn at once by one process (each may decode up to
#: :data:`~zarrchive.services.views.thumbnail.MAX_DECODED_BYTES`).
MAX_CONCURRENT_THUMBNAILS = 2
#: How long a thumbnail request waits for a free slot before it gets a 503.
THUMBNAIL_WAIT_SECONDS = 5.0
#: Bytes asked of S3 at a time by a bounded read.
_READ_PIECE = 1024 * 1024
#: Inner chunks of a shard this close (bytes) are read by one range request (zarr-python
#: writes a shard's inner chunks in no set order: those a slice needs are rarely adjacent).
RANGE_GAP = 16 * 1024
#: Most range requests of inner chunks one thumbnail makes (after joining close ones).
MAX_RANGE_READS = 256


@dataclass(frozen=True)
class ArrayMeta:
    zarr_format: int
    shape: tuple[int, ...]
    dtype: str
    chunks: tuple[int, ...]
    shards: tuple[int, ...] | None
    codecs: list[str]
    fill_value: str
    dimension_names: list[str] | None
    attributes: dict[str, Any]
    #: The document the attributes are stored in (``.zattrs`` or ``zarr.json``).
    attributes_document: str
    #: Why there is no thumbnail (``None``: there is one).
    no_thumbnail: str | None
    #: Neuroglancer reads it (its data type and codecs: :func:`open_with.neuroglancer_reads`).
    neuroglancer: bool = False
    #: A sharded array: how its shards are laid out (``None``: not sharded).
    sharding: ShardingMeta | None = None


@dataclass(frozen=True)
class ShardingMeta:
    """What the page tells of a sharded array's shards (``chunks`` is the inner chunks')."""

    #: Inner chunks per shard along each dimension.
    chunks_per_shard: tuple[int, ...]
    #: The codecs of each inner chunk, and of the shard index (named for a person).
    inner_codecs: list[str]
    index_codecs: list[str]
    #: ``start`` or ``end``.
    index_location: str
    #: Its inner chunks are shards in turn (the page shows the outer level only).
    nested: bool


@dataclass(frozen=True)
class LevelArray:
    """One level of an OME-Zarr multiscale image, as its array metadata tells it."""

    #: As the multiscales declare it (its path is relative to the group).
    spec: ngff.Level
    #: From the Zarr's root.
    directory: str
    #: ``None``: no array there (or its metadata beyond the bounds).
    meta: ArrayMeta | None
    #: The level directory's digest (``None``: no such directory).
    digest: str | None

    @property
    def path(self) -> str:
        return self.spec.path

    @property
    def elements(self) -> int | None:
        return math.prod(self.meta.shape) if self.meta is not None else None


@dataclass(frozen=True)
class GroupMeta:
    zarr_format: int
    attributes: dict[str, Any]
    attributes_document: str
    #: ``(name, shape, dtype)`` of the child arrays found.
    arrays: list[tuple[str, tuple[int, ...], str]] = field(default_factory=list)
    #: The names of the child groups found.
    groups: list[str] = field(default_factory=list)
    #: Some child directories were not looked at (there were too many).
    partial: bool = False
    #: Its OME-NGFF multiscale image, or why its ``multiscales`` are not valid (``None``:
    #: it declares none).
    multiscale: ngff.Multiscale | ngff.InvalidMultiscales | None = None
    #: The multiscale image's levels, in its order.
    levels: list[LevelArray] = field(default_factory=list)

    @property
    def ome(self) -> bool:
        return isinstance(self.multiscale, ngff.Multiscale)

    @property
    def smallest_level(self) -> LevelArray | None:
        """The level with the fewest elements among those that are arrays of at least 2
        dimensions (the last listed of equals): the one the group's thumbnail shows."""
        found = [lv for lv in self.levels if lv.meta is not None and len(lv.meta.shape) >= 2]
        if not found:
            return None
        fewest = min(lv.elements or 0 for lv in found)
        return [lv for lv in found if lv.elements == fewest][-1]


@dataclass(frozen=True)
class RefusedMeta:
    """Zarr metadata beyond the bounds: a document larger than :data:`MAX_METADATA_BYTES`,
    or an array beyond those of :mod:`~zarrchive.services.dandi.metadata_limits`."""

    reason: str


def _prefix(directory: str) -> str:
    return f"{directory}/" if directory else ""


def _get_bounded(store: ObjectStoreProtocol, key: str, limit: int) -> bytes | None:
    """The content of *key*, or ``None`` when it is absent or longer than *limit* bytes
    (reading stops one piece past the limit: the object may have grown since its size was
    learnt)."""
    body = bytearray()
    try:
        for piece in store.iter_content(key, chunk_size=min(limit + 1, _READ_PIECE)):
            body += piece
            if len(body) > limit:
                return None
    except StorageError:
        if store.head(key) is None:  # gone since its size was learnt
            return None
        raise
    return bytes(body)


def _probe_document(store: ObjectStoreProtocol, key: str) -> bytes | None:
    info = store.head(key)
    if info is None or info.size > MAX_PROBED_METADATA_BYTES:
        return None
    return _get_bounded(store, key, MAX_PROBED_METADATA_BYTES)


def _metadata_documents(
    store: ObjectStoreProtocol, zarr_id: str, directory: str, node: NodeView
) -> dict[str, bytes]:
    """The metadata documents among the files of *directory* (whose node is *node*: it
    knows their sizes, so no HEAD is needed to bound what is read), by name."""
    found: dict[str, bytes] = {}
    for name in (V3_META, V2_ARRAY, V2_GROUP, V2_ATTRS):
        child = node.files.get(name)
        if child is None or child.size > MAX_METADATA_BYTES:
            continue
        key = zarr_object_key(zarr_id, _prefix(directory) + name)
        body = _get_bounded(store, key, MAX_METADATA_BYTES)
        if body is not None:
            found[name] = body
    return found


def _oversized(node: NodeView) -> str | None:
    """Why the metadata of the directory whose node is *node* is not read: a document of it
    is larger than :data:`MAX_METADATA_BYTES` (``None``: none is)."""
    for name in (V3_META, V2_ARRAY, V2_GROUP, V2_ATTRS):
        child = node.files.get(name)
        if child is not None and child.size > MAX_METADATA_BYTES:
            return f"{name} is {child.size} bytes; at most {MAX_METADATA_BYTES} are read"
    return None


def _memory_store(objects: dict[str, bytes]) -> MemoryStore:
    """A zarr-python store holding *objects* (by key)."""
    prototype = default_buffer_prototype()
    return MemoryStore({k: prototype.buffer.from_bytes(v) for k, v in objects.items()})


def _open(documents: dict[str, bytes]) -> zarr.Array[Any] | zarr.Group | None:
    """The array or group these documents describe (a store holding only them)."""
    try:
        node = zarr.open(store=_memory_store(documents), mode="r")
    except Exception:  # not Zarr metadata zarr-python understands
        return None
    return node


def _codec_name(codec: Any) -> str:
    """A codec as the pages show it (``zstd (level 0)``), from its JSON configuration."""
    try:
        config = codec.get_config() if hasattr(codec, "get_config") else codec.to_dict()
        return short(codec_names.describe(config))
    except Exception:  # a codec without a JSON form: what it says of itself
        return short(repr(codec))


def _codecs(array: zarr.Array[Any]) -> list[str]:
    metadata = array.metadata
    names: list[str] = []
    if metadata.zarr_format == 2:
        for item in (*(metadata.filters or ()), metadata.compressor):
            if item is not None:
                names.append(_codec_name(item))
        return names
    return [_codec_name(codec) for codec in metadata.codecs]


def _object_grid(array: zarr.Array[Any]) -> tuple[int, ...]:
    """The shape of the stored objects: shards when sharded, else chunks."""
    grid = array.metadata.chunk_grid
    return tuple(int(n) for n in grid.chunk_shape)  # type: ignore[attr-defined]


def _plan(array: zarr.Array[Any], layout: chunk_guard.Layout) -> SlicePlan:
    """The thumbnail's slice; for a sharded array, its chunks are the inner chunks it needs
    (in the array's grid of inner chunks), in at most :data:`MAX_CHUNKS` shards."""
    if array.dtype.kind not in "biufc":
        raise NoThumbnail(f"values of type {short(array.dtype)} have no grey level")
    shape, itemsize = tuple(array.shape), array.dtype.itemsize
    if layout.shard is None:
        return plan_slice(shape, _object_grid(array), itemsize)
    plan = plan_slice(shape, layout.shard.inner_shape, itemsize, max_chunks=MAX_INNER_CHUNKS)
    shards = len(group_by_shard(plan.chunks, layout.shard.index_layout))
    if shards > MAX_CHUNKS:
        raise NoThumbnail(
            f"the slice touches {shards} shards; a thumbnail reads at most {MAX_CHUNKS}"
        )
    return plan


def _attributes_document(zarr_format: int) -> str:
    return V3_META if zarr_format == 3 else V2_ATTRS


def _v3_codec_names(codecs: Any) -> list[str | None]:
    """The names of a v3 codec chain's codecs (as ``to_dict`` writes them), those inside
    shards included."""
    names: list[str | None] = []
    for codec in codecs if isinstance(codecs, list | tuple) else ():
        if not isinstance(codec, dict):
            names.append(None)
            continue
        name = codec.get("name")
        names.append(name if isinstance(name, str) else None)
        configuration = codec.get("configuration")
        if isinstance(configuration, dict):
            names += _v3_codec_names(configuration.get("codecs"))
            names += _v3_codec_names(configuration.get("index_codecs"))
    return names


def _neuroglancer_reads(array: zarr.Array[Any]) -> bool:
    metadata = array.metadata
    dtype = array.dtype
    name = dtype.name if isinstance(dtype, np.dtype) else str(dtype)
    if metadata.zarr_format == 2:
        compressor = metadata.compressor
        compressor_id = None if compressor is None else getattr(compressor, "codec_id", "?")
        filters = [getattr(f, "codec_id", None) for f in metadata.filters or ()]
        return open_with.neuroglancer_reads(2, name, compressor_id, filters)
    codecs = _v3_codec_names([codec.to_dict() for codec in metadata.codecs])
    return open_with.neuroglancer_reads(3, name, None, codecs)


def _sharding(array: zarr.Array[Any]) -> ShardingMeta | None:
    """How *array*'s shards are laid out (``None``: it is not sharded)."""
    if array.metadata.zarr_format != 3:
        return None
    found = [c for c in array.metadata.codecs if isinstance(c, ShardingCodec)]
    if not found:
        return None
    sharding = found[0]
    inner = tuple(int(n) for n in sharding.chunk_shape)
    outer = _object_grid(array)
    return ShardingMeta(
        chunks_per_shard=tuple(-(-s // max(i, 1)) for s, i in zip(outer, inner, strict=False)),
        inner_codecs=[_codec_name(c) for c in sharding.codecs],
        index_codecs=[_codec_name(c) for c in sharding.index_codecs],
        index_location=short(getattr(sharding.index_location, "value", "end")),
        nested=any(isinstance(c, ShardingCodec) for c in sharding.codecs),
    )


def _array_meta(array: zarr.Array[Any]) -> ArrayMeta:
    try:
        _plan(array, chunk_guard.layout_of(array))
        reason = None
    except NoThumbnail as exc:
        reason = str(exc)
    names = getattr(array.metadata, "dimension_names", None)
    return ArrayMeta(
        zarr_format=array.metadata.zarr_format,
        shape=tuple(int(n) for n in array.shape),
        dtype=short(array.dtype),
        chunks=tuple(int(n) for n in array.chunks),
        shards=tuple(int(n) for n in array.shards) if array.shards else None,
        codecs=_codecs(array),
        fill_value=short(array.fill_value),
        dimension_names=[short(n) for n in names] if names else None,
        attributes=dict(array.attrs),
        attributes_document=_attributes_document(array.metadata.zarr_format),
        no_thumbnail=reason,
        neuroglancer=_neuroglancer_reads(array),
        sharding=_sharding(array),
    )


def _probe(
    store: ObjectStoreProtocol, zarr_id: str, path: str
) -> tuple[str, tuple[int, ...], str] | str | None:
    """``(name, shape, dtype)`` if the directory *path* holds an array, its name if it holds
    a group (within bounds), else ``None``."""
    name = path.rsplit("/", 1)[-1]
    for document in (V3_META, V2_ARRAY, V2_GROUP):
        body = _probe_document(store, zarr_object_key(zarr_id, f"{path}/{document}"))
        if body is None:
            continue
        if metadata_limits.refusal({document: body}) is not None:
            return None
        node = _open({document: body})
        if isinstance(node, zarr.Array):
            return name, tuple(int(n) for n in node.shape), short(node.dtype)
        return name if isinstance(node, zarr.Group) else None
    return None


def describe(
    archive: Archive, zarr_row: ZarrRef, directory: str
) -> ArrayMeta | GroupMeta | RefusedMeta | None:
    """The array or group metadata held by *directory* (``""``: the root), if any."""
    store = archive.store_for(zarr_row.embargoed)
    node = NODE_CACHE.get(store, checksum_node_key(zarr_row.id, directory))
    if node is None:
        return None
    oversized = _oversized(node)
    if oversized is not None:
        return RefusedMeta(oversized)
    documents = _metadata_documents(store, zarr_row.id, directory, node)
    if not documents:
        return None
    refused = metadata_limits.refusal(documents)
    if refused is not None:
        return RefusedMeta(refused)
    opened = _open(documents)
    if isinstance(opened, zarr.Array):
        meta = _array_meta(opened)
        failed = THUMBNAILS.get((store.bucket, zarr_row.id, directory, node.digest))
        if meta.no_thumbnail is None and isinstance(failed, str):
            meta = replace(meta, no_thumbnail=failed)
        return meta
    if opened is None:
        return None
    children = node.directory_names[:MAX_CHILDREN_PROBED]
    prefix = _prefix(directory)
    found = store.map(lambda name: _probe(store, zarr_row.id, prefix + name), children)
    attributes = dict(opened.attrs)
    multiscale = ngff.read_multiscales(opened.metadata.zarr_format, attributes)
    levels: list[LevelArray] = []
    if isinstance(multiscale, ngff.Multiscale):
        levels = store.map(
            lambda level: _level_array(store, zarr_row, prefix + level.path, level),
            list(multiscale.levels),
        )
    return GroupMeta(
        zarr_format=opened.metadata.zarr_format,
        attributes=attributes,
        attributes_document=_attributes_document(opened.metadata.zarr_format),
        arrays=[f for f in found if isinstance(f, tuple)],
        groups=[f for f in found if isinstance(f, str)],
        partial=len(node.directory_names) > MAX_CHILDREN_PROBED,
        multiscale=multiscale,
        levels=levels,
    )


def _level_array(
    store: ObjectStoreProtocol, zarr_row: ZarrRef, directory: str, spec: ngff.Level
) -> LevelArray:
    """The array metadata of a multiscale image's level (each document read only up to
    :data:`MAX_PROBED_METADATA_BYTES`: an image has up to
    :data:`~zarrchive.services.views.ngff.MAX_LEVELS` levels)."""
    try:
        validate_directory_path(directory)  # no longer than a Zarr path (an S3 key's bound)
    except InvalidPath:
        return LevelArray(spec, directory, None, None)
    node = NODE_CACHE.get(store, checksum_node_key(zarr_row.id, directory))
    if node is None:
        return LevelArray(spec, directory, None, None)
    for name in (V3_META, V2_ARRAY):
        child = node.files.get(name)
        if child is None:
            continue
        if child.size > MAX_PROBED_METADATA_BYTES:
            break
        body = _get_bounded(
            store, zarr_object_key(zarr_row.id, f"{directory}/{name}"), MAX_PROBED_METADATA_BYTES
        )
        if body is None or metadata_limits.refusal({name: body}) is not None:
            break
        opened = _open({name: body})
        if not isinstance(opened, zarr.Array):
            break
        meta = _array_meta(opened)
        failed = THUMBNAILS.get((store.bucket, zarr_row.id, directory, node.digest))
        if meta.no_thumbnail is None and isinstance(failed, str):
            meta = replace(meta, no_thumbnail=failed)
        return LevelArray(spec, directory, meta, node.digest)
    return LevelArray(spec, directory, None, node.digest)


def viewers(
    archive: Archive,
    zarr_row: ZarrRef,
    directory: str,
    meta: ArrayMeta | GroupMeta | None,
    name: str,
) -> list[open_with.Viewer]:
    """The "Open with" links of a directory of a public Zarr: Neuroglancer and vizarr for an
    OME-Zarr multiscale group, Neuroglancer for an array it reads of at least 2 dimensions;
    none for an embargoed Zarr (the viewers fetch the public bucket's objects anonymously)."""
    if zarr_row.embargoed or meta is None:
        return []
    key = zarr_object_key(zarr_row.id, directory) if directory else zarr_prefix(zarr_row.id)
    url = archive.store.public_url(key)
    return open_with.zarr_viewers(
        url,
        meta.zarr_format,
        name,
        ome=isinstance(meta, GroupMeta) and meta.ome,
        plain_array=isinstance(meta, ArrayMeta) and meta.neuroglancer and len(meta.shape) >= 2,
    )


# -- thumbnails -------------------------------------------------------------------------
#: A drawn thumbnail (PNG bytes) or why there is none.
Drawn = bytes | str


class _ThumbnailCache:
    """PNGs, or why there is none, by (bucket, Zarr, directory, the directory's digest): a
    changed chunk changes the digest, so a stale answer is never served."""

    def __init__(self, entries: int = 128) -> None:
        self.entries = entries
        self._items: OrderedDict[tuple[str, str, str, str], Drawn] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: tuple[str, str, str, str]) -> Drawn | None:
        with self._lock:
            found = self._items.get(key)
            if found is not None:
                self._items.move_to_end(key)
            return found

    def put(self, key: tuple[str, str, str, str], drawn: Drawn) -> None:
        with self._lock:
            self._items[key] = drawn
            while len(self._items) > self.entries:
                self._items.popitem(last=False)


THUMBNAILS = _ThumbnailCache()
THUMBNAIL_SLOTS = threading.BoundedSemaphore(MAX_CONCURRENT_THUMBNAILS)


def _served(drawn: Drawn) -> bytes:
    if isinstance(drawn, str):
        raise NoThumbnail(drawn)
    return drawn


def thumbnail_png(archive: Archive, zarr_row: ZarrRef, directory: str) -> bytes:
    """A PNG of the array in *directory* (see :func:`zarrchive.services.views.thumbnail.plan_slice`);
    :class:`NoThumbnail` when there is none to draw (remembered, like the PNG);
    :class:`ArchiveBusy` when :data:`MAX_CONCURRENT_THUMBNAILS` are being drawn and none
    ends within :data:`THUMBNAIL_WAIT_SECONDS`."""
    store = archive.store_for(zarr_row.embargoed)
    node = NODE_CACHE.get(store, checksum_node_key(zarr_row.id, directory))
    if node is None:
        raise NoThumbnail("no such directory")
    cache_key = (store.bucket, zarr_row.id, directory, node.digest)
    cached = THUMBNAILS.get(cache_key)
    if cached is not None:
        return _served(cached)
    if not THUMBNAIL_SLOTS.acquire(timeout=THUMBNAIL_WAIT_SECONDS):
        raise ArchiveBusy("the archive is drawing as many thumbnails as it may: retry shortly")
    try:
        cached = THUMBNAILS.get(cache_key)  # drawn by the request this one waited for
        if cached is not None:
            return _served(cached)
        try:
            drawn: Drawn = _draw(store, zarr_row.id, directory, node).png
        except NoThumbnail as exc:
            drawn = str(exc)
        THUMBNAILS.put(cache_key, drawn)
        return _served(drawn)
    finally:
        THUMBNAIL_SLOTS.release()


@dataclass
class ChunkReads:
    """What one thumbnail read of the array's chunk objects (its metadata aside)."""

    #: Whole objects (chunks) read, and their bytes.
    objects: int = 0
    object_bytes: int = 0
    #: Range requests (of shard indexes and inner chunks) made, and their bytes.
    ranges: int = 0
    range_bytes: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    def add_object(self, size: int) -> None:
        with self._lock:
            self.objects += 1
            self.object_bytes += size

    def add_range(self, size: int) -> None:
        with self._lock:
            self.ranges += 1
            self.range_bytes += size


@dataclass(frozen=True)
class Drawing:
    png: bytes
    reads: ChunkReads


def draw(store: ObjectStoreProtocol, zarr_id: str, directory: str) -> Drawing:
    """The thumbnail of the array in *directory*, drawn afresh (no cache, no slot), and what
    was read for it; :class:`NoThumbnail` when there is none."""
    node = NODE_CACHE.get(store, checksum_node_key(zarr_id, directory))
    if node is None:
        raise NoThumbnail("no such directory")
    return _draw(store, zarr_id, directory, node)


def _draw(store: ObjectStoreProtocol, zarr_id: str, directory: str, node: NodeView) -> Drawing:
    documents = _metadata_documents(store, zarr_id, directory, node)
    refused = _oversized(node) or metadata_limits.refusal(documents)
    if refused is not None:
        raise NoThumbnail(refused)
    array = _open(documents) if documents else None
    if not isinstance(array, zarr.Array):
        raise NoThumbnail("the directory holds no Zarr array")
    layout = chunk_guard.layout_of(array)
    plan = _plan(array, layout)
    reads = ChunkReads()
    source = _Source(store, zarr_id, directory, node, reads)
    if layout.shard is None:
        keys = [array.metadata.encode_chunk_key(c) for c in plan.chunks]
        bodies = store.map(lambda k: _read_chunk(source, k, layout), keys)
        objects = {**documents, **{k: b for k, b in zip(keys, bodies, strict=True) if b}}
    else:
        objects = _read_inner_chunks(source, array, plan, layout)
    try:
        full = zarr.open_array(store=_memory_store(objects), mode="r")
        values = np.asarray(full[plan.selection()])
    except Exception as exc:  # a chunk that its codecs can't decode: the data's trouble
        raise NoThumbnail(f"the chunks could not be decoded ({type(exc).__name__})") from exc
    grey = stretch(values)
    buffer = io.BytesIO()
    Image.fromarray(grey).save(buffer, format="PNG")
    return Drawing(buffer.getvalue(), reads)


@dataclass(frozen=True)
class _Source:
    """Where a thumbnail reads the stored objects of the array in *directory*."""

    store: ObjectStoreProtocol
    zarr_id: str
    directory: str
    node: NodeView
    reads: ChunkReads

    def size(self, key: str) -> int | None:
        """The size of the stored object *key* (from its directory's node: no request to
        S3 when it is the array's own), ``None`` when not stored."""
        path = _prefix(self.directory) + key
        parent, _, name = path.rpartition("/")
        holder_node = (
            self.node
            if parent == self.directory
            else NODE_CACHE.get(self.store, checksum_node_key(self.zarr_id, parent))
        )
        child = holder_node.files.get(name) if holder_node is not None else None
        return None if child is None else child.size

    def object_key(self, key: str) -> str:
        return zarr_object_key(self.zarr_id, _prefix(self.directory) + key)

    def get_range(self, key: str, wanted: ByteRange, where: str) -> bytes:
        """Exactly the bytes *wanted* of *key* (:class:`NoThumbnail`: the object changed)."""
        body = self.store.get_range(self.object_key(key), wanted.start, wanted.length)
        if body is None or len(body) != wanted.length:
            raise NoThumbnail(f"{where} changed while it was read")
        self.reads.add_range(len(body))
        return body


def _read_chunk(source: _Source, key: str, layout: chunk_guard.Layout) -> bytes | None:
    """The stored object *key* of the array (``None``: not stored, it reads as the fill
    value), refused before download when its size (known from its directory's node) is more
    than *layout* allows, and before decoding when it decompresses to more."""
    size = source.size(key)
    if size is None:
        return None
    limit = layout.object_limit()
    where = f"chunk {short(key, 80)}"
    if size > limit:
        raise NoThumbnail(f"{where} is {size} bytes; its declared size allows {limit}")
    body = _get_bounded(source.store, source.object_key(key), limit)
    if body is None:
        raise NoThumbnail(f"{where} changed while it was read")
    source.reads.add_object(len(body))
    chunk_guard.check_object(layout, body, where)
    return body


def _inner_array_metadata(array: zarr.Array[Any], layout: chunk_guard.Layout) -> ArrayV3Metadata:
    """The ``zarr.json`` of the array as if its inner chunks were its chunks (same shape,
    data type, fill value; the inner chunks' codecs): zarr-python decodes an inner chunk
    stored under its key there exactly as the sharding codec does."""
    assert layout.shard is not None
    metadata = cast(ArrayV3Metadata, array.metadata)
    (sharding,) = [c for c in metadata.codecs if isinstance(c, ShardingCodec)]
    inner = replace(
        metadata,
        chunk_grid=RegularChunkGrid(chunk_shape=layout.shard.inner_shape),
        codecs=tuple(sharding.codecs),
    )
    return inner


def _read_inner_chunks(
    source: _Source, array: zarr.Array[Any], plan: SlicePlan, layout: chunk_guard.Layout
) -> dict[str, bytes]:
    """The objects of a store in which the thumbnail's slice reads as in the array: the
    metadata of its inner chunks as chunks (:func:`_inner_array_metadata`), and the inner
    chunks the slice needs, each read by a range of its shard found in the shard's index
    (itself read by a range).  Every entry of an index is validated before any range it
    names is read (:func:`~zarrchive.services.views.shard_index.parse_index`), and every inner
    chunk is checked by :func:`~zarrchive.services.views.chunk_guard.check_inner_chunk` before
    zarr-python decodes it."""
    assert layout.shard is not None
    shard = layout.shard
    inner = _inner_array_metadata(array, layout)
    wanted = group_by_shard(plan.chunks, shard.index_layout)
    located = source.store.map(lambda read: _locate(source, array, layout, read), wanted)
    # the ranges to read: inner chunks of a shard that lie close together are read as one
    requests: list[tuple[str, ByteRange]] = []
    pieces: list[tuple[str, ByteRange, tuple[int, ...]]] = []
    for key, chunks in located:
        if not chunks:
            continue
        joined = coalesce([r for _, r in chunks], RANGE_GAP)
        requests += [(key, r) for r in joined]
        pieces += [(key, r, coords) for coords, r in chunks]
    if len(requests) > MAX_RANGE_READS:
        raise NoThumbnail(
            f"the slice's inner chunks need {len(requests)} range reads; a thumbnail makes at "
            f"most {MAX_RANGE_READS}"
        )
    bodies = source.store.map(
        lambda request: source.get_range(request[0], request[1], f"shard {short(request[0], 80)}"),
        requests,
    )
    read = {request: body for request, body in zip(requests, bodies, strict=True)}
    by_key: dict[str, list[ByteRange]] = {}
    for key, request in requests:
        by_key.setdefault(key, []).append(request)
    objects = {V3_META: inner.to_buffer_dict(default_buffer_prototype())[V3_META].to_bytes()}
    for key, wanted_range, coords in pieces:
        outer = holder(by_key[key], wanted_range)
        relative = wanted_range.within(outer)
        data = read[(key, outer)][relative.start : relative.end]
        where = f"an inner chunk of shard {short(key, 80)}"
        chunk_guard.check_inner_chunk(layout, data, where)
        objects[inner.encode_chunk_key(coords)] = data
    return objects


def _locate(
    source: _Source, array: zarr.Array[Any], layout: chunk_guard.Layout, read: ShardRead
) -> tuple[str, list[tuple[tuple[int, ...], ByteRange]]]:
    """The key of the shard *read* names and, of the inner chunks needed of it, those it
    stores with their byte ranges (its index read by a range and validated); an absent shard
    stores none (they read as the fill value)."""
    assert layout.shard is not None
    index_layout = layout.shard.index_layout
    key = array.metadata.encode_chunk_key(read.shard)
    where = f"shard {short(key, 80)}"
    size = source.size(key)
    if size is None:
        return key, []
    limit = layout.object_limit()
    if size > limit:
        raise NoThumbnail(f"{where} is {size} bytes; its declared size allows {limit}")
    try:
        index_range = index_layout.index_range(size)
        raw = source.get_range(key, index_range, where)
        entries = parse_index(index_layout, raw, size, layout.shard.inner.object_limit())
    except InvalidShard as exc:
        raise NoThumbnail(f"{where}: {exc}") from None
    found: list[tuple[tuple[int, ...], ByteRange]] = []
    for position, coords in read.chunks:
        entry = entries[position]
        if entry is not None:
            found.append((coords, entry))
    return key, found

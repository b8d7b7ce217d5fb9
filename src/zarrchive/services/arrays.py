"""Zarr array and group metadata of a directory of an archived Zarr, and thumbnails.

The metadata (``.zarray``/``.zattrs`` or ``zarr.json``) and the few chunks a thumbnail needs
are read from the archive's S3 objects into an in-memory store that zarr-python opens: zarr
decodes every codec it knows (v2 compressors and filters, v3 codec chains, sharding), and a
chunk that is not stored reads as the fill value.  The slice maths are in
:mod:`zarrchive.services.thumbnail`.

Everything here is uploader-controlled, so each read is bounded before it is done: metadata
documents by size (and by :mod:`~zarrchive.services.metadata_limits` before zarr-python
parses them), chunk objects by the size their declared shape allows (known from the
directory's ``.checksum`` node before any download, and enforced while reading), their
decompressed size by :mod:`~zarrchive.services.chunk_guard` before zarr-python decodes them.
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
from typing import Any

import numpy as np
import zarr
from PIL import Image
from zarr.core.buffer import default_buffer_prototype
from zarr.storage import MemoryStore

from zarrchive.errors import ArchiveBusy, InvalidPath, StorageError
from zarrchive.paths import validate_directory_path
from zarrchive.services import chunk_guard, codec_names, metadata_limits, ngff, open_with
from zarrchive.services.metadata_limits import V2_ARRAY, V2_ATTRS, V2_GROUP, V3_META, short
from zarrchive.services.node_cache import NODE_CACHE, NodeView
from zarrchive.services.runtime import Archive
from zarrchive.services.thumbnail import NoThumbnail, SlicePlan, plan_slice, stretch
from zarrchive.services.zarrs import ZarrRef
from zarrchive.storage.keys import checksum_node_key, zarr_object_key, zarr_prefix
from zarrchive.storage.objects import ObjectStore

#: The largest metadata document read for a page or a thumbnail, bytes.
MAX_METADATA_BYTES = 1024 * 1024
#: The largest metadata document read of a child directory a group page probes, bytes.
MAX_PROBED_METADATA_BYTES = 64 * 1024
#: Child directories whose metadata a group page reads to tell arrays from groups.
MAX_CHILDREN_PROBED = 32
#: Thumbnails drawn at once by one process (each may decode up to
#: :data:`~zarrchive.services.thumbnail.MAX_DECODED_BYTES`).
MAX_CONCURRENT_THUMBNAILS = 2
#: How long a thumbnail request waits for a free slot before it gets a 503.
THUMBNAIL_WAIT_SECONDS = 5.0
#: Bytes asked of S3 at a time by a bounded read.
_READ_PIECE = 1024 * 1024


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
    or an array beyond those of :mod:`~zarrchive.services.metadata_limits`."""

    reason: str


def _prefix(directory: str) -> str:
    return f"{directory}/" if directory else ""


def _get_bounded(store: ObjectStore, key: str, limit: int) -> bytes | None:
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


def _probe_document(store: ObjectStore, key: str) -> bytes | None:
    info = store.head(key)
    if info is None or info.size > MAX_PROBED_METADATA_BYTES:
        return None
    return _get_bounded(store, key, MAX_PROBED_METADATA_BYTES)


def _metadata_documents(
    store: ObjectStore, zarr_id: str, directory: str, node: NodeView
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


def _plan(array: zarr.Array[Any]) -> SlicePlan:
    if array.dtype.kind not in "biufc":
        raise NoThumbnail(f"values of type {short(array.dtype)} have no grey level")
    return plan_slice(tuple(array.shape), _object_grid(array), array.dtype.itemsize)


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


def _array_meta(array: zarr.Array[Any]) -> ArrayMeta:
    try:
        _plan(array)
        chunk_guard.layout_of(array)
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
    )


def _probe(
    store: ObjectStore, zarr_id: str, path: str
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
    store: ObjectStore, zarr_row: ZarrRef, directory: str, spec: ngff.Level
) -> LevelArray:
    """The array metadata of a multiscale image's level (each document read only up to
    :data:`MAX_PROBED_METADATA_BYTES`: an image has up to
    :data:`~zarrchive.services.ngff.MAX_LEVELS` levels)."""
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
    """A PNG of the array in *directory* (see :func:`zarrchive.services.thumbnail.plan_slice`);
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
            drawn: Drawn = _draw(store, zarr_row.id, directory, node)
        except NoThumbnail as exc:
            drawn = str(exc)
        THUMBNAILS.put(cache_key, drawn)
        return _served(drawn)
    finally:
        THUMBNAIL_SLOTS.release()


def _draw(store: ObjectStore, zarr_id: str, directory: str, node: NodeView) -> bytes:
    documents = _metadata_documents(store, zarr_id, directory, node)
    refused = _oversized(node) or metadata_limits.refusal(documents)
    if refused is not None:
        raise NoThumbnail(refused)
    array = _open(documents) if documents else None
    if not isinstance(array, zarr.Array):
        raise NoThumbnail("the directory holds no Zarr array")
    plan = _plan(array)
    layout = chunk_guard.layout_of(array)
    keys = [array.metadata.encode_chunk_key(c) for c in plan.chunks]
    bodies = store.map(lambda k: _read_chunk(store, zarr_id, directory, node, k, layout), keys)
    chunks = {k: b for k, b in zip(keys, bodies, strict=True) if b}
    try:
        full = zarr.open_array(store=_memory_store({**documents, **chunks}), mode="r")
        values = np.asarray(full[plan.selection()])
    except Exception as exc:  # a chunk that its codecs can't decode: the data's trouble
        raise NoThumbnail(f"the chunks could not be decoded ({type(exc).__name__})") from exc
    grey = stretch(values)
    buffer = io.BytesIO()
    Image.fromarray(grey).save(buffer, format="PNG")
    return buffer.getvalue()


def _read_chunk(
    store: ObjectStore,
    zarr_id: str,
    directory: str,
    node: NodeView,
    key: str,
    layout: chunk_guard.Layout,
) -> bytes | None:
    """The stored object *key* of the array in *directory* (``None``: not stored, it reads
    as the fill value), refused before download when its size (known from its directory's
    node) is more than *layout* allows, and before decoding when it decompresses to more."""
    path = _prefix(directory) + key
    parent, _, name = path.rpartition("/")
    holder = (
        node if parent == directory else NODE_CACHE.get(store, checksum_node_key(zarr_id, parent))
    )
    child = holder.files.get(name) if holder is not None else None
    if child is None:
        return None
    limit = layout.object_limit()
    where = f"chunk {short(key, 80)}"
    if child.size > limit:
        raise NoThumbnail(f"{where} is {child.size} bytes; its declared size allows {limit}")
    body = _get_bounded(store, zarr_object_key(zarr_id, path), limit)
    if body is None:
        raise NoThumbnail(f"{where} changed while it was read")
    chunk_guard.check_object(layout, body, where)
    return body

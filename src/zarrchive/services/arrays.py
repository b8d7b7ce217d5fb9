"""Zarr array and group metadata of a directory of an archived Zarr, and thumbnails.

The metadata (``.zarray``/``.zattrs`` or ``zarr.json``) and the few chunks a thumbnail needs
are read from the archive's S3 objects into an in-memory store that zarr-python opens: zarr
decodes every codec it knows (v2 compressors and filters, v3 codec chains, sharding), and a
chunk that is not stored reads as the fill value.  The slice maths are in
:mod:`zarrchive.services.thumbnail`.
"""

from __future__ import annotations

import io
import json
import threading
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import zarr
from PIL import Image
from zarr.core.buffer import default_buffer_prototype
from zarr.storage import MemoryStore

from zarrchive.services.node_cache import NODE_CACHE, NodeView
from zarrchive.services.runtime import Archive
from zarrchive.services.thumbnail import NoThumbnail, SlicePlan, plan_slice, stretch
from zarrchive.services.zarrs import ZarrRef
from zarrchive.storage.keys import checksum_node_key, zarr_object_key
from zarrchive.storage.objects import ObjectStore

V2_ARRAY, V2_GROUP, V2_ATTRS, V3_META = ".zarray", ".zgroup", ".zattrs", "zarr.json"
#: The largest metadata document read, bytes.
MAX_METADATA_BYTES = 4 * 1024 * 1024
#: Child directories whose metadata a group page reads to tell arrays from groups.
MAX_CHILDREN_PROBED = 32


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
    #: Why there is no thumbnail (``None``: there is one).
    no_thumbnail: str | None


@dataclass(frozen=True)
class GroupMeta:
    zarr_format: int
    attributes: dict[str, Any]
    #: ``(name, shape, dtype)`` of the child arrays found.
    arrays: list[tuple[str, tuple[int, ...], str]] = field(default_factory=list)
    #: Some child directories were not looked at (there were too many).
    partial: bool = False


def _prefix(directory: str) -> str:
    return f"{directory}/" if directory else ""


def _get(store: ObjectStore, key: str) -> bytes | None:
    info = store.head(key)
    if info is None or info.size > MAX_METADATA_BYTES:
        return None
    return store.get(key)


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
        body = store.get(zarr_object_key(zarr_id, _prefix(directory) + name))
        if body is not None:
            found[name] = body
    return found


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


def _codecs(array: zarr.Array[Any]) -> list[str]:
    metadata = array.metadata
    names: list[str] = []
    if metadata.zarr_format == 2:
        for item in (*(metadata.filters or ()), metadata.compressor):
            if item is not None:
                names.append(repr(item))
        return names
    return [repr(codec) for codec in metadata.codecs]


def _object_grid(array: zarr.Array[Any]) -> tuple[int, ...]:
    """The shape of the stored objects: shards when sharded, else chunks."""
    grid = array.metadata.chunk_grid
    return tuple(int(n) for n in grid.chunk_shape)  # type: ignore[attr-defined]


def _plan(array: zarr.Array[Any]) -> SlicePlan:
    if array.dtype.kind not in "biufc":
        raise NoThumbnail(f"values of type {array.dtype} have no grey level")
    return plan_slice(tuple(array.shape), _object_grid(array), array.dtype.itemsize)


def _array_meta(array: zarr.Array[Any]) -> ArrayMeta:
    try:
        _plan(array)
        reason = None
    except NoThumbnail as exc:
        reason = str(exc)
    names = getattr(array.metadata, "dimension_names", None)
    return ArrayMeta(
        zarr_format=array.metadata.zarr_format,
        shape=tuple(int(n) for n in array.shape),
        dtype=str(array.dtype),
        chunks=tuple(int(n) for n in array.chunks),
        shards=tuple(int(n) for n in array.shards) if array.shards else None,
        codecs=_codecs(array),
        fill_value=str(array.fill_value),
        dimension_names=[str(n) for n in names] if names else None,
        attributes=dict(array.attrs),
        no_thumbnail=reason,
    )


def _probe(store: ObjectStore, zarr_id: str, path: str) -> tuple[str, tuple[int, ...], str] | None:
    """``(name, shape, dtype)`` if the directory *path* holds an array."""
    for name in (V3_META, V2_ARRAY):
        body = _get(store, zarr_object_key(zarr_id, f"{path}/{name}"))
        if body is None:
            continue
        node = _open({name: body})
        if isinstance(node, zarr.Array):
            return path.rsplit("/", 1)[-1], tuple(int(n) for n in node.shape), str(node.dtype)
        return None
    return None


def describe(archive: Archive, zarr_row: ZarrRef, directory: str) -> ArrayMeta | GroupMeta | None:
    """The array or group metadata held by *directory* (``""``: the root), if any."""
    store = archive.store_for(zarr_row.embargoed)
    node = NODE_CACHE.get(store, checksum_node_key(zarr_row.id, directory))
    if node is None:
        return None
    documents = _metadata_documents(store, zarr_row.id, directory, node)
    if not documents:
        return None
    opened = _open(documents)
    if isinstance(opened, zarr.Array):
        return _array_meta(opened)
    if opened is None:
        return None
    children = node.directory_names[:MAX_CHILDREN_PROBED]
    prefix = _prefix(directory)
    found = store.map(lambda name: _probe(store, zarr_row.id, prefix + name), children)
    return GroupMeta(
        zarr_format=opened.metadata.zarr_format,
        attributes=dict(opened.attrs),
        arrays=[f for f in found if f is not None],
        partial=len(node.directory_names) > MAX_CHILDREN_PROBED,
    )


# -- thumbnails -------------------------------------------------------------------------
class _ThumbnailCache:
    """PNGs by (bucket, Zarr, directory, the directory's digest): a changed chunk changes
    the digest, so a stale picture is never served."""

    def __init__(self, entries: int = 128) -> None:
        self.entries = entries
        self._items: OrderedDict[tuple[str, str, str, str], bytes] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: tuple[str, str, str, str]) -> bytes | None:
        with self._lock:
            found = self._items.get(key)
            if found is not None:
                self._items.move_to_end(key)
            return found

    def put(self, key: tuple[str, str, str, str], png: bytes) -> None:
        with self._lock:
            self._items[key] = png
            while len(self._items) > self.entries:
                self._items.popitem(last=False)


THUMBNAILS = _ThumbnailCache()


def thumbnail_png(archive: Archive, zarr_row: ZarrRef, directory: str) -> bytes:
    """A PNG of the array in *directory* (see :func:`zarrchive.services.thumbnail.plan_slice`);
    :class:`NoThumbnail` when there is none to draw."""
    store = archive.store_for(zarr_row.embargoed)
    node = NODE_CACHE.get(store, checksum_node_key(zarr_row.id, directory))
    if node is None:
        raise NoThumbnail("no such directory")
    cache_key = (store.bucket, zarr_row.id, directory, node.digest)
    cached = THUMBNAILS.get(cache_key)
    if cached is not None:
        return cached
    documents = _metadata_documents(store, zarr_row.id, directory, node)
    array = _open(documents) if documents else None
    if not isinstance(array, zarr.Array):
        raise NoThumbnail("the directory holds no Zarr array")
    plan = _plan(array)
    prefix = _prefix(directory)
    keys = [array.metadata.encode_chunk_key(c) for c in plan.chunks]
    bodies = store.map(lambda k: store.get(zarr_object_key(zarr_row.id, prefix + k)), keys)
    chunks = {k: b for k, b in zip(keys, bodies, strict=True) if b}
    try:
        full = zarr.open_array(store=_memory_store({**documents, **chunks}), mode="r")
        values = np.asarray(full[plan.selection()])
    except Exception as exc:  # a chunk that its codecs can't decode: the data's trouble
        raise NoThumbnail(f"the chunks could not be decoded ({type(exc).__name__})") from exc
    grey = stretch(values)
    buffer = io.BytesIO()
    Image.fromarray(grey).save(buffer, format="PNG")
    png = buffer.getvalue()
    THUMBNAILS.put(cache_key, png)
    return png


def metadata_json(meta: ArrayMeta | GroupMeta) -> str:
    return json.dumps(meta.attributes, indent=2, sort_keys=True, default=str)

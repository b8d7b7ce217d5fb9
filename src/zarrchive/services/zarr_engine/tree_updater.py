"""Incremental update of a Zarr's ``.checksum`` tree in S3.

A batch of changes (files set to ``(md5, size)`` or removed) touches every
directory above each changed path.  Each affected node is read once (all
concurrently), updated in memory deepest first so every parent sees its
children's new digests, and written once (all concurrently).  Nodes of
directories that become empty are deleted.  Cost: O(affected directories),
independent of the Zarr's size (bar the width of the nodes read).

The update is idempotent: re-applying the same changes to a partially updated
tree (after a crash) yields the same nodes, because every change sets an
absolute value and every digest is recomputed from its children.
"""

from __future__ import annotations

import hashlib
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from zarrchive.checksum import EMPTY_CHECKSUM, ChecksumNode
from zarrchive.errors import CorruptChecksumNode, InvalidChecksumNode
from zarrchive.paths import parent_directories, split_path
from zarrchive.services.zarr_engine.node_cache import NODE_CACHE, NodeView
from zarrchive.storage.keys import checksum_node_key
from zarrchive.storage.protocol import ObjectStoreProtocol

#: ``(md5, size)`` to set a file, ``None`` to remove it.
FileChange = tuple[str, int] | None


@dataclass(frozen=True, slots=True)
class TreeState:
    """The root of a Zarr's tree after an update."""

    checksum: str
    file_count: int
    size: int


def _depth(directory: str) -> int:
    return directory.count("/") + 1 if directory else 0


def read_node(store: ObjectStoreProtocol, zarr_id: str, directory: str) -> ChecksumNode | None:
    """The ``.checksum`` node of *directory*, or ``None`` if it has none.

    A node that can't be parsed is the archive's fault (:class:`CorruptChecksumNode`), never
    the caller's: ``zarrchive admin fsck --repair`` rewrites it from S3's listing.
    """
    key = checksum_node_key(zarr_id, directory)
    data = store.get(key)
    if data is None:
        return None
    try:
        return ChecksumNode.from_json(data)
    except InvalidChecksumNode as exc:
        raise CorruptChecksumNode(
            f"the archive's tree hash node {key} of Zarr {zarr_id} is corrupt ({exc.message}): "
            f"an administrator must run 'zarrchive admin fsck {zarr_id} --repair'"
        ) from exc


def read_nodes(
    store: ObjectStoreProtocol, zarr_id: str, directories: list[str]
) -> dict[str, ChecksumNode | None]:
    """Several nodes, read concurrently (on the store's pool for small requests: never behind
    an apply's queued copies)."""
    nodes = store.map_small(lambda d: read_node(store, zarr_id, d), directories)
    return dict(zip(directories, nodes, strict=True))


def affected_directories(paths: list[str]) -> set[str]:
    """Every directory above the given entry paths, the root ``""`` included."""
    directories = {""}
    for path in paths:
        parts = path.split("/")[:-1]
        for i in range(1, len(parts) + 1):
            directories.add("/".join(parts[:i]))
    return directories


#: Nodes at least this large are handed to the readers' cache once written (smaller ones
#: parse in milliseconds).
REMEMBERED_NODE_BYTES = 256 * 1024


def check_dropped_directories(changes: Iterable[str], drop_directories: Iterable[str]) -> None:
    """Refuse (``ValueError``, a programming error) a dropped directory that is the root, or
    that is (or contains) a changed path, or that lies inside another dropped one: each
    would make the update ambiguous.  Pure."""
    dropped = set(drop_directories)
    if not dropped:
        return
    if "" in dropped:
        raise ValueError("the root directory can't be dropped")
    for path in [*changes, *dropped]:
        for parent in parent_directories(path):
            if parent in dropped:
                raise ValueError(f"{path!r} lies inside the dropped directory {parent!r}")
    overlap = dropped.intersection(changes)
    if overlap:
        raise ValueError(f"{sorted(overlap)[0]!r} is both changed and dropped")


def apply_changes(
    store: ObjectStoreProtocol,
    zarr_id: str,
    changes: Mapping[str, FileChange],
    drop_directories: Sequence[str] = (),
) -> TreeState:
    """Apply *changes* to the tree of *zarr_id* in S3 and return the new root.

    *drop_directories*: whole directories removed from their parents' nodes in the same
    update (what lies below them is not visited: their own nodes are the caller's to delete,
    see :mod:`zarrchive.services.zarr_engine.uploads.directory_delete`).  None may be the root, contain a
    changed path or another dropped directory.  A dropped directory that is not in its
    parent's node (already dropped) changes nothing.
    """
    check_dropped_directories(changes, drop_directories)
    by_directory: dict[str, dict[str, FileChange]] = defaultdict(dict)
    for path, change in changes.items():
        directory, name = split_path(path)
        by_directory[directory][name] = change
    dropped_by_directory: dict[str, list[str]] = defaultdict(list)
    for path in drop_directories:
        directory, name = split_path(path)
        dropped_by_directory[directory].append(name)
    directories = sorted(
        affected_directories([*changes, *drop_directories]), key=_depth, reverse=True
    )
    nodes = read_nodes(store, zarr_id, directories)

    writes: dict[str, bytes] = {}
    written: dict[str, ChecksumNode] = {}
    deletes: list[str] = []
    # child results bubble up: parent -> {name: new digest or None (gone)}
    subdirectory_updates: dict[str, dict[str, str | None]] = defaultdict(dict)
    root = ChecksumNode()
    for directory in directories:  # deepest first
        node = nodes[directory] or ChecksumNode()
        for name, change in by_directory.get(directory, {}).items():
            if change is None:
                node.discard_file(name)
            else:
                node.set_file(name, change[0], change[1])
        for name in dropped_by_directory.get(directory, ()):
            node.discard_directory(name)
        for name, digest in subdirectory_updates.get(directory, {}).items():
            if digest is None:
                node.discard_directory(name)
            else:
                node.set_directory(name, digest)
        key = checksum_node_key(zarr_id, directory)
        if directory:
            parent, name = split_path(directory)
            if node.is_empty:
                deletes.append(key)
                subdirectory_updates[parent][name] = None
            else:
                writes[key] = node.to_json()
                written[key] = node
                subdirectory_updates[parent][name] = node.digest
        else:
            root = node
            if node.is_empty:
                deletes.append(key)
            else:
                writes[key] = node.to_json()
                written[key] = node

    # (on the pool of small requests: never behind the next batch's copies, made ahead)
    store.map_small(
        lambda item: store.put(item[0], item[1], "application/json"), list(writes.items())
    )
    if deletes:
        store.delete_many(deletes)
    for key, data in writes.items():
        if len(data) >= REMEMBERED_NODE_BYTES:
            etag = hashlib.md5(data).hexdigest()
            NODE_CACHE.remember(store, key, etag, NodeView.of(written[key]), len(data))
    if root.is_empty:
        return TreeState(EMPTY_CHECKSUM, 0, 0)
    return TreeState(root.digest, root.count, root.size)


def file_lookup(
    store: ObjectStoreProtocol, zarr_id: str, paths: list[str]
) -> dict[str, tuple[str, int] | None]:
    """The current ``(md5, size)`` of each path per the tree (``None``: not a file)."""
    directories = sorted({split_path(p)[0] for p in paths})
    nodes = read_nodes(store, zarr_id, directories)
    result: dict[str, tuple[str, int] | None] = {}
    for path in paths:
        directory, name = split_path(path)
        node = nodes[directory]
        child = node.files.get(name) if node is not None else None
        result[path] = (child.digest, child.size) if child is not None else None
    return result

"""Parsed ``.checksum`` nodes for readers: bounded memory and time per listing request.

A directory of 10^6 entries has a 74 MB node.  Listing pages and file lookups read nodes
through this cache instead of downloading and parsing the node each time:

- entries are keyed by the node object's **ETag** (with endpoint, bucket and key): a node
  rewritten by any process has a new ETag, so a stale node is never served, with one or
  many API processes (each request costs one HEAD to learn the current ETag);
- one download and parse per node version however many requests want it at once
  (single flight), and at most ``max_loads`` cold loads at a time in the process; a
  request that can't start its load within ``wait_seconds`` gets :class:`ArchiveBusy`
  (503 + ``Retry-After``);
- memory is bounded by a budget (least recently used nodes are dropped first); a node
  larger than the budget is served once and not kept;
- pages are cut from sorted name lists by bisection: no re-parse, no copy of the node.

Writers never read from it: the tree updater reads fresh nodes under the Zarr's lock and
changes them in place; cached views are read-only.  But the tree updater *hands* it the large
nodes it has just written (:meth:`NodeCache.remember`, keyed by the ETag S3 gives a plain PUT:
the body's md5), so in the process that applied a batch (the one-process default, where jobs
run in a thread of the API) the first listing after it costs no download and parse.
"""

from __future__ import annotations

import bisect
import threading
from collections import OrderedDict
from dataclasses import dataclass

from zarrchive.checksum import ChecksumNode
from zarrchive.checksum.node import ChildDigest
from zarrchive.errors import ArchiveBusy, CorruptChecksumNode, InvalidChecksumNode
from zarrchive.storage.protocol import ObjectStoreProtocol

#: Kinds of listing rows, in listing order: directories first, then files.
DIRECTORY, FILE = 0, 1
#: Parsed nodes take several times their JSON size in memory.
_MEMORY_PER_BYTE = 6


@dataclass(frozen=True, slots=True)
class NodeView:
    """A read-only node with its children's names sorted for paging."""

    digest: str
    count: int
    size: int
    directories: dict[str, ChildDigest]
    files: dict[str, ChildDigest]
    directory_names: list[str]
    file_names: list[str]

    @classmethod
    def of(cls, node: ChecksumNode) -> NodeView:
        return cls(
            node.digest,
            node.count,
            node.size,
            node.directories,
            node.files,
            sorted(node.directories),
            sorted(node.files),
        )

    @classmethod
    def empty(cls) -> NodeView:
        return cls.of(ChecksumNode())

    def page(
        self, after: tuple[int, str] | None, limit: int
    ) -> tuple[list[tuple[int, str, ChildDigest]], bool]:
        """Up to *limit* children after the ``(kind, name)`` *after*, in listing order, and
        whether more follow."""
        rows: list[tuple[int, str, ChildDigest]] = []
        start_kind, start_name = after if after is not None else (DIRECTORY, None)
        for kind, names, children in (
            (DIRECTORY, self.directory_names, self.directories),
            (FILE, self.file_names, self.files),
        ):
            if kind < start_kind:
                continue
            start = 0
            if kind == start_kind and start_name is not None:
                start = bisect.bisect_right(names, start_name)
            for name in names[start : start + limit + 1 - len(rows)]:
                rows.append((kind, name, children[name]))
            if len(rows) > limit:
                break
        return rows[:limit], len(rows) > limit


@dataclass
class _Entry:
    view: NodeView
    cost: int


class NodeCache:
    """See the module's docstring.  Thread-safe; one per process is enough."""

    def __init__(
        self, *, budget_bytes: int = 512 * 1024 * 1024, max_loads: int = 2, wait_seconds: float = 20
    ) -> None:
        self.budget_bytes = budget_bytes
        self.wait_seconds = wait_seconds
        self._entries: OrderedDict[tuple[str, str, str, str], _Entry] = OrderedDict()
        self._used = 0
        self._lock = threading.Lock()
        self._loading: dict[tuple[str, str, str], threading.Lock] = {}
        self._load_slots = threading.BoundedSemaphore(max_loads)
        #: Downloads and parses done (for tests and monitoring).
        self.loads = 0

    def get(self, store: ObjectStoreProtocol, key: str) -> NodeView | None:
        """The node at *key* (``None`` if there is none), current as of this call."""
        head = store.head(key)
        if head is None:
            return None
        found = self._lookup(store, key, head.etag)
        if found is not None:
            return found
        flight = (store.endpoint_url or "", store.bucket, key)
        with self._lock:
            lock = self._loading.setdefault(flight, threading.Lock())
        if not lock.acquire(timeout=self.wait_seconds):
            raise ArchiveBusy(f"the listing of {key} is being prepared: retry in a few seconds")
        try:
            found = self._lookup(store, key, head.etag)  # loaded by the request we waited for
            if found is not None:
                return found
            if not self._load_slots.acquire(timeout=self.wait_seconds):
                raise ArchiveBusy("the archive is busy reading large directories: retry later")
            try:
                return self._load(store, key)
            finally:
                self._load_slots.release()
        finally:
            lock.release()

    def _lookup(self, store: ObjectStoreProtocol, key: str, etag: str) -> NodeView | None:
        with self._lock:
            entry = self._entries.get((store.endpoint_url or "", store.bucket, key, etag))
            if entry is None:
                return None
            self._entries.move_to_end((store.endpoint_url or "", store.bucket, key, etag))
            return entry.view

    def _load(self, store: ObjectStoreProtocol, key: str) -> NodeView | None:
        fetched = store.get_with_etag(key)
        if fetched is None:
            return None
        data, etag = fetched
        try:
            view = NodeView.of(ChecksumNode.from_json(data))
        except InvalidChecksumNode as exc:
            zarr_id = key.split("/")[1]  # zarr_checksums/{zarr_id}/...
            raise CorruptChecksumNode(
                f"the archive's tree hash node {key} of Zarr {zarr_id} is corrupt "
                f"({exc.message}): an administrator must run "
                f"'zarrchive admin fsck {zarr_id} --repair'"
            ) from exc
        with self._lock:
            self.loads += 1
        self.remember(store, key, etag, view, len(data))
        return view

    def remember(
        self, store: ObjectStoreProtocol, key: str, etag: str, view: NodeView, size: int
    ) -> None:
        """Keep *view*, the node just written at *key* (*size* bytes of JSON, ETag *etag*)."""
        cost = size * _MEMORY_PER_BYTE
        if cost > self.budget_bytes:
            return
        entry_key = (store.endpoint_url or "", store.bucket, key, etag)
        with self._lock:
            if entry_key in self._entries:
                return
            self._entries[entry_key] = _Entry(view, cost)
            self._used += cost
            while self._used > self.budget_bytes:
                _, dropped = self._entries.popitem(last=False)
                self._used -= dropped.cost

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()
            self._used = 0


#: The process's cache of parsed nodes.
NODE_CACHE = NodeCache()

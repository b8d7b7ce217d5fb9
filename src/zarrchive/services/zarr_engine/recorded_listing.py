"""DANDI's flat listing of a Zarr's objects from what the archive records, not from S3.

A Zarr's current objects (key, ``LastModified``, md5, size) are exactly its newest manifest
merged with the changes the apply recorded since (:mod:`zarrchive.services.zarr_engine.manifest_changes`:
the chain the manifest job itself builds on; a chain from the empty checksum needs no
manifest).  A page of ``GET /api/zarr/{id}/files/`` is cut from that merge:

- the changes come from the database, read from the page's first key on, in key order;
- the manifest is read once per version of its file (one ``HEAD`` per page to learn its
  ETag, one ``GET`` when it is not held yet) and held parsed, sorted, in a bounded cache
  (:class:`ManifestCache`); a manifest too large to hold is streamed up to the page's end;
- nothing else touches S3 (no ``.checksum`` node, no listing), whatever the number of
  directories the page spans.  An entry whose recorded ETag is not an md5 (an object
  assembled from parts, recorded without its verified md5) takes the md5 of its
  directory's node.

:func:`recorded_page` answers ``None`` when the records do not reach the Zarr's state (no
chain: a Zarr older than the records without a manifest, an unembargo, a manifest missing
or not matching its checksum, records pruned while the page was read): the caller lists
as before (:func:`zarrchive.services.zarr_engine.zarrs.list_objects`).
"""

from __future__ import annotations

import bisect
import itertools
import threading
from array import array
from collections import OrderedDict
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from zarrchive.checksum import is_md5
from zarrchive.db.models import Zarr, ZarrChangedObject, ZarrChangeSet, ZarrManifest
from zarrchive.errors import ZarrchiveError
from zarrchive.manifest import ManifestEntry, manifest_key, read_manifest
from zarrchive.manifest.writer import chunk_stream
from zarrchive.paths import split_path
from zarrchive.services.runtime import Archive
from zarrchive.services.zarr_engine.manifest_changes import (
    ChangeChain,
    newest_change_set_id,
    resolve_chain,
    resting_chain,
)
from zarrchive.services.zarr_engine.node_cache import NODE_CACHE
from zarrchive.storage.keys import checksum_node_key
from zarrchive.storage.objects import ObjectStore

#: The chunks in which a manifest is read from S3.
_READ_CHUNK = 1024 * 1024
#: Rows fetched at a time from the records.
_FETCH = 2_000


@dataclass(frozen=True)
class ObjectEntry:
    """One object of the Zarr as DANDI lists it (``Key`` relative to the Zarr's root)."""

    key: str
    last_modified: datetime
    etag: str
    size: int


@dataclass(frozen=True)
class KeyRange:
    """The keys a page may hold: those beginning with *prefix* and sorting after *after*
    (in UTF-8 byte order, which is Python's order of ``str``)."""

    prefix: str
    after: str

    @property
    def lower(self) -> tuple[str, bool]:
        """The smallest key to consider and whether it is itself included."""
        if self.prefix > self.after:
            return self.prefix, True
        return self.after, False

    def admits(self, key: str) -> bool:
        return key > self.after and key.startswith(self.prefix)

    def is_past(self, key: str) -> bool:
        """Whether *key* and every key after it lie beyond the range."""
        return key > self.prefix and not key.startswith(self.prefix)


# -- the parsed manifests ---------------------------------------------------------------
class ParsedEntries:
    """A manifest's entries sorted by path, packed (about 40 bytes and the path's UTF-8 per
    entry, whatever Python's objects would take): every path in one buffer, and per entry
    the end of its path, its ``LastModified`` (whole seconds), size and md5 (16 bytes; an
    ETag that is no md5 is kept aside)."""

    def __init__(self) -> None:
        self._names = bytearray()
        self._ends = array("q")
        self._modified = array("q")
        self._sizes = array("q")
        self._md5s = bytearray()
        self._odd_etags: dict[int, str] = {}

    def __len__(self) -> int:
        return len(self._ends)

    @property
    def nbytes(self) -> int:
        arrays = (self._ends, self._modified, self._sizes)
        return len(self._names) + len(self._md5s) + sum(a.itemsize * len(a) for a in arrays)

    def append(self, path: str, modified: datetime, size: int, etag: str) -> bool:
        """Add the entry after the last one; ``False`` (nothing added) if it does not sort
        after it."""
        if self._ends and path <= self.path(len(self._ends) - 1):
            return False
        index = len(self._ends)
        self._names += path.encode("utf-8")
        self._ends.append(len(self._names))
        self._modified.append(int(modified.timestamp()))
        self._sizes.append(size)
        if is_md5(etag):
            self._md5s += bytes.fromhex(etag)
        else:
            self._md5s += bytes(16)
            self._odd_etags[index] = etag
        return True

    def path(self, index: int) -> str:
        start = self._ends[index - 1] if index else 0
        return self._names[start : self._ends[index]].decode("utf-8")

    def entry(self, index: int) -> ObjectEntry:
        etag = self._odd_etags.get(index) or self._md5s[16 * index : 16 * index + 16].hex()
        modified = datetime.fromtimestamp(self._modified[index], UTC)
        return ObjectEntry(self.path(index), modified, etag, self._sizes[index])

    def from_key(self, lower: str, inclusive: bool) -> Iterator[ObjectEntry]:
        """The entries from *lower* on (*inclusive*: *lower* itself too), in order."""
        find = bisect.bisect_left if inclusive else bisect.bisect_right
        for index in range(find(range(len(self)), lower, key=self.path), len(self)):
            yield self.entry(index)


class ManifestCache:
    """Parsed manifests by object version (endpoint, bucket, key, ETag), least recently
    used dropped beyond *budget_bytes*; a manifest of more than *largest_entries* is never
    held (each page streams it instead).  One load per version at a time."""

    def __init__(
        self, *, budget_bytes: int = 256 * 1024 * 1024, largest_entries: int = 2_000_000
    ) -> None:
        self.budget_bytes = budget_bytes
        self.largest_entries = largest_entries
        self._held: OrderedDict[tuple[str, str, str, str], ParsedEntries] = OrderedDict()
        self._used = 0
        self._lock = threading.Lock()
        self._loading: dict[tuple[str, str, str, str], threading.Lock] = {}
        #: Manifests downloaded and parsed whole (for tests and monitoring).
        self.loads = 0

    def get(self, store: ObjectStore, key: str, etag: str, entries: int) -> ParsedEntries | None:
        """The parsed manifest at *key* in its version *etag* (*entries* long), or ``None``
        when it is too large to hold (stream it) or gone, or is not sorted by path."""
        if entries > self.largest_entries:
            return None
        slot = (store.endpoint_url or "", store.bucket, key, etag)
        with self._lock:
            found = self._lookup(slot)
            if found is not None:
                return found
            loading = self._loading.setdefault(slot, threading.Lock())
        with loading:
            with self._lock:
                found = self._lookup(slot)
            if found is not None:
                return found
            parsed = _parse(store, key, self.largest_entries)
            with self._lock:
                self._loading.pop(slot, None)
                if parsed is None:
                    return None
                self.loads += 1
                self._held[slot] = parsed
                self._used += parsed.nbytes
                while self._used > self.budget_bytes and len(self._held) > 1:
                    _, dropped = self._held.popitem(last=False)
                    self._used -= dropped.nbytes
            return parsed

    def _lookup(self, slot: tuple[str, str, str, str]) -> ParsedEntries | None:
        found = self._held.get(slot)
        if found is not None:
            self._held.move_to_end(slot)
        return found

    def clear(self) -> None:
        with self._lock:
            self._held.clear()
            self._used = 0


def _stream_entries(store: ObjectStore, key: str) -> Iterator[ManifestEntry]:
    """The manifest's entries as stored (one GET, closed when the iterator is)."""
    chunks = store.iter_content(key, chunk_size=_READ_CHUNK)
    try:
        yield from read_manifest(chunk_stream(chunks), verify=False).entries
    finally:
        chunks.close()  # type: ignore[attr-defined]


def _parse(store: ObjectStore, key: str, largest: int) -> ParsedEntries | None:
    parsed = ParsedEntries()
    try:
        for entry in _stream_entries(store, key):
            if len(parsed) == largest:
                return None  # (its row, which gives its size, was gone): too large to hold
            if not parsed.append(entry.path, entry.last_modified, entry.size, entry.etag):
                return None  # not in key order: not a file this listing can cut pages from
    except ZarrchiveError:
        return None  # gone (or rewritten into something unreadable) meanwhile
    return parsed


#: The process's parsed manifests.
MANIFEST_CACHE = ManifestCache()


def _utc(value: datetime) -> datetime:
    """*value* as S3's listings give it: UTC, to the second (a copy's answer may carry a
    fraction of a second that the object's listing does not)."""
    return value.astimezone(UTC).replace(microsecond=0)


# -- the records ----------------------------------------------------------------------------
@dataclass(frozen=True)
class RecordedState:
    """How to read the Zarr's current objects from records: *chain*, from the manifest of
    ``chain.base_checksum`` (``None``: the empty Zarr) with *base_entries* entries."""

    zarr_id: str
    chain: ChangeChain
    base_entries: int
    #: change sets the chain spans (the page is dropped if a prune took some meanwhile)
    sets: int


def recorded_state(session: Session, zarr_id: str, embargoed: bool) -> RecordedState | None:
    """The chain of records that names the Zarr's current objects, or ``None``."""
    zarr = session.get(Zarr, zarr_id)
    if zarr is None:
        return None
    last_id = newest_change_set_id(session, zarr_id)
    chain = resolve_chain(session, zarr_id, zarr.checksum, embargoed, last_id)
    if chain is None:
        chain = resting_chain(session, zarr_id, zarr.checksum, embargoed, last_id)
    if chain is None:
        return None
    base_entries = 0
    if chain.base_checksum is not None:
        entries = session.scalar(
            select(ZarrManifest.entries).where(
                ZarrManifest.zarr_id == zarr_id, ZarrManifest.checksum == chain.base_checksum
            )
        )
        base_entries = int(entries) if entries is not None else 0
    return RecordedState(zarr_id, chain, base_entries, _span(session, zarr_id, chain))


def _span(session: Session, zarr_id: str, chain: ChangeChain) -> int:
    count = session.scalar(
        select(func.count())
        .select_from(ZarrChangeSet)
        .where(
            ZarrChangeSet.zarr_id == zarr_id,
            ZarrChangeSet.id > chain.after_id,
            ZarrChangeSet.id <= chain.last_id,
        )
    )
    return int(count or 0)


def _changes_from(
    session: Session, state: RecordedState, lower: str, inclusive: bool
) -> Iterator[tuple[str, ObjectEntry | None]]:
    """The last change of each path from *lower* on over the chain, in key order:
    ``(path, entry)``, ``entry`` ``None`` for a deletion."""
    path = ZarrChangedObject.path
    ordered = path.collate("C") if session.get_bind().dialect.name == "postgresql" else path
    rows = session.execute(
        select(
            ZarrChangedObject.path,
            ZarrChangedObject.version_id,
            ZarrChangedObject.last_modified,
            ZarrChangedObject.size,
            ZarrChangedObject.etag,
        )
        .join(ZarrChangeSet, ZarrChangeSet.id == ZarrChangedObject.change_set_id)
        .where(
            ZarrChangeSet.zarr_id == state.zarr_id,
            ZarrChangeSet.id > state.chain.after_id,
            ZarrChangeSet.id <= state.chain.last_id,
            ordered >= lower if inclusive else ordered > lower,
        )
        .order_by(ordered, ZarrChangedObject.change_set_id.desc())
        .execution_options(yield_per=_FETCH)
    )
    previous: str | None = None
    for p, version_id, modified, size, etag in rows:
        if p == previous:
            continue  # an older change of the same path
        previous = p
        if version_id is None or modified is None or size is None or etag is None:
            yield p, None
        else:
            yield p, ObjectEntry(p, _utc(modified), etag, size)


def _merged(
    base: Iterator[ObjectEntry], changes: Iterator[tuple[str, ObjectEntry | None]]
) -> Iterator[ObjectEntry]:
    """*base* with *changes* applied (both sorted by key, each key once)."""
    entry = next(base, None)
    change = next(changes, None)
    while entry is not None or change is not None:
        if change is None or (entry is not None and entry.key < change[0]):
            assert entry is not None
            yield entry
            entry = next(base, None)
            continue
        if entry is not None and entry.key == change[0]:
            entry = next(base, None)
        if change[1] is not None:
            yield change[1]
        change = next(changes, None)


def recorded_page(
    archive: Archive, zarr_id: str, embargoed: bool, wanted: KeyRange, limit: int
) -> tuple[list[ObjectEntry], bool] | None:
    """Up to *limit* (at least 1) of the Zarr's objects in *wanted*, in key order, and
    whether more follow; ``None`` when the records do not name the Zarr's current state."""
    store = archive.store_for(embargoed)
    lower, inclusive = wanted.lower
    with archive.db.session() as session:
        state = recorded_state(session, zarr_id, embargoed)
        if state is None:
            return None
        base: Iterator[ObjectEntry] = iter(())
        streamed: Iterator[ManifestEntry] | None = None
        if state.chain.base_checksum is not None:
            key = manifest_key(zarr_id, state.chain.base_checksum)
            head = store.head(key)
            if head is None:
                return None
            parsed = MANIFEST_CACHE.get(store, key, head.etag, state.base_entries)
            if parsed is not None:
                base = parsed.from_key(lower, inclusive)
            else:
                streamed = _stream_entries(store, key)
                base = (
                    ObjectEntry(e.path, _utc(e.last_modified), e.etag, e.size)
                    for e in streamed
                    if (e.path >= lower if inclusive else e.path > lower)
                )
        changes = _changes_from(session, state, lower, inclusive)
        try:
            found: list[ObjectEntry] = []
            for entry in _merged(base, changes):
                if wanted.is_past(entry.key):
                    break
                if wanted.admits(entry.key):
                    found.append(entry)
                    if len(found) > limit:
                        break
        except ZarrchiveError:
            return None  # the manifest went away (or broke) while it was read
        finally:
            changes.close()  # type: ignore[attr-defined]
            if streamed is not None:
                streamed.close()  # type: ignore[attr-defined]
        if _span(session, zarr_id, state.chain) != state.sets:
            return None  # a newer manifest pruned the records while they were read
    page = found[:limit]
    return _with_md5s(store, zarr_id, page), len(found) > limit


def _with_md5s(store: ObjectStore, zarr_id: str, page: list[ObjectEntry]) -> list[ObjectEntry]:
    """*page* with every ETag an md5: one recorded otherwise (an object assembled from
    parts) takes the md5 its directory's node holds (one node per such directory)."""
    odd = [i for i, entry in enumerate(page) if not is_md5(entry.etag)]
    if not odd:
        return page
    fixed = list(page)
    for directory, group in itertools.groupby(odd, key=lambda i: split_path(page[i].key)[0]):
        node = NODE_CACHE.get(store, checksum_node_key(zarr_id, directory))
        for index in group:
            entry = page[index]
            child = node.files.get(split_path(entry.key)[1]) if node is not None else None
            if child is not None:
                fixed[index] = ObjectEntry(entry.key, entry.last_modified, child.digest, entry.size)
    return fixed

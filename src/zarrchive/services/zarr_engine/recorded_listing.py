"""DANDI's flat listing of a Zarr's objects from what the archive records, not from S3.

A Zarr's current objects (key, ``LastModified``, md5, size) are exactly its newest manifest
merged with the changes the apply recorded since (:mod:`zarrchive.services.zarr_engine.manifest_changes`:
the chain the manifest job itself builds on; a chain from the empty checksum needs no
manifest).  A page of ``GET /api/zarr/{id}/files/`` is cut from that merge:

- the changes come from the database, read from the page's first key on, in key order;
- the manifest is read once per version of its file (one ``HEAD`` per page to learn its
  ETag, one ``GET`` when it is not held yet) and held parsed, sorted, in a bounded cache
  (:class:`ManifestCache`); a manifest too large to hold (more than 2 * 10^6 entries) is
  indexed instead, once per version: where every 1,024th entry's line begins
  (:class:`ManifestIndex`, about N/1,024 paths), and a page reads the file from the last
  indexed entry at or before its first key, by ranged ``GET``s (one or two of 256 KiB), so
  its cost does not depend on where in the Zarr it lies (it read the file from its start
  up to the page before: a walk of all the pages was quadratic);
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
import json
import threading
from array import array
from collections import OrderedDict
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from json.decoder import scanstring  # type: ignore[attr-defined]
from typing import IO, Any, cast

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from zarrchive.checksum import is_md5
from zarrchive.db.models import Zarr, ZarrChangedObject, ZarrChangeSet, ZarrManifest
from zarrchive.errors import InvalidManifest, ZarrchiveError
from zarrchive.manifest import (
    ManifestEntry,
    manifest_key,
    parse_timestamp,
    stream_manifest_entries,
)
from zarrchive.manifest.reader import read_streamed_header
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
from zarrchive.storage.protocol import ObjectStoreProtocol

#: The chunks in which a manifest is read from S3.
_READ_CHUNK = 1024 * 1024
#: Rows fetched at a time from the records.
_FETCH = 2_000
#: Every how many entries a :class:`ManifestIndex` notes where an entry's line begins.
INDEX_EVERY = 1_024
#: The first ranged read of a page from a :class:`ManifestIndex` (doubled up to 4 MiB).
RANGE_CHUNK = 256 * 1024


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


class ManifestIndex:
    """Where the lines of a manifest's entries begin, every :data:`INDEX_EVERY`-th entry
    (the archive's line layout: one entry or directory per line), so that a page is read
    from the nearest indexed entry before it, whatever its position in the file.  An entry's
    line lies inside the directories of its path: its byte offset and its path are all a
    reader needs to go on from there."""

    def __init__(self, fields: tuple[str, ...], entries_start: int) -> None:
        self.indices = tuple(fields.index(f) for f in ("versionId", "lastModified", "size", "ETag"))
        self.width = len(fields)
        self.entries_start = entries_start
        self.entries = 0
        self._names = bytearray()
        self._ends = array("q")
        self._offsets = array("q")

    def __len__(self) -> int:
        return len(self._offsets)

    @property
    def nbytes(self) -> int:
        return len(self._names) + 8 * (len(self._ends) + len(self._offsets))

    def add(self, path: str, offset: int) -> None:
        self._names += path.encode("utf-8")
        self._ends.append(len(self._names))
        self._offsets.append(offset)

    def path(self, index: int) -> str:
        start = self._ends[index - 1] if index else 0
        return self._names[start : self._ends[index]].decode("utf-8")

    def start(self, lower: str) -> tuple[int, list[str]]:
        """The byte offset of the line to read from for the entries from *lower* on, and
        the directories that line lies in."""
        found = bisect.bisect_right(range(len(self)), lower, key=self.path) - 1
        if found < 0:
            return self.entries_start, []
        return self._offsets[found], self.path(found).split("/")[:-1]

    def from_key(
        self, store: ObjectStoreProtocol, key: str, lower: str, inclusive: bool
    ) -> Iterator[ObjectEntry]:
        """The entries from *lower* on (*inclusive*: *lower* itself too), in order, read by
        ranged ``GET``s of the manifest from the nearest indexed entry."""
        offset, parts = self.start(lower)
        for path, value in _entry_lines(_ranged_lines(store, key, offset), parts):
            if path < lower or (path == lower and not inclusive):
                continue
            yield self._entry(path, value)

    def _entry(self, path: str, value: str) -> ObjectEntry:
        try:
            fields = json.loads(value)
        except ValueError as exc:
            raise InvalidManifest(f"{path!r}: bad entry {value[:80]!r}") from exc
        if not isinstance(fields, list) or len(fields) != self.width:
            raise InvalidManifest(f"{path!r}: an entry must be an array of {self.width} fields")
        _version, modified, size, etag = (fields[i] for i in self.indices)
        if not isinstance(size, int) or not isinstance(etag, str):
            raise InvalidManifest(f"{path!r}: bad entry {value[:80]!r}")
        return ObjectEntry(path, _utc(parse_timestamp(modified, repr(path))), etag, size)


def _ranged_lines(store: ObjectStoreProtocol, key: str, offset: int) -> Iterator[str]:
    """The lines of *key* from byte *offset* on, read by ranged ``GET``s of
    :data:`RANGE_CHUNK`, each next one twice as large (up to 4 MiB)."""
    size = RANGE_CHUNK
    pending = b""
    while True:
        data = store.get_range(key, offset, size)
        if data is None:
            raise InvalidManifest(f"the manifest {key} is gone")
        offset += len(data)
        pending += data
        *lines, pending = pending.split(b"\n")
        for line in lines:
            yield line.decode("utf-8")
        if len(data) < size:
            break
        size = min(2 * size, 4 * 1024 * 1024)
    if pending:
        yield pending.decode("utf-8")


def _entry_lines(lines: Iterator[str], parts: list[str]) -> Iterator[tuple[str, str]]:
    """``(path, the entry's array as written)`` of each entry line of a manifest in the
    line layout, from a line that lies in the directories *parts*, up to the end of its
    entries.  :class:`InvalidManifest` for a line of another layout (an array over several
    lines: such a file is never indexed)."""
    parts = list(parts)
    prefix = "".join(p + "/" for p in parts)
    for raw in lines:
        line = raw.strip()
        if line in ("}", "},"):
            if not parts:
                return
            parts.pop()
            prefix = "".join(p + "/" for p in parts)
            continue
        if not line.startswith('"'):
            raise InvalidManifest(f"unexpected line in the manifest's entries: {line[:80]!r}")
        try:
            name, end = scanstring(line, 1)
        except ValueError as exc:
            raise InvalidManifest(f"bad key in the manifest's entries: {line[:80]!r}") from exc
        rest = line[end:].lstrip()
        if not rest.startswith(":"):
            raise InvalidManifest(f"expected ':' after the key in {line[:80]!r}")
        value = rest[1:].strip()
        if value.endswith(","):
            value = value[:-1].rstrip()
        if value == "{":
            parts.append(name)
            prefix += name + "/"
        elif value == "{}":
            continue
        elif value.startswith("[") and value.endswith("]"):
            yield prefix + name, value
        else:
            raise InvalidManifest(f"{prefix + name!r}: not one entry a line: {value[:80]!r}")
    raise InvalidManifest("the manifest ends inside its entries: the file is truncated")


class _CountedLines:
    """A binary stream's lines, counting the bytes read (the offset of the next line)."""

    def __init__(self, stream: IO[bytes]) -> None:
        self.stream = stream
        self.offset = 0

    def readline(self, size: int = -1) -> bytes:
        line = self.stream.readline(size)
        self.offset += len(line)
        return line


def _build_index(store: ObjectStoreProtocol, key: str) -> ManifestIndex | None:
    """The index of the manifest at *key* (one streamed read), or ``None`` when it is gone,
    not in the line layout, or not sorted by path."""
    chunks = store.iter_content(key, chunk_size=_READ_CHUNK)
    try:
        lines = _CountedLines(chunk_stream(chunks))
        header = read_streamed_header(cast(IO[bytes], lines))
        if header is None:
            return None
        fields, _statistics, empty = header
        index = ManifestIndex(fields, lines.offset)
        if empty:
            return index

        previous = ""
        offset = lines.offset

        def text() -> Iterator[str]:
            nonlocal offset
            while True:
                offset = lines.offset
                line = lines.readline()
                if not line:
                    return
                yield line.decode("utf-8")

        for path, _value in _entry_lines(text(), []):
            if path <= previous and index.entries:
                return None  # not in key order
            if index.entries % INDEX_EVERY == 0:
                index.add(path, offset)
            index.entries += 1
            previous = path
        return index
    except (ZarrchiveError, UnicodeDecodeError, ValueError):
        return None
    finally:
        chunks.close()  # type: ignore[attr-defined]


class ManifestCache:
    """Parsed manifests by object version (endpoint, bucket, key, ETag), least recently
    used dropped beyond *budget_bytes*; a manifest of more than *largest_entries* is never
    held: its :class:`ManifestIndex` is (each page reads the file from the nearest indexed
    entry).  One load per version at a time."""

    def __init__(
        self, *, budget_bytes: int = 256 * 1024 * 1024, largest_entries: int = 2_000_000
    ) -> None:
        self.budget_bytes = budget_bytes
        self.largest_entries = largest_entries
        self._held: OrderedDict[tuple[str, ...], ParsedEntries | ManifestIndex] = OrderedDict()
        self._used = 0
        self._lock = threading.Lock()
        self._loading: dict[tuple[str, ...], threading.Lock] = {}
        #: Manifests downloaded and parsed whole (for tests and monitoring).
        self.loads = 0
        #: Manifests read through to index them (for tests and monitoring).
        self.indexed = 0

    def get(
        self, store: ObjectStoreProtocol, key: str, etag: str, entries: int
    ) -> ParsedEntries | None:
        """The parsed manifest at *key* in its version *etag* (*entries* long), or ``None``
        when it is too large to hold (see :meth:`index`) or gone, or is not sorted by
        path."""
        if entries > self.largest_entries:
            return None
        found = self._load(("parsed", store.endpoint_url or "", store.bucket, key, etag), store)
        return found if isinstance(found, ParsedEntries) else None

    def index(self, store: ObjectStoreProtocol, key: str, etag: str) -> ManifestIndex | None:
        """The index of the manifest at *key* in its version *etag*, or ``None`` when it is
        gone or not in the line layout sorted by path (stream it)."""
        found = self._load(("index", store.endpoint_url or "", store.bucket, key, etag), store)
        return found if isinstance(found, ManifestIndex) else None

    def _load(
        self, slot: tuple[str, ...], store: ObjectStoreProtocol
    ) -> ParsedEntries | ManifestIndex | None:
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
            key = slot[3]
            loaded: ParsedEntries | ManifestIndex | None
            if slot[0] == "parsed":
                loaded = _parse(store, key, self.largest_entries)
            else:
                loaded = _build_index(store, key)
            with self._lock:
                self._loading.pop(slot, None)
                if loaded is None:
                    return None
                if isinstance(loaded, ParsedEntries):
                    self.loads += 1
                else:
                    self.indexed += 1
                self._held[slot] = loaded
                self._used += loaded.nbytes
                while self._used > self.budget_bytes and len(self._held) > 1:
                    _, dropped = self._held.popitem(last=False)
                    self._used -= dropped.nbytes
            return loaded

    def _lookup(self, slot: tuple[str, ...]) -> ParsedEntries | ManifestIndex | None:
        found = self._held.get(slot)
        if found is not None:
            self._held.move_to_end(slot)
        return found

    def clear(self) -> None:
        with self._lock:
            self._held.clear()
            self._used = 0


def _stream_entries(store: ObjectStoreProtocol, key: str) -> Iterator[ManifestEntry]:
    """The manifest's entries as stored (one GET, closed when the iterator is)."""
    yield from stream_manifest_entries(store.iter_content(key, chunk_size=_READ_CHUNK))


def _parse(store: ObjectStoreProtocol, key: str, largest: int) -> ParsedEntries | None:
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
        streamed: Iterator[Any] | None = None
        indexed: tuple[str, str] | None = None  # the key and ETag read by ranges
        if state.chain.base_checksum is not None:
            key = manifest_key(zarr_id, state.chain.base_checksum)
            head = store.head(key)
            if head is None:
                return None
            parsed = MANIFEST_CACHE.get(store, key, head.etag, state.base_entries)
            index = None if parsed is not None else MANIFEST_CACHE.index(store, key, head.etag)
            if parsed is not None:
                base = parsed.from_key(lower, inclusive)
            elif index is not None:
                base = streamed = index.from_key(store, key, lower, inclusive)
                indexed = (key, head.etag)
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
        if indexed is not None:
            again = store.head(indexed[0])
            if again is None or again.etag != indexed[1]:
                return None  # the manifest was rewritten while its ranges were read
    page = found[:limit]
    return _with_md5s(store, zarr_id, page), len(found) > limit


def _with_md5s(
    store: ObjectStoreProtocol, zarr_id: str, page: list[ObjectEntry]
) -> list[ObjectEntry]:
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

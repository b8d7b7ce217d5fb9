"""Zarr archives: create, look up, describe and browse.

What reads a Zarr's objects in S3 (browsing, listings, URLs) works on a :class:`ZarrRef`,
read in a session and used after it: no database session is held during S3 calls.
"""

from __future__ import annotations

import base64
import bisect
import heapq
import itertools
import json
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import func, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from zarrchive.checksum.node import ChecksumNode, ChildDigest
from zarrchive.db.models import (
    Dandiset,
    Version,
    Zarr,
    ZarrPin,
)
from zarrchive.errors import InvalidInput, InvalidPath, NotFound, ZarrFrozen
from zarrchive.identifiers import canonical_uuid
from zarrchive.paths import split_path, validate_directory_path, validate_path
from zarrchive.services.dandi.dandisets import get_dandiset
from zarrchive.services.identity.auth import Caller, readable_dandisets, require_owner, require_read
from zarrchive.services.runtime import Archive
from zarrchive.services.zarr_engine.node_cache import DIRECTORY, FILE, NODE_CACHE, NodeView
from zarrchive.services.zarr_engine.recorded_listing import KeyRange, ObjectEntry, recorded_page
from zarrchive.storage.keys import checksum_node_key, zarr_object_key, zarr_prefix
from zarrchive.storage.protocol import ObjectStoreProtocol
from zarrchive.wire.zarrs import DirectoryPage, ListingEntry
from zarrchive.wire.zarrs import FileEntry as FileEntry  # the services' file, re-exported

MAX_PAGE_SIZE = 1000


def parse_zarr_id(zarr_id: str) -> str:
    """The canonical form of a Zarr id."""
    canonical = canonical_uuid(zarr_id)
    if canonical is None:
        raise NotFound(f"no Zarr {zarr_id!r}: Zarr ids are UUIDs")
    return canonical


def get_zarr(
    session: Session,
    user: Caller | None,
    zarr_id: str,
    *,
    lock: bool = False,
    check_read: bool = True,
) -> Zarr:
    """The Zarr, if it exists and *user* may read it (an embargoed one: 401 for anonymous
    callers, 404 for strangers, as dandisets); *lock* takes its row lock."""
    query = select(Zarr).where(Zarr.id == parse_zarr_id(zarr_id))
    if lock:
        query = query.with_for_update(of=Zarr)
    zarr = session.scalar(query)
    if zarr is None:
        raise NotFound(f"no Zarr {zarr_id}")
    if check_read:
        require_read(user, zarr.dandiset, f"no Zarr {zarr_id}")
    return zarr


@dataclass(frozen=True)
class ZarrRef:
    """What the S3 side of a Zarr needs of its row: its id, whether its dandiset is
    embargoed (the bucket, and presigned URLs) and when it last changed."""

    id: str
    embargoed: bool
    modified_at: datetime

    @classmethod
    def of(cls, zarr: Zarr) -> ZarrRef:
        return cls(id=zarr.id, embargoed=zarr.dandiset.embargoed, modified_at=zarr.modified_at)


def zarr_ref(archive: Archive, user: Caller | None, zarr_id: str) -> ZarrRef:
    """The Zarr, if it exists and *user* may read it (as :func:`get_zarr`)."""
    with archive.db.session() as session:
        return ZarrRef.of(get_zarr(session, user, zarr_id))


def ensure_writable(session: Session, zarr: Zarr) -> None:
    """Refuse changes to a Zarr that a published version froze (``freeze`` mode; a
    ``snapshot`` pin leaves it writable: see :mod:`zarrchive.services.zarr_engine.snapshots`).

    Call it under the Zarr's row lock: publishing takes the same lock, so a
    write either finishes before the publication or sees it.  A Zarr whose asset is in
    the trash doesn't change either (:func:`zarrchive.services.dandi.trash.refuse_trashed_zarr`).
    """
    from zarrchive.services.dandi.trash import refuse_trashed_zarr

    refuse_trashed_zarr(session, zarr.id)
    published = session.execute(
        select(Version.version, Version.dandiset_id)
        .join(ZarrPin, ZarrPin.version_id == Version.id)
        .where(ZarrPin.zarr_id == zarr.id, ZarrPin.frozen.is_(True))
        .order_by(Version.id)
        .limit(1)
    ).first()
    if published is not None:
        version, dandiset_id = published
        raise ZarrFrozen(
            f"Zarr {zarr.id} belongs to published version {version} of dandiset "
            f"{dandiset_id:06d} and can no longer change: published data is immutable "
            "(create a new Zarr for new data)"
        )


def create_zarr(session: Session, user: Caller | None, name: str, dandiset_id: str) -> Zarr:
    """A new, empty Zarr in *dandiset_id*, owned through the dandiset."""
    dandiset = get_dandiset(session, user, dandiset_id)
    require_owner(user, dandiset)
    name = name.strip()
    if not name or len(name) > 512:
        raise InvalidInput("a Zarr name must have 1 to 512 characters")
    existing = session.scalar(
        select(Zarr.id).where(Zarr.dandiset_id == dandiset.id, Zarr.name == name)
    )
    if existing is not None:  # DANDI's words: dandi-cli looks for them to reuse the Zarr
        raise InvalidInput(
            f"Zarr already exists: dandiset {dandiset.identifier} already has a Zarr named "
            f"{name!r} ({existing})"
        )
    zarr = Zarr(id=str(uuid.uuid4()), name=name, dandiset=dandiset, dandiset_id=dandiset.id)
    session.add(zarr)
    try:
        session.flush()
    except IntegrityError as exc:
        raise InvalidInput(
            f"Zarr already exists: dandiset {dandiset.identifier} already has a Zarr named {name!r}"
        ) from exc
    return zarr


def list_zarrs(
    session: Session,
    user: Caller | None,
    *,
    dandiset_id: str | None = None,
    name: str | None = None,
    limit: int = 100,
    offset: int = 0,
) -> tuple[list[Zarr], int]:
    """A page of the Zarrs visible to *user* (optionally of one dandiset and/or with one
    name), oldest first as DANDI orders them, and how many there are in all."""
    query = (
        select(Zarr).join(Dandiset, Zarr.dandiset_id == Dandiset.id).where(readable_dandisets(user))
    )
    if dandiset_id is not None:
        query = query.where(Zarr.dandiset_id == get_dandiset(session, user, dandiset_id).id)
    if name is not None:
        query = query.where(Zarr.name == name)
    count = session.scalar(select(func.count()).select_from(query.subquery())) or 0
    rows = session.scalars(query.order_by(Zarr.created_at, Zarr.id).offset(offset).limit(limit))
    return list(rows), count


# -- browsing -------------------------------------------------------------------
#: A page of a directory's listing: the wire type the API answers and the client reads
#: (:class:`~zarrchive.wire.zarrs.DirectoryPage`), under the name the services use.
DirectoryListing = DirectoryPage


def _encode_cursor(kind: int, name: str) -> str:
    raw = json.dumps([kind, name]).encode("utf-8")
    return base64.urlsafe_b64encode(raw).decode("ascii").rstrip("=")


#: A cursor holds one entry name (at most 255 bytes, JSON-escaped and base64-encoded).
MAX_CURSOR_LENGTH = 4096


def _decode_cursor(cursor: str) -> tuple[int, str]:
    """The ``(kind, name)`` a cursor stands for; anything else (garbage, deep nesting, huge
    strings) is the caller's mistake, refused before it is parsed."""
    refused = InvalidInput(f"{cursor[:60]!r} is not a cursor this server gave out")
    if len(cursor) > MAX_CURSOR_LENGTH:
        raise refused
    try:
        padded = cursor + "=" * (-len(cursor) % 4)
        kind, name = json.loads(base64.urlsafe_b64decode(padded))
        if kind not in (0, 1) or not isinstance(name, str):
            raise ValueError
        return int(kind), name
    except (ValueError, TypeError, RecursionError):
        raise refused from None


def browse(
    archive: Archive, zarr: ZarrRef, path: str, *, page_size: int = 100, cursor: str | None = None
) -> FileEntry | DirectoryListing:
    """A file's details, or a page of a directory's listing (from the ``.checksum`` nodes).

    A path ending in ``/`` (or empty) is a directory; otherwise a file if there is one.
    """
    is_directory_path = path == "" or path.endswith("/")
    directory = validate_directory_path(path)
    if directory and not is_directory_path:
        store = archive.store_for(zarr.embargoed)
        parent, name = split_path(directory)
        parent_node = NODE_CACHE.get(store, checksum_node_key(zarr.id, parent))
        child = parent_node.files.get(name) if parent_node is not None else None
        if child is not None:
            key = zarr_object_key(zarr.id, directory)
            return FileEntry(name, directory, child.size, child.digest, key, store.public_url(key))
    return list_directory(archive, zarr, directory, page_size=page_size, cursor=cursor)


def list_directory(
    archive: Archive, zarr: ZarrRef, path: str, *, page_size: int = 100, cursor: str | None = None
) -> DirectoryListing:
    """A page of a directory's listing (``""``: the root), from the cached parsed node:
    memory and time per page are bounded whatever the directory's width."""
    if not 1 <= page_size <= MAX_PAGE_SIZE:
        raise InvalidInput(f"page_size must be between 1 and {MAX_PAGE_SIZE}")
    directory = validate_directory_path(path)
    after = _decode_cursor(cursor) if cursor else None
    node = NODE_CACHE.get(archive.store_for(zarr.embargoed), checksum_node_key(zarr.id, directory))
    if node is None:
        if directory == "":
            node = NodeView.empty()
        else:
            raise NotFound(f"Zarr {zarr.id} has no file or directory {directory!r}")
    return directory_page(directory, node, after, page_size)


def checksum_node(archive: Archive, zarr: ZarrRef, path: str) -> Iterator[bytes]:
    """The ``.checksum`` node of the directory *path* (``""``: the root) exactly as the archive
    stores and hashes it: every child's name, digest and size in one answer, whatever the
    directory's width (its digest is the md5 of the ``checksums`` bytes).  Streamed from S3 in
    chunks, never parsed nor held whole here.  :class:`NotFound` for a directory the Zarr
    does not have (the root always has one: empty)."""
    directory = validate_directory_path(path)
    store = archive.store_for(zarr.embargoed)
    key = checksum_node_key(zarr.id, directory)
    if store.head(key) is None:
        if directory == "":
            return iter([ChecksumNode().to_json()])
        raise NotFound(f"Zarr {zarr.id} has no directory {directory!r}")
    # a node rewritten meanwhile is read whole in its new version (S3 PUTs are atomic); one
    # removed meanwhile (its directory deleted) breaks the answer off, and the client retries
    return store.iter_content(key)


def directory_page(
    directory: str, node: NodeView, after: tuple[int, str] | None, page_size: int
) -> DirectoryListing:
    """The page of *directory* (whose node is *node*) after the cursor *after*."""
    rows, more = node.page(after, page_size)
    prefix = f"{directory}/" if directory else ""

    def entries(kind: int) -> list[ListingEntry]:
        return [ListingEntry(n, prefix + n, c.digest, c.size) for k, n, c in rows if k == kind]

    return DirectoryListing(
        path=directory,
        digest=node.digest,
        file_count=node.count,
        size=node.size,
        directories=entries(DIRECTORY),
        files=entries(FILE),
        next=_encode_cursor(rows[-1][0], rows[-1][1]) if more and rows else None,
    )


@dataclass(frozen=True)
class DownloadLink:
    """Where to read a file: *url* to GET it and, when that URL is presigned (an embargoed
    Zarr), *head_url* to HEAD the same object (S3 refuses a HEAD of a URL presigned for
    GET).  *head_url* signs ``x-amz-checksum-mode: ENABLED``: the client sends that header
    and S3 answers the object's checksum (``x-amz-checksum-crc32``, ``-type``) and its
    ``x-amz-meta-zarrchive-md5``.  ``None`` when *url* is a plain public URL, which
    answers an anonymous HEAD (with that header, too) itself."""

    path: str
    url: str
    head_url: str | None = None


def download_urls(archive: Archive, zarr: ZarrRef, paths: list[str]) -> list[tuple[str, str]]:
    """``(path, url)`` to GET each file: public URLs, presigned ones when embargoed."""
    return [(link.path, link.url) for link in download_links(archive, zarr, paths)]


def download_links(archive: Archive, zarr: ZarrRef, paths: list[str]) -> list[DownloadLink]:
    """A :class:`DownloadLink` of each file: public URLs, presigned ones (GET and HEAD)
    when embargoed.

    The caller has checked that the user may read the Zarr; the paths are not looked
    up (S3 answers 404 for a file that does not exist).
    """
    if not paths:
        raise InvalidInput("give at least one path")
    limit = archive.settings.max_batch_files
    if len(paths) > limit:
        raise InvalidInput(f"{len(paths)} paths: at most {limit} per request")
    store = archive.store_for(zarr.embargoed)
    checked = [validate_path(p) for p in paths]
    keys = [(p, zarr_object_key(zarr.id, p)) for p in checked]
    if zarr.embargoed:
        expiry = archive.settings.presign_expiry
        return [
            DownloadLink(
                p,
                store.presign_get(k, expiry),
                store.presign_head(k, expiry, checksum_mode=True),
            )
            for p, k in keys
        ]
    return [DownloadLink(p, store.public_url(k)) for p, k in keys]


# -- DANDI's flat listing of objects ---------------------------------------------------
#: DANDI's largest (and default) ``limit`` of ``GET /api/zarr/{id}/files/``.
MAX_OBJECT_PAGE = 1000


def _key_fragment(value: str, what: str) -> str:
    """A key prefix (or a key to start after) relative to the Zarr's root: any beginning of
    a valid path (``arr/``, ``arr/0``, ``arr/.z``); a leading ``/`` is dropped as DANDI does."""
    value = value.lstrip("/")
    if value:
        try:
            validate_path(value + "x")  # what follows may complete it into a valid path
        except InvalidPath as exc:
            raise InvalidPath(f"{what} {value!r} can't begin any path: {exc.message}") from None
    return value


def list_objects(
    archive: Archive, zarr: ZarrRef, *, prefix: str = "", after: str = "", limit: int = 1000
) -> tuple[list[ObjectEntry], bool]:
    """DANDI's flat listing: the Zarr's files whose paths begin with *prefix* and sort after
    *after*, in key order (UTF-8 bytes, as AWS S3 lists keys), at most *limit*; and whether
    more follow.

    From what the archive records when the records name the Zarr's current state (its
    manifest and the changes applied since: :mod:`zarrchive.services.zarr_engine.recorded_listing`; a
    bounded number of S3 requests whatever the number of directories).  Else (a Zarr older
    than the records and without a manifest) the keys, md5s and sizes come from a walk of
    the ``.checksum`` nodes in key order, starting at *prefix*'s directory (so the order
    never depends on the S3 server's own, which for SeaweedFS is not byte order), and
    ``LastModified`` from one S3 listing of each directory the page touches
    (``Delimiter="/"``), stopped once the page's files are seen.
    """
    if not 0 <= limit <= MAX_OBJECT_PAGE:
        raise InvalidInput(f"limit must be between 0 and {MAX_OBJECT_PAGE}")
    prefix = _key_fragment(prefix, "prefix")
    after = _key_fragment(after, "after")
    if limit == 0:
        return [], False
    recorded = recorded_page(archive, zarr.id, zarr.embargoed, KeyRange(prefix, after), limit)
    if recorded is not None:
        return recorded
    return walked_objects(archive, zarr, prefix=prefix, after=after, limit=limit)


def walked_objects(
    archive: Archive, zarr: ZarrRef, *, prefix: str, after: str, limit: int
) -> tuple[list[ObjectEntry], bool]:
    """:func:`list_objects` from the ``.checksum`` nodes and S3 listings (checked
    *prefix* and *after*, *limit* at least 1): one node and one listing per directory."""
    store = archive.store_for(zarr.embargoed)
    start, _, name_prefix = prefix.rpartition("/")
    within = start + "/" if start else ""
    after_rel: str | None
    if not after or after < within:
        after_rel = None
    elif after.startswith(within):
        after_rel = after[len(within) :]
    else:
        return [], False  # every key under the prefix sorts before *after*
    found = list(itertools.islice(_walk(store, zarr.id, start, name_prefix, after_rel), limit + 1))
    page = found[:limit]
    modified = _last_modified(store, zarr, [path for path, _ in page])
    entries = [
        ObjectEntry(path, modified.get(path, zarr.modified_at), child.digest, child.size)
        for path, child in page
    ]
    return entries, len(found) > limit


def walk_files(store: ObjectStoreProtocol, zarr_id: str) -> Iterator[tuple[str, ChildDigest]]:
    """Every file of the Zarr's live state in key order, ``(path, child)``, from its
    ``.checksum`` nodes (memory bounded by the depth and the largest node)."""
    return _walk(store, zarr_id, "", "", None)


def _walk(
    store: ObjectStoreProtocol, zarr_id: str, directory: str, name_prefix: str, after: str | None
) -> Iterator[tuple[str, ChildDigest]]:
    """The files below *directory* in key order: ``(path, child)``, only those whose path
    relative to *directory* begins with *name_prefix* (no ``/`` in it) and sorts after
    *after* (relative to *directory* too).  A subdirectory ``d`` sorts as ``d/``: its
    keys are contiguous and ``d/`` orders it among its siblings (``a-b`` < ``a/`` < ``a0``)."""
    node = NODE_CACHE.get(store, checksum_node_key(zarr_id, directory))
    if node is None:
        return
    base = directory + "/" if directory else ""
    names = node.file_names
    first = bisect.bisect_left(names, name_prefix)
    if after is not None:
        first = max(first, bisect.bisect_right(names, after))
    files = (
        (name, False)
        for name in itertools.takewhile(
            lambda n: n.startswith(name_prefix), itertools.islice(names, first, None)
        )
    )
    directories = sorted(
        (key, True)
        for key in (d + "/" for d in node.directory_names)
        if key.startswith(name_prefix) and (after is None or key > after or after.startswith(key))
    )
    for key, is_directory in heapq.merge(files, directories):
        if not is_directory:
            yield base + key, node.files[key]
            continue
        inner = after[len(key) :] if after is not None and after.startswith(key) else None
        yield from _walk(store, zarr_id, base + key[:-1], "", inner)


def _last_modified(
    store: ObjectStoreProtocol, zarr: ZarrRef, paths: list[str]
) -> dict[str, datetime]:
    """When S3 last wrote each of *paths* (one listing per directory, from the file before
    the first one needed when names are ASCII, where every S3 orders keys by bytes)."""
    by_directory: dict[str, set[str]] = {}
    for path in paths:
        directory, name = split_path(path)
        by_directory.setdefault(directory, set()).add(name)
    result: dict[str, datetime] = {}
    for directory, needed in by_directory.items():
        prefix = zarr_object_key(zarr.id, directory + "/") if directory else zarr_prefix(zarr.id)
        start_after = ""
        node = NODE_CACHE.get(store, checksum_node_key(zarr.id, directory))
        first = min(needed)
        if node is not None and first.isascii():
            index = bisect.bisect_left(node.file_names, first)
            if index > 0 and node.file_names[index - 1].isascii():
                start_after = prefix + node.file_names[index - 1]
        missing = set(needed)
        # from the start again if the S3's order skipped some (SeaweedFS's is not byte order
        # for every name); what is still missing (being applied) keeps the Zarr's time
        for start in dict.fromkeys((start_after, "")):
            for info in store.iter_directory(prefix, start_after=start):
                name = info.key[len(prefix) :]
                if name in missing:
                    result[f"{directory}/{name}" if directory else name] = info.last_modified
                    missing.discard(name)
                    if not missing:
                        break
            if not missing:
                break
    return result


def object_url(archive: Archive, zarr: ZarrRef, path: str, *, method: str = "GET") -> str:
    """Where to GET (or HEAD) the Zarr's file *path*: its public URL, or a presigned one
    for an embargoed Zarr; :class:`NotFound` if the Zarr has no such file."""
    path = validate_path(path.lstrip("/"))
    store = archive.store_for(zarr.embargoed)
    parent, name = split_path(path)
    node = NODE_CACHE.get(store, checksum_node_key(zarr.id, parent))
    if node is None or node.files.get(name) is None:
        raise NotFound(f"Zarr {zarr.id} has no file {path!r}")
    key = zarr_object_key(zarr.id, path)
    if not zarr.embargoed:
        return store.public_url(key)
    expiry = archive.settings.presign_expiry
    return store.presign_head(key, expiry) if method == "HEAD" else store.presign_get(key, expiry)

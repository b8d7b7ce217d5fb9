"""Pinned views: one published state of a Zarr, served as a read-only Zarr of its own id.

An asset of dandiset B that reads a published snapshot of dandiset A's Zarr
(:mod:`~zarrchive.services.zarr_engine.shared_zarrs`, ``snapshot`` mode) must look like B's
own Zarr to every client, dandi-cli included, which knows a Zarr by its id alone
(``GET /api/zarr/{id}/files/``, then ``?download=true`` per file).  A's id would give A's
*live* Zarr; so B's asset names the **pinned view** of the state instead:

- its id is :func:`~zarrchive.db.models.pinned_view_id` of (Zarr, checksum): a UUID of
  version 5 (a Zarr's id is of version 4), the same for every pin of that state, stored on
  each pin (``zarr_pins.view_id``), where :func:`find_view` looks it up;
- ``/api/zarr/{view_id}/...`` (:mod:`zarrchive.api.routers.pinned_views`) answers the Zarr's
  read routes from the state's manifest (:mod:`~zarrchive.services.zarr_engine.snapshots`):
  info, DANDI's flat listing, ``.checksum`` nodes, directory pages, reference file; every
  file's URL is its pinned S3 version (presigned for an embargoed Zarr); every write is
  refused (:func:`refuse_write`, 409) and changes nothing;
- whoever may read the Zarr may read its views (an embargoed Zarr's: 401/404 to others, as
  its own routes): the view shows nothing the snapshot routes don't.

Nothing is stored per view but the pin's column: a view lives as long as a pin holds its
state, and pins (with their manifests and object versions) are never dropped.
"""

from __future__ import annotations

import bisect
import threading
from collections import OrderedDict
from collections.abc import Collection
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from zarrchive.checksum.digest import ZarrDigest
from zarrchive.checksum.node import ChecksumNode
from zarrchive.db.models import Asset, Version, ZarrPin, pinned_view_id
from zarrchive.errors import Conflict, InvalidInput, InvalidPath, NotFound
from zarrchive.identifiers import canonical_uuid
from zarrchive.paths import split_path, validate_directory_path, validate_path
from zarrchive.services.identity.auth import Caller, require_read
from zarrchive.services.runtime import Archive
from zarrchive.services.zarr_engine import snapshots
from zarrchive.services.zarr_engine.manifests import manifest_url
from zarrchive.services.zarr_engine.recorded_listing import ObjectEntry
from zarrchive.services.zarr_engine.zarrs import MAX_OBJECT_PAGE, ZarrRef, get_zarr
from zarrchive.storage.keys import zarr_object_key, zarr_prefix
from zarrchive.storage.objects import ObjectInfo

__all__ = [
    "PinnedView",
    "find_view",
    "object_head",
    "pinned_view_id",
    "published_views",
    "refuse_write",
    "view_of",
]


@dataclass(frozen=True)
class PinnedView:
    """A pinned state of a Zarr as a read-only Zarr of its own id."""

    view_id: str
    #: the Zarr whose state it is (its S3 side)
    zarr: ZarrRef
    pin: snapshots.Pin
    #: the Zarr's name and its dandiset's identifier
    name: str
    dandiset: str
    #: when the state was first pinned
    pinned_at: datetime

    @property
    def checksum(self) -> str:
        return self.pin.checksum

    @property
    def file_count(self) -> int:
        return ZarrDigest.totals(self.pin.checksum)[0]

    @property
    def size(self) -> int:
        return ZarrDigest.totals(self.pin.checksum)[1]


def view_of(archive: Archive, view_id: str) -> tuple[str, str] | None:
    """``(zarr_id, checksum)`` of the state the view *view_id* shows, or ``None`` (no such
    view).  No permission is checked: the caller checks the Zarr."""
    canonical = canonical_uuid(view_id)
    if canonical is None:
        return None
    with archive.db.session() as session:
        row = session.execute(
            select(ZarrPin.zarr_id, ZarrPin.checksum).where(ZarrPin.view_id == canonical).limit(1)
        ).first()
    return None if row is None else (str(row[0]), str(row[1]))


#: How many asset ids one query of :func:`published_views` takes.
_IDS_PER_QUERY = 500


def published_views(session: Session, asset_ids: Collection[str]) -> dict[str, str]:
    """Asset id -> the pinned view its published version reads, for the *published* Zarr
    assets among *asset_ids* whose version pins their Zarr as a snapshot (``snapshot``
    mode: the Zarr stays writable, so its own id would read the draft's live state).  A
    draft asset, a blob, and a Zarr its version froze (its live state is the pinned one)
    have none.  One query per :data:`_IDS_PER_QUERY` ids."""
    wanted = sorted(set(asset_ids))
    views: dict[str, str] = {}
    for start in range(0, len(wanted), _IDS_PER_QUERY):
        rows = session.execute(
            select(Asset.id, ZarrPin.zarr_id, ZarrPin.checksum)
            .join(Version, Version.id == Asset.version_id)
            .join(
                ZarrPin,
                (ZarrPin.version_id == Asset.version_id) & (ZarrPin.zarr_id == Asset.zarr_id),
            )
            .where(
                Asset.id.in_(wanted[start : start + _IDS_PER_QUERY]),
                Version.version != "draft",
                ZarrPin.frozen.is_(False),
            )
        )
        views.update((str(a), pinned_view_id(str(z), str(c))) for a, z, c in rows)
    return views


def find_view(archive: Archive, user: Caller | None, view_id: str) -> PinnedView:
    """The view *view_id*, if *user* may read its Zarr (else as the Zarr's own routes: 401
    anonymous, 404 naming the view, revealing nothing of the Zarr)."""
    missing = f"no Zarr {view_id}"
    canonical = canonical_uuid(view_id)
    if canonical is None:
        raise NotFound(f"{missing}: Zarr ids are UUIDs")
    with archive.db.session() as session:
        row = session.execute(
            select(ZarrPin.zarr_id, ZarrPin.checksum, func.min(ZarrPin.created_at))
            .where(ZarrPin.view_id == canonical)
            .group_by(ZarrPin.zarr_id, ZarrPin.checksum)
            .limit(1)
        ).first()
        if row is None:
            raise NotFound(missing)
        zarr_id, checksum, pinned_at = str(row[0]), str(row[1]), row[2]
        zarr = get_zarr(session, None, zarr_id, check_read=False)
        require_read(user, zarr.dandiset, missing)
        pin = snapshots.find_pin(session, zarr, checksum)
        return PinnedView(
            canonical,
            ZarrRef.of(zarr),
            pin,
            zarr.name,
            zarr.dandiset.identifier,
            pinned_at,
        )


def refuse_write(view: PinnedView) -> Conflict:
    """The refusal of any change through the view (409): it never changes."""
    return Conflict(
        f"Zarr {view.view_id} is read-only: it is the published state {view.checksum} of Zarr "
        f"{view.zarr.id} of dandiset {view.dandiset}, which never changes (upload to a Zarr "
        "of your own dandiset instead)"
    )


def the_manifest_url(archive: Archive, view: PinnedView) -> str:
    """The URL of the manifest of the view's state (written first if a frozen pin has none
    yet): every file with its pinned S3 version."""
    snapshots.ensure_manifest(archive, view.zarr, view.pin)
    return manifest_url(archive, view.zarr, view.checksum)


def _index(archive: Archive, view: PinnedView) -> snapshots.SnapshotIndex:
    return snapshots.snapshot_index(archive, view.zarr, view.pin)


def _url(archive: Archive, view: PinnedView, path: str, version_id: str) -> str:
    """The URL of exactly the pinned version (plain, or presigned for GET when embargoed:
    S3 answers no HEAD on it, never another version's headers)."""
    return snapshots.version_url(
        archive, view.zarr, zarr_object_key(view.zarr.id, path), version_id
    )


def object_url(
    archive: Archive,
    view: PinnedView,
    path: str,
    *,
    version_id: str | None = None,
) -> str:
    """The URL of the pinned version of the file *path* (presigned when embargoed);
    :class:`NotFound` for any path that is no file of the state (a malformed one too, and
    any *version_id* but the pinned one)."""
    path, pinned = _pinned_version(archive, view, path, version_id)
    return _url(archive, view, path, pinned)


def _pinned_version(
    archive: Archive, view: PinnedView, path: str, version_id: str | None
) -> tuple[str, str]:
    """``(path, pinned S3 version)`` of the file *path* of the state (:class:`NotFound` as
    :func:`object_url`)."""
    try:
        path = validate_path(path.lstrip("/"))
    except InvalidPath:
        raise NotFound(f"Zarr {view.view_id} has no file {path!r}") from None
    pinned = _index(archive, view).versions.get(path)
    if pinned is None or (version_id is not None and version_id != pinned):
        raise NotFound(f"Zarr {view.view_id} has no file {path!r}")
    return path, pinned


def object_head(
    archive: Archive, view: PinnedView, path: str, *, version_id: str | None = None
) -> ObjectInfo:
    """What S3 says of the pinned version of the file *path* (size, ETag, LastModified):
    the answer to a HEAD through an embargoed view, whose URLs are presigned for GET (S3
    refuses them a HEAD).  :class:`NotFound` as :func:`object_url`."""
    path, pinned = _pinned_version(archive, view, path, version_id)
    store = archive.store_for(view.zarr.embargoed)
    found = store.head(zarr_object_key(view.zarr.id, path), pinned)
    if found is None:  # (pins keep their versions: never, unless the bucket lost it)
        raise NotFound(f"Zarr {view.view_id}: the pinned version of {path!r} is missing")
    return found


def download_links(
    archive: Archive, view: PinnedView, paths: list[str]
) -> list[snapshots.SnapshotLink]:
    """Where to read each file, at its pinned version (404 naming paths that are no files
    of the state); through an embargoed view, presigned (GET and HEAD: see
    :class:`~zarrchive.services.zarr_engine.zarrs.DownloadLink`)."""
    return snapshots.snapshot_download_links(archive, view.zarr, view.pin, paths)


def checksum_node(archive: Archive, view: PinnedView, path: str) -> bytes:
    """The ``.checksum`` node of the directory *path* of the state, exactly as the archive
    stored it then (its bytes hash to the directory's digest)."""
    directory = validate_directory_path(path)
    node = _index(archive, view).nodes.get(directory)
    if node is None:
        if directory == "":
            return ChecksumNode().to_json()
        raise NotFound(f"Zarr {view.view_id} has no directory {directory!r}")
    return ChecksumNode(files=node.files, directories=node.directories).to_json()


# -- DANDI's flat listing ----------------------------------------------------------------------
class _KeyCache:
    """Every file's path of a few states, in key order (UTF-8 bytes), for the flat listing's
    bisections (a state never changes, so an entry never goes stale)."""

    def __init__(self, entries: int = 8) -> None:
        self.entries = entries
        self._keys: OrderedDict[tuple[str, str], list[bytes]] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, view: PinnedView, index: snapshots.SnapshotIndex) -> list[bytes]:
        key = (view.zarr.id, view.checksum)
        with self._lock:
            found = self._keys.get(key)
            if found is not None:
                self._keys.move_to_end(key)
                return found
        keys = sorted(path.encode("utf-8") for path in index.versions)
        with self._lock:
            self._keys[key] = keys
            while len(self._keys) > self.entries:
                self._keys.popitem(last=False)
        return keys


_KEYS = _KeyCache()


def list_objects(
    archive: Archive, view: PinnedView, *, prefix: str = "", after: str = "", limit: int = 1000
) -> tuple[list[ObjectEntry], bool]:
    """DANDI's flat listing of the state (as the live
    :func:`~zarrchive.services.zarr_engine.zarrs.list_objects`): its files whose paths begin
    with *prefix* and sort after *after*, in key order, at most *limit*; and whether more
    follow.  ``LastModified`` is when the state was first pinned."""
    if not 0 <= limit <= MAX_OBJECT_PAGE:
        raise InvalidInput(f"limit must be between 0 and {MAX_OBJECT_PAGE}")
    prefix, after = prefix.lstrip("/"), after.lstrip("/")
    if limit == 0:
        return [], False
    index = _index(archive, view)
    keys = _KEYS.get(view, index)
    wanted = prefix.encode("utf-8")
    start = bisect.bisect_left(keys, wanted)
    if after:
        start = max(start, bisect.bisect_right(keys, after.encode("utf-8")))
    entries: list[ObjectEntry] = []
    position = start
    while position < len(keys) and len(entries) < limit and keys[position].startswith(wanted):
        path = keys[position].decode("utf-8")
        parent, name = split_path(path)
        child = index.nodes[parent].files[name]
        entries.append(ObjectEntry(path, view.pinned_at, child.digest, child.size))
        position += 1
    more = position < len(keys) and keys[position].startswith(wanted)
    return entries, more


def s3_path(view: PinnedView) -> str:
    """Where the state's objects are (the Zarr's prefix: each at its pinned version)."""
    return zarr_prefix(view.zarr.id)

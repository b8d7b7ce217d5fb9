"""Change records: what each applied batch wrote and deleted, so that the manifest of a
Zarr's new checksum is the previous manifest merged with the changes since (no listing).

The apply step calls :func:`record_applied_changes` inside the transaction that stores the
Zarr's new root: the records are durable exactly when the tree update is.  The manifest job
(:mod:`zarrchive.services.zarr_engine.manifests`) asks :func:`resolve_chain` for the newest change set
whose state has a manifest and the sets after it; their checksums must chain (each set's
``checksum_before`` is the ``checksum_after`` of the one before, the last one's is the
Zarr's checksum) and their bucket must be the Zarr's, else there is no chain and the job
lists S3 as before (an old Zarr, records pruned or missing, an unembargo).  A chain that
starts from the empty checksum needs no manifest (the empty Zarr's is empty).

Once a manifest is written for a set's state, the sets before it are pruned: the table
holds the changes since each Zarr's newest manifest, no more.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import delete, func, insert, select, update
from sqlalchemy.orm import Session

from zarrchive.checksum import EMPTY_CHECKSUM
from zarrchive.db.models import Zarr, ZarrChangedObject, ZarrChangeSet, ZarrManifest
from zarrchive.errors import StorageError
from zarrchive.manifest import ManifestChange, ManifestEntry
from zarrchive.storage.objects import WrittenVersion

#: How many change sets a chain may span before the job lists S3 instead.
MAX_CHAIN_SETS = 10_000
#: Rows fetched at a time when streaming the changes.
_FETCH = 5_000


@dataclass(frozen=True, slots=True)
class WrittenObject:
    """One object the apply copied into place, as the copy answered."""

    path: str
    version_id: str
    last_modified: datetime
    size: int
    etag: str

    @classmethod
    def from_written(
        cls, path: str, written: WrittenVersion, size: int, etag: str | None = None
    ) -> WrittenObject | None:
        """From what the store answered of the version it wrote
        (:meth:`~zarrchive.storage.objects.ObjectStore.copy_within`, or a completed upload
        with its LastModified read back), the verified *size* and the *etag* a listing
        shows for it (default the answer's: an object assembled from parts shows the md5
        the archive verified, :func:`~zarrchive.services.zarr_engine.manifests.current_entries`).
        ``None`` when the answer lacks its version id or LastModified (an unversioned
        bucket): the batch is then not recorded and the next manifest is listed."""
        if written.version_id is None or written.last_modified is None:
            return None
        return cls(path, written.version_id, written.last_modified, size, etag or written.etag)


def record_applied_changes(
    session: Session,
    zarr_id: str,
    *,
    seq: int,
    checksum_before: str,
    checksum_after: str,
    written: Iterable[WrittenObject],
    deleted: Iterable[str],
) -> None:
    """Record what one applied batch did to the Zarr, for the manifest of *checksum_after*.

    Where the apply calls it: in the write transaction that stores the batch's new root
    (after ``apply_changes`` and before the commit that deletes the batch row), with the
    Zarr's row locked, once per applied batch (``seq`` is the batch's).  *checksum_before*
    is the Zarr's checksum before this batch, *checksum_after* the one it stores.

    *written*: every object the batch copied into place, each from the answer of the copy
    this applier made (:meth:`WrittenObject.from_written`: version id, LastModified and
    ETag, and the verified size); an applier that took over a crashed one's batch copies
    again and records its own answers.  *deleted*: every path a deletion batch removed,
    each once, consumed as a stream (inserted :data:`_FETCH` at a time: a directory delete
    may name 10^5 paths).  The delete markers S3 makes are not recorded (a manifest lists
    no delete marker; a deleted path is simply not in it); a deletion of a path that was
    not there is harmless (the merge drops nothing).  A path both written and deleted
    counts as written.  Nothing S3 is touched here.
    """
    zarr = session.get(Zarr, zarr_id)
    if zarr is None:
        raise StorageError(f"Zarr {zarr_id} is gone: its changes cannot be recorded")
    change_set = ZarrChangeSet(
        zarr_id=zarr_id,
        seq=seq,
        checksum_before=checksum_before,
        checksum_after=checksum_after,
        embargoed=zarr.dandiset.embargoed,
        manifest_written=False,
    )
    session.add(change_set)
    session.flush()
    set_id = change_set.id
    rows: dict[str, dict[str, Any]] = {
        obj.path: {
            "change_set_id": set_id,
            "path": obj.path,
            "version_id": obj.version_id,
            "last_modified": obj.last_modified,
            "size": obj.size,
            "etag": obj.etag,
        }
        for obj in written
    }
    values = list(rows.values())
    for start in range(0, len(values), _FETCH):
        session.execute(insert(ZarrChangedObject), values[start : start + _FETCH])
    chunk: list[dict[str, Any]] = []
    for path in deleted:
        if path in rows:
            continue
        chunk.append(
            {
                "change_set_id": set_id,
                "path": path,
                "version_id": None,
                "last_modified": None,
                "size": None,
                "etag": None,
            }
        )
        if len(chunk) == _FETCH:
            session.execute(insert(ZarrChangedObject), chunk)
            chunk = []
    if chunk:
        session.execute(insert(ZarrChangedObject), chunk)


def newest_change_set_id(session: Session, zarr_id: str) -> int | None:
    """The id of the Zarr's newest change set (``None`` without any)."""
    value = session.scalar(
        select(func.max(ZarrChangeSet.id)).where(ZarrChangeSet.zarr_id == zarr_id)
    )
    return None if value is None else int(value)


@dataclass(frozen=True, slots=True)
class ChangeChain:
    """How to build the manifest of the Zarr's checksum from records.

    ``base_checksum`` names the manifest to start from (``None``: the empty Zarr, no
    manifest); the changes are those of the sets with ``after_id < id <= last_id``."""

    base_checksum: str | None
    after_id: int
    last_id: int


def resolve_chain(
    session: Session, zarr_id: str, checksum: str, embargoed: bool, last_id: int | None
) -> ChangeChain | None:
    """The chain from the newest state with a manifest to *checksum* (the state after set
    *last_id*), or ``None`` when the records do not reach one (list S3 instead)."""
    if last_id is None:
        return None
    sets = session.execute(
        select(
            ZarrChangeSet.id,
            ZarrChangeSet.seq,
            ZarrChangeSet.checksum_before,
            ZarrChangeSet.checksum_after,
            ZarrChangeSet.embargoed,
            ZarrChangeSet.manifest_written,
        )
        .where(ZarrChangeSet.zarr_id == zarr_id, ZarrChangeSet.id <= last_id)
        .order_by(ZarrChangeSet.id.desc())
        .limit(MAX_CHAIN_SETS + 1)
    )
    expect = checksum
    for set_id, seq, before, after, set_embargoed, written in sets:
        if after != expect or set_embargoed != embargoed:
            return None
        if written:
            if set_id == last_id or not _has_good_manifest(session, zarr_id, after):
                return None
            return ChangeChain(after, set_id, last_id)
        if seq is None:
            return None  # a rest mark without its manifest
        if before == EMPTY_CHECKSUM:
            return ChangeChain(None, set_id - 1, last_id)
        expect = before
    return None


def resting_chain(
    session: Session, zarr_id: str, checksum: str, embargoed: bool, last_id: int | None
) -> ChangeChain | None:
    """The chain of no change from the manifest of *checksum* itself, when the Zarr's
    newest set (*last_id*) is marked as the state that manifest names: nothing was applied
    since it was written, so the file still names the current versions even if its row is
    gone (publication drops the row of a manifest older than the Zarr's last change, e.g.
    after a cancelled batch, to have it made again).  ``None`` otherwise."""
    if last_id is None:
        return None
    row = session.get(ZarrChangeSet, last_id)
    if (
        row is None
        or not row.manifest_written
        or row.checksum_after != checksum
        or row.embargoed != embargoed
    ):
        return None
    return ChangeChain(checksum, last_id, last_id)


def _has_good_manifest(session: Session, zarr_id: str, checksum: str) -> bool:
    listing = session.scalar(
        select(ZarrManifest.listing_checksum).where(
            ZarrManifest.zarr_id == zarr_id, ZarrManifest.checksum == checksum
        )
    )
    return listing == checksum


def iter_net_changes(
    session: Session, zarr_id: str, chain: ChangeChain
) -> Iterator[ManifestChange]:
    """The last change of each path over the chain's sets, sorted by path in S3 key order
    (byte order: ``COLLATE "C"`` on PostgreSQL; SQLite compares bytes), streamed."""
    path = ZarrChangedObject.path
    bind = session.get_bind()
    ordered = path.collate("C") if bind.dialect.name == "postgresql" else path
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
            ZarrChangeSet.zarr_id == zarr_id,
            ZarrChangeSet.id > chain.after_id,
            ZarrChangeSet.id <= chain.last_id,
        )
        .order_by(ordered, ZarrChangedObject.change_set_id.desc())
        .execution_options(yield_per=_FETCH)
    )
    previous: str | None = None
    for p, version_id, last_modified, size, etag in rows:
        if p == previous:
            continue  # an older change of the same path
        previous = p
        if version_id is None:
            yield ManifestChange(p, None)
        else:
            assert last_modified is not None and size is not None and etag is not None
            yield ManifestChange(p, ManifestEntry(p, version_id, last_modified, size, etag))


def mark_manifest_written(
    session: Session, zarr_id: str, checksum: str, embargoed: bool, last_id: int | None
) -> None:
    """Record that the manifest of *checksum* names the state after set *last_id* (or, when
    that set does not end at *checksum*, add a rest mark), and prune the older sets.

    Call it in a write transaction with the Zarr's row locked, after the manifest is stored,
    only when the Zarr is still in the state the manifest was made from."""
    mark_id: int | None = None
    if last_id is not None:
        row = session.get(ZarrChangeSet, last_id)
        if row is not None and row.checksum_after == checksum and row.embargoed == embargoed:
            row.manifest_written = True
            mark_id = row.id
    if mark_id is None:
        if newest_change_set_id(session, zarr_id) != last_id:
            return  # sets were added since: the mark would sit after them
        rest = ZarrChangeSet(
            zarr_id=zarr_id,
            seq=None,
            checksum_before=checksum,
            checksum_after=checksum,
            embargoed=embargoed,
            manifest_written=True,
        )
        session.add(rest)
        session.flush()
        mark_id = rest.id
    # a manifest rewritten under the same checksum no longer names the older states
    session.execute(
        update(ZarrChangeSet)
        .where(
            ZarrChangeSet.zarr_id == zarr_id,
            ZarrChangeSet.checksum_after == checksum,
            ZarrChangeSet.id != mark_id,
        )
        .values(manifest_written=False)
    )
    prune_change_sets(session, zarr_id, mark_id)


def prune_change_sets(session: Session, zarr_id: str, before_id: int) -> None:
    """Delete the Zarr's change sets older than *before_id* (with their objects)."""
    old = select(ZarrChangeSet.id).where(
        ZarrChangeSet.zarr_id == zarr_id, ZarrChangeSet.id < before_id
    )
    session.execute(delete(ZarrChangedObject).where(ZarrChangedObject.change_set_id.in_(old)))
    session.execute(
        delete(ZarrChangeSet).where(ZarrChangeSet.zarr_id == zarr_id, ZarrChangeSet.id < before_id)
    )

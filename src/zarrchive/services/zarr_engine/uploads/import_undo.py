"""Undo the unrecorded copies of a refused batch, whoever made them (#39).

An applier copies a batch's files into place before it records anything (the copies are
visible by key at once).  If it dies after some copies (a crash, SIGKILL) and the batch is
then refused on a later apply (an imported source changed meanwhile, or a big file is not
its md5), the refusing applier undoes its own copies (:func:`.apply._undo_imports`), but the
dead one's stay the keys' current versions: S3 would serve bytes the Zarr's records do not
name.  So, before a batch is refused, :func:`undo_unrecorded` puts each of its keys back at
the version the records name.

**The rule** (per key of the batch, with the batch's claim held: no batch of the Zarr commits
meanwhile, and no manifest is written while one is pending; S3's version order only, never a
time compared with the database's):

- *m*, the key's md5 in the Zarr's checksum tree (``None``: not a file of the Zarr);
- the key's current object (one listing per 1,000 keys): if it holds *m*'s content (or is
  absent where *m* is ``None``), nothing is done at that key;
- else its versions (not its delete markers: S3's order of its versions, newest first) are
  walked, and every one is *doomed* until the walk stops at (never deleting) the first
  version that holds *m*'s content or that a change record of the Zarr names;
- the doomed versions are deleted only if the walk stopped at a version with *m*'s content
  when the key is a file of the Zarr (else S3 and the records disagree below the copies:
  nothing is deleted, fsck tells); when it is not, the walk may end anywhere;
- each doomed version is deleted, newest first, only while it is the key's *latest* entry
  as S3 says (``IsLatest``): the deletions stop at a delete marker (never deleted), which S3
  lists apart from the versions (their interleaving is told by S3's latest entry, read
  again before each deletion but the first where the key has markers, never by times);
- nothing is deleted at a key where a manifest whose listing did not match its checksum (a
  listing made while an earlier, unrecorded version was current) names a doomed version:
  those manifests are read, only when something is doomed (one that can't be read: nothing
  is deleted).

Why it is exact: every version newer than the key's recorded one (in S3's order, which is
the order of the writes) was written after the last batch that committed a change to that
key, by an applier whose batch did not commit: this batch's (dead, stalled, or the refusing
one itself), or a stalled applier of an earlier batch (a late copy, unrecorded too: one with
*m*'s bytes stops the walk and is kept).  None of them is recorded (change records name only
the committing applier's copies; a manifest is written only at rest, and a listed one
naming such a version has a mismatching listing: read).  A version any record names stops
the walk; a delete marker is never deleted, nor anything below the newest one (a file
removed from the Zarr always leaves one: a delete batch's, a restore's).  A stalled applier's copy that lands after the
undo is not undone (the same limit as its late copies of an applied batch:
``zarrchive manifest audit`` and fsck report it).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from sqlalchemy import select

from zarrchive.db.models import ZarrChangedObject, ZarrChangeSet, ZarrManifest
from zarrchive.errors import InvalidManifest, StorageError
from zarrchive.manifest import manifest_key, stream_manifest_entries
from zarrchive.services.runtime import Archive
from zarrchive.services.zarr_engine.manifests import READ_CHUNK, content_md5
from zarrchive.services.zarr_engine.tree_updater import file_lookup
from zarrchive.services.zarr_engine.uploads.multipart import ClaimKeeper
from zarrchive.storage.keys import zarr_object_key
from zarrchive.storage.objects import ObjectInfo, ObjectStore, ObjectVersion
from zarrchive.storage.protocol import ObjectStoreProtocol

log = logging.getLogger(__name__)

#: Paths looked up at a time in the change records.
_QUERY_PATHS = 500


@dataclass(frozen=True)
class _Doomed:
    """The versions to delete at one key, newest first (S3's order of its versions), and
    whether the key has delete markers (S3 lists them apart: which of them lies between two
    versions only S3's latest entry tells, read again before each deletion but the first)."""

    key: str
    versions: list[ObjectVersion]
    markers: bool


def undo_unrecorded(
    archive: Archive,
    store: ObjectStoreProtocol,
    zarr_id: str,
    paths: Iterable[str],
    keep_claim: Callable[[], bool],
    renew_every: float,
) -> bool:
    """Delete, at each of *paths* of the Zarr (a batch about to be refused), the versions
    newer than the one the records name that no record names (see the module); False if
    the batch's claim was lost (*keep_claim*: renews it, every *renew_every* seconds while
    this runs, and once right before the deletions; none is made once it is lost)."""
    with ClaimKeeper(keep_claim, renew_every) as keeper:
        doomed = _find_doomed(archive, store, zarr_id, sorted(set(paths)))
        if keeper.lost or not keep_claim():
            return False
        deleted = sum(store.map(lambda d: _undo_key(store, d, keeper), doomed))
    if deleted:
        log.warning(
            "Zarr %s: deleted %d unrecorded versions at %d keys of a refused batch (copies of "
            "an applier that stopped), e.g. %r",
            zarr_id,
            deleted,
            len(doomed),
            doomed[0].key,
        )
    return not keeper.lost


def _undo_key(store: ObjectStoreProtocol, doomed: _Doomed, keeper: ClaimKeeper) -> int:
    """Delete *doomed*'s versions from the newest, each only while it is the key's latest
    entry (never past a delete marker); how many were deleted."""
    deleted = 0
    for index, version in enumerate(doomed.versions):
        if keeper.lost:
            break
        if index == 0:
            if not version.is_latest:
                break
        elif doomed.markers:
            latest = store.latest_version(doomed.key)
            if latest is None or latest.is_delete_marker or latest.version_id != version.version_id:
                break
        store.delete_version(doomed.key, version.version_id)
        deleted += 1
    return deleted


def _find_doomed(
    archive: Archive, store: ObjectStoreProtocol, zarr_id: str, paths: list[str]
) -> list[_Doomed]:
    """The versions :func:`undo_unrecorded` deletes at *paths*."""
    if not paths:
        return []
    recorded = file_lookup(store, zarr_id, paths)
    current = _current_objects(store, [zarr_object_key(zarr_id, p) for p in paths])
    suspects = [
        p
        for p in paths
        if not _holds(store, current[zarr_object_key(zarr_id, p)], _md5(recorded[p]))
    ]
    if not suspects:
        return []
    named = _named_by_changes(archive, zarr_id, suspects)
    doomed = [
        found
        for found in store.map(
            lambda p: _doomed(store, zarr_id, p, _md5(recorded[p]), named), suspects
        )
        if found.versions
    ]
    if not doomed:
        return []
    try:
        in_manifests = _named_by_odd_manifests(archive, store, zarr_id, {d.key for d in doomed})
    except (StorageError, InvalidManifest) as exc:
        log.warning(
            "Zarr %s: a manifest whose listing differs from its checksum can't be read (%s): "
            "the unrecorded versions of a refused batch stay ('zarrchive admin fsck' tells)",
            zarr_id,
            exc,
        )
        return []
    named_keys = {key for key, _version in in_manifests}
    return [d for d in doomed if d.key not in named_keys]


def _md5(found: tuple[str, int] | None) -> str | None:
    return found[0] if found is not None else None


def _current_objects(store: ObjectStoreProtocol, keys: list[str]) -> dict[str, ObjectInfo | None]:
    if isinstance(store, ObjectStore):
        return store.find(keys)
    return dict(zip(keys, store.map(store.head, keys), strict=True))


def _holds(store: ObjectStoreProtocol, current: ObjectInfo | None, md5: str | None) -> bool:
    """Whether the key's current object is what the records say (*md5*; ``None``: none)."""
    if current is None or md5 is None:
        return current is None and md5 is None
    return content_md5(store, current.key, current.etag) == md5


def _history(store: ObjectStoreProtocol, key: str) -> list[ObjectVersion]:
    """The versions and delete markers of exactly *key*, newest first."""
    found = []
    for version in store.iter_versions(key):
        if version.key != key:
            break  # the keys *key* is a prefix of come after it
        found.append(version)
    return found


def _doomed(
    store: ObjectStoreProtocol,
    zarr_id: str,
    path: str,
    md5: str | None,
    named: set[tuple[str, str]],
) -> _Doomed:
    """The versions at *path* to delete (the module's rule), newest first."""
    key = zarr_object_key(zarr_id, path)
    history = _history(store, key)
    versions = [v for v in history if not v.is_delete_marker]
    markers = len(versions) < len(history)
    doomed: list[ObjectVersion] = []
    stop = "first version"
    for version in versions:
        if version.version_id in ("", "null"):
            log.warning("Zarr %s: %r has no version ids: its copies can't be undone", zarr_id, key)
            return _Doomed(key, [], markers)
        if md5 is not None and (
            content_md5(store, key, version.etag or "", version.version_id) == md5
        ):
            stop = "recorded"
            break
        if (key, version.version_id) in named:
            stop = "named"
            break
        doomed.append(version)
    if doomed and md5 is not None and stop != "recorded":
        log.warning(
            "Zarr %s: %r is not at its recorded content in S3 and no version of it below "
            "the unrecorded ones is: nothing undone there ('zarrchive admin fsck' tells)",
            zarr_id,
            key,
        )
        return _Doomed(key, [], markers)
    return _Doomed(key, doomed, markers)


def _named_by_changes(archive: Archive, zarr_id: str, paths: Sequence[str]) -> set[tuple[str, str]]:
    """``(key, version id)`` of every version a change record of the Zarr names at *paths*."""
    named: set[tuple[str, str]] = set()
    with archive.db.session() as session:
        for start in range(0, len(paths), _QUERY_PATHS):
            rows = session.execute(
                select(ZarrChangedObject.path, ZarrChangedObject.version_id)
                .join(ZarrChangeSet, ZarrChangeSet.id == ZarrChangedObject.change_set_id)
                .where(
                    ZarrChangeSet.zarr_id == zarr_id,
                    ZarrChangedObject.path.in_(paths[start : start + _QUERY_PATHS]),
                    ZarrChangedObject.version_id.is_not(None),
                )
            )
            for path, version_id in rows:
                named.add((zarr_object_key(zarr_id, path), str(version_id)))
    return named


def _named_by_odd_manifests(
    archive: Archive, store: ObjectStoreProtocol, zarr_id: str, keys: set[str]
) -> set[tuple[str, str]]:
    """``(key, version id)`` at *keys* named by the Zarr's manifests whose listing did not
    hash to their checksum (the only manifests that may name an unrecorded version)."""
    with archive.db.session() as session:
        checksums = list(
            session.scalars(
                select(ZarrManifest.checksum).where(
                    ZarrManifest.zarr_id == zarr_id,
                    ZarrManifest.listing_checksum != ZarrManifest.checksum,
                )
            )
        )
    named: set[tuple[str, str]] = set()
    root = zarr_object_key(zarr_id, "")
    for checksum in checksums:
        chunks = store.iter_content(manifest_key(zarr_id, checksum), chunk_size=READ_CHUNK)
        for entry in stream_manifest_entries(chunks):
            key = root + entry.path
            if key in keys:
                named.add((key, entry.version_id))
    return named


__all__ = ["undo_unrecorded"]

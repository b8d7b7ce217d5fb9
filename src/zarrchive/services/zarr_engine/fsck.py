"""Check a Zarr's tree hash and its manifest against S3, and repair them.

One listing of the Zarr's objects in S3 (streamed, in key order) serves both checks, each
entry used by both as it comes (a Zarr of 10^6 files was listed twice: 505 s).  It is the
manifests' listing (:func:`~zarrchive.services.zarr_engine.manifests.current_entries`: the
Zarr's levels split by ``/`` into prefixes listed in parallel), not one flat paginated
listing: that would send N/1000 requests instead of up to one per leaf directory, but
SeaweedFS (the embedded default) pages a flat version listing wrongly where sibling names
differ after a character below ``/`` (``big/...`` beside ``big.txt``): it loses versions, and
a repair from such a listing would rewrite correct nodes
(``tests/storage/test_seaweedfs.py::test_seaweedfs_pages_versions_in_byte_order``):

- every directory's node is recomputed from it, compared with the stored ``.checksum``
  node, and the root with the database; a repair rewrites what differs.  The listing runs
  without holding the Zarr's lock; the repair takes the lock and refuses if the Zarr changed
  meanwhile;
- the manifest of the Zarr's checksum (made from the apply's records, never from a listing)
  is compared with it (:func:`~zarrchive.services.zarr_engine.manifests.audit_manifest`); a repair
  writes a differing one again from a listing (unless a published version pins it).

Without a repair, S3 objects that hash to another checksum than the archive's raise the
alarm users see (:func:`~zarrchive.services.zarr_engine.manifests.raise_mismatch_alarm`: the manifest's
``zarrChecksumMismatch`` and the Zarr's ``checksum_mismatch``, a second listing only then).
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

from zarrchive.checksum import EMPTY_CHECKSUM, ZarrDigest
from zarrchive.checksum.tree import TreeHasher
from zarrchive.db.models import utcnow
from zarrchive.errors import Conflict, InvalidInput
from zarrchive.manifest import ManifestEntry
from zarrchive.services.runtime import Archive
from zarrchive.services.zarr_engine.manifests import (
    AuditStatus,
    ManifestAudit,
    ManifestStatus,
    audit_manifest,
    current_entries,
    is_pinned,
    raise_mismatch_alarm,
    write_manifest,
)
from zarrchive.services.zarr_engine.uploads import finish_interrupted, open_batch, queue_manifest
from zarrchive.services.zarr_engine.zarrs import get_zarr
from zarrchive.storage.keys import checksum_node_key, checksum_prefix

_MD5 = re.compile(r"[0-9a-f]{32}")


@dataclass
class FsckReport:
    zarr_id: str
    checksum_in_database: str
    checksum_from_s3: str
    file_count: int
    size: int
    problems: list[str] = field(default_factory=list)
    repaired: bool = False
    #: what the manifest audit found (:class:`AuditStatus`; ``None``: not audited, the tree
    #: was repaired and the new checksum's manifest is being written)
    manifest: str | None = None

    @property
    def ok(self) -> bool:
        return not self.problems


class _TreeFromListing:
    """The tree (every directory's node, the root's digest) of the entries seen so far: fed
    by :meth:`seen` as the listing goes by (its consumer is the manifest audit)."""

    def __init__(self, zarr_id: str) -> None:
        self.zarr_id = zarr_id
        self.hasher = TreeHasher(collect=True, with_nodes=True)
        self.expected: dict[str, bytes] = {}
        self.root_checksum, self.count, self.size = EMPTY_CHECKSUM, 0, 0

    def seen(self, entries: Iterable[ManifestEntry]) -> Iterator[ManifestEntry]:
        """*entries*, each added to the tree on its way."""
        for entry in entries:
            if not _MD5.fullmatch(entry.etag):  # parts: the md5 the archive verified, or none
                raise InvalidInput(
                    f"{self.zarr_id}/{entry.path}: its ETag {entry.etag!r} is not an md5 (a "
                    "multipart upload?); re-upload the file through the API"
                )
            self.hasher.add(entry.path, entry.size, entry.etag)
            self._take_completed()
            yield entry

    def finish(self) -> None:
        self.hasher.finish()
        self._take_completed()

    def _take_completed(self) -> None:
        for directory in self.hasher.completed:
            assert directory.node_json is not None
            if directory.path == "":
                self.root_checksum, self.count = directory.digest, directory.count
                self.size = directory.size
                if self.count == 0:
                    continue
            key = checksum_node_key(self.zarr_id, directory.path)
            self.expected[key] = directory.node_json.encode("ascii")
        self.hasher.completed.clear()


def fsck(archive: Archive, zarr_id: str, *, repair: bool = False) -> FsckReport:
    """Compare the stored tree of *zarr_id* with S3's content; repair if asked."""
    finish_interrupted(archive, zarr_id)
    with archive.db.session() as session:
        zarr = get_zarr(session, None, zarr_id, check_read=False)
        zarr_id, db_checksum = zarr.id, zarr.checksum
        db_count, db_size, stamp = zarr.file_count, zarr.size, zarr.modified_at
        store = archive.store_for(zarr.dandiset.embargoed)
        if repair and open_batch(session, zarr) is not None:
            raise Conflict(
                f"Zarr {zarr_id} has an upload batch open: fsck --repair would write what "
                "the batch has not applied yet; complete or cancel it, then run fsck again"
            )
    # one listing: the audit reads it (unless it ends first: busy, no manifest), the tree
    # is computed from each entry on its way, and whatever the audit left is read here
    tree = _TreeFromListing(zarr_id)
    listing = tree.seen(current_entries(store, zarr_id))
    audit = audit_manifest(archive, zarr_id, listing=listing)
    for _ in listing:
        pass
    tree.finish()
    expected = tree.expected
    root_checksum, count, size = tree.root_checksum, tree.count, tree.size
    stored_keys = [info.key for info in store.iter_objects(checksum_prefix(zarr_id))]
    # each stored node's md5, not its body: the nodes of 10^7 files weigh hundreds of MB
    stored = dict(
        zip(stored_keys, store.map(lambda k: _digest(store.get(k)), stored_keys), strict=True)
    )
    report = FsckReport(zarr_id, db_checksum, root_checksum, count, size)
    to_write = []
    for key, data in expected.items():
        if key not in stored:
            report.problems.append(f"missing node {key}")
            to_write.append(key)
        elif stored[key] != _digest(data):
            report.problems.append(f"wrong node {key}")
            to_write.append(key)
    to_delete = [key for key in stored if key not in expected]
    report.problems.extend(f"extra node {key}" for key in to_delete)
    if (db_checksum, db_count, db_size) != (root_checksum, count, size):
        report.problems.append(
            f"database holds checksum {db_checksum} ({db_count} files, {db_size} bytes); "
            f"S3 holds {root_checksum} ({count} files, {size} bytes)"
        )
    if repair and report.problems:
        with archive.db.write_session() as session:
            zarr = get_zarr(session, None, zarr_id, lock=True, check_read=False)
            if (
                zarr.checksum != db_checksum
                or zarr.modified_at != stamp
                or open_batch(session, zarr) is not None
            ):
                raise Conflict(
                    f"Zarr {zarr_id} changed while fsck listed it (or has a batch open): "
                    "run fsck again when it is idle"
                )
            store.map(lambda k: store.put(k, expected[k], "application/json"), to_write)
            if to_delete:
                store.delete_many(to_delete)
            ZarrDigest.parse(root_checksum)
            zarr.checksum, zarr.file_count, zarr.size = root_checksum, count, size
            zarr.modified_at = utcnow()
        report.repaired = True
        queue_manifest(archive, zarr_id)
        return report
    _audit_manifest(archive, report, audit, repair=repair)
    if not repair and root_checksum != db_checksum:
        # S3 disagrees with the tree (a write behind the archive's back): the alarm users
        # see (the manifest's zarrChecksumMismatch, the Zarr's checksum_mismatch) stays up
        # until a repair
        raise_mismatch_alarm(archive, zarr_id, root_checksum)
    return report


def _digest(data: bytes | None) -> bytes | None:
    return None if data is None else hashlib.md5(data, usedforsecurity=False).digest()


def _audit_manifest(
    archive: Archive, report: FsckReport, audit: ManifestAudit, *, repair: bool
) -> None:
    """What the manifest audit (:func:`audit_manifest`: the stored manifest of the current
    checksum against the listing of S3) found: each difference is a problem.  A busy Zarr
    or one without a manifest yet is no problem (``manifest`` says so).  With *repair*, a
    manifest that differs is written again from a listing, unless a published version pins
    it (it names the versions that version reads: never rewritten)."""
    report.manifest = str(audit.status)
    if audit.status is not AuditStatus.DIFFERS:
        return
    report.problems.extend(_difference_problems(audit))
    if not repair:
        return
    if is_pinned(archive, report.zarr_id, audit.checksum):
        report.problems.append(
            f"manifest of {audit.checksum} is pinned by a published version: not rewritten"
        )
        return
    outcome = write_manifest(archive, report.zarr_id, force=True, from_listing=True)
    if outcome.status is ManifestStatus.WRITTEN:
        again = audit_manifest(archive, report.zarr_id)
        report.manifest = str(again.status)
        report.repaired = again.status is AuditStatus.MATCHES


def manifest_problems(archive: Archive, zarr_id: str) -> list[str]:
    """The manifest audit as fsck problems: each difference between the stored manifest of
    the Zarr's current checksum and S3 (none when they match or there is no manifest yet;
    a busy or changing Zarr is one problem: check again at rest)."""
    audit = audit_manifest(archive, zarr_id)
    if audit.status in (AuditStatus.BUSY, AuditStatus.SUPERSEDED):
        return [f"manifest not audited: the Zarr is not at rest ({audit.status}); run again"]
    problems = _difference_problems(audit)
    if audit.status is AuditStatus.DIFFERS and audit.s3_checksum != audit.checksum:
        problems.append(
            f"S3 holds checksum {audit.s3_checksum or '(none: an object without an md5)'}, "
            f"the archive {audit.checksum}: the checksum-mismatch alarm is up until a repair"
        )
    return problems


def _difference_problems(audit: ManifestAudit) -> list[str]:
    problems = [f"manifest {d.describe()}" for d in audit.differences]
    if audit.difference_count > len(audit.differences):
        problems.append(
            f"manifest: {audit.difference_count - len(audit.differences)} more differences"
        )
    return problems

"""Check a Zarr's tree hash and its manifest against S3, and repair them.

Recomputes every directory's node from an S3 listing of the Zarr's objects
(streamed: S3 lists keys grouped by directory), compares each with the stored
``.checksum`` node and the root with the database, and optionally rewrites what
differs.  The listing runs without holding the Zarr's lock; the repair takes
the lock and refuses if the Zarr changed meanwhile.

Then the manifest of the Zarr's checksum (made from the apply's records, never from a
listing) is audited against a listing of S3 (:func:`~zarrchive.services.manifests.audit_manifest`);
a repair writes a differing one again from the listing (unless a published version pins it).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

from zarrchive.checksum import EMPTY_CHECKSUM, ZarrDigest, iter_directory_digests
from zarrchive.db.models import utcnow
from zarrchive.errors import Conflict, InvalidInput
from zarrchive.services.manifests import (
    AuditStatus,
    ManifestAudit,
    ManifestStatus,
    audit_manifest,
    content_md5,
    is_pinned,
    write_manifest,
)
from zarrchive.services.runtime import Archive
from zarrchive.services.uploads import finish_interrupted, open_batch, queue_manifest
from zarrchive.services.zarrs import get_zarr
from zarrchive.storage.keys import checksum_node_key, checksum_prefix, zarr_prefix
from zarrchive.storage.objects import ObjectStore


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


def _listing(store: ObjectStore, zarr_id: str) -> Iterator[tuple[str, int, str]]:
    prefix = zarr_prefix(zarr_id)
    for info in store.iter_objects(prefix):
        path = info.key[len(prefix) :]
        md5 = content_md5(store, info.key, info.etag)  # parts: the md5 the archive verified
        if md5 is None:
            raise InvalidInput(
                f"{info.key}: its ETag {info.etag!r} is not an md5 (a multipart upload?); "
                "re-upload the file through the API"
            )
        yield path, info.size, md5


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
    expected: dict[str, bytes] = {}
    root_checksum, count, size = EMPTY_CHECKSUM, 0, 0
    for directory in iter_directory_digests(
        _listing(store, zarr_id), grouped=True, with_nodes=True
    ):
        assert directory.node_json is not None
        if directory.path == "":
            root_checksum, count, size = directory.digest, directory.count, directory.size
            if count == 0:
                continue
        expected[checksum_node_key(zarr_id, directory.path)] = directory.node_json.encode("ascii")
    stored_keys = [info.key for info in store.iter_objects(checksum_prefix(zarr_id))]
    stored = dict(zip(stored_keys, store.map(store.get, stored_keys), strict=True))
    report = FsckReport(zarr_id, db_checksum, root_checksum, count, size)
    to_write = []
    for key, data in expected.items():
        if key not in stored:
            report.problems.append(f"missing node {key}")
            to_write.append(key)
        elif stored[key] != data:
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
    _audit_manifest(archive, report, repair=repair)
    return report


def _audit_manifest(archive: Archive, report: FsckReport, *, repair: bool) -> None:
    """The manifest audit (:func:`audit_manifest`: the stored manifest of the current
    checksum against a listing of S3): each difference is a problem.  A busy Zarr or one
    without a manifest yet is no problem (``manifest`` says so).  With *repair*, a manifest
    that differs is written again from a listing, unless a published version pins it (it
    names the versions that version reads: never rewritten)."""
    audit = audit_manifest(archive, report.zarr_id)
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
    return _difference_problems(audit)


def _difference_problems(audit: ManifestAudit) -> list[str]:
    problems = [f"manifest {d.describe()}" for d in audit.differences]
    if audit.difference_count > len(audit.differences):
        problems.append(
            f"manifest: {audit.difference_count - len(audit.differences)} more differences"
        )
    return problems

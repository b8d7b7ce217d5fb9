"""Storage accounting: DANDI's ``GET /api/stats/`` and ``zarrchive admin usage``.

A piece of content is a blob or a Zarr (its current size); it is counted once per figure,
however many assets name it.  For a dandiset:

* ``draft``: the content of its draft's assets;
* ``published_only``: the content its published versions' assets name and its draft does
  not (what deleting from the draft did not free);
* ``trash``: the content of its trashed assets (and of its own draft when it is deleted).

A user's figures are the sums over the dandisets they own.  The archive's ``orphaned``
figures are what nothing references: blobs that no asset and no trash item names, Zarrs that
no asset, no published version, no trash item and no batch names, staging areas of
batches that are no longer open or pending (read from S3), and the noncurrent S3 object
versions that no pinned state, no manifest within the retention, no trashed Zarr and no
rollback needs (:mod:`zarrchive.services.zarr_engine.version_gc`, whatever their age: ``admin gc``
removes those noncurrent for longer than ``ZARRCHIVE_VERSION_RETENTION_DAYS``).
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from datetime import timedelta

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from zarrchive.db.models import (
    Asset,
    Blob,
    Dandiset,
    DandisetOwner,
    TrashedAsset,
    UploadBatch,
    User,
    Version,
    Zarr,
    ZarrPin,
)
from zarrchive.services.runtime import Archive
from zarrchive.services.zarr_engine.version_gc import all_versions
from zarrchive.storage.keys import STAGING_ROOT

DRAFT = "draft"

#: A piece of content: ("blob" or "zarr", its id).
Content = tuple[str, str]


@dataclass(frozen=True)
class Stats:
    """DANDI's ``/api/stats/``."""

    dandiset_count: int
    published_dandiset_count: int
    user_count: int
    #: bytes of every live asset's content (each blob and Zarr once)
    size: int


def stats(session: Session) -> Stats:
    live = Dandiset.deleted_at.is_(None)
    dandisets = session.scalar(select(func.count()).select_from(Dandiset).where(live)) or 0
    published = (
        session.scalar(
            select(func.count(func.distinct(Version.dandiset_id)))
            .join(Dandiset, Dandiset.id == Version.dandiset_id)
            .where(Version.version != DRAFT, live)
        )
        or 0
    )
    users = session.scalar(select(func.count()).select_from(User)) or 0
    blobs = select(Asset.blob_id).where(Asset.blob_id.is_not(None))
    zarrs = select(Asset.zarr_id).where(Asset.zarr_id.is_not(None))
    size = (session.scalar(select(func.sum(Blob.size)).where(Blob.id.in_(blobs))) or 0) + (
        session.scalar(select(func.sum(Zarr.size)).where(Zarr.id.in_(zarrs))) or 0
    )
    return Stats(int(dandisets), int(published), int(users), int(size))


@dataclass
class Usage:
    """Bytes (and pieces of content) of a dandiset or a user."""

    draft: int = 0
    published_only: int = 0
    trash: int = 0

    @property
    def total(self) -> int:
        return self.draft + self.published_only + self.trash


@dataclass
class UsageReport:
    dandisets: dict[str, Usage] = field(default_factory=dict)
    users: dict[str, Usage] = field(default_factory=dict)
    orphaned_blobs: int = 0
    orphaned_blob_bytes: int = 0
    orphaned_zarrs: int = 0
    orphaned_zarr_bytes: int = 0
    staging_objects: int = 0
    staging_bytes: int = 0
    #: noncurrent object versions nothing needs (any age)
    unneeded_versions: int = 0
    unneeded_version_bytes: int = 0

    def as_json(self) -> dict[str, object]:
        def figures(usage: Usage) -> dict[str, int]:
            return {
                "draft": usage.draft,
                "published_only": usage.published_only,
                "trash": usage.trash,
                "total": usage.total,
            }

        return {
            "dandisets": {k: figures(v) for k, v in sorted(self.dandisets.items())},
            "users": {k: figures(v) for k, v in sorted(self.users.items())},
            "orphaned": {
                "blobs": self.orphaned_blobs,
                "blob_bytes": self.orphaned_blob_bytes,
                "zarrs": self.orphaned_zarrs,
                "zarr_bytes": self.orphaned_zarr_bytes,
                "staging_objects": self.staging_objects,
                "staging_bytes": self.staging_bytes,
                "noncurrent_versions": self.unneeded_versions,
                "noncurrent_version_bytes": self.unneeded_version_bytes,
                "bytes": self.orphaned_bytes,
            },
        }

    @property
    def orphaned_bytes(self) -> int:
        return (
            self.orphaned_blob_bytes
            + self.orphaned_zarr_bytes
            + self.staging_bytes
            + self.unneeded_version_bytes
        )


def _content(blob_id: str | None, zarr_id: str | None) -> Content | None:
    if blob_id is not None:
        return ("blob", blob_id)
    if zarr_id is not None:
        return ("zarr", zarr_id)
    return None


def usage_report(
    archive: Archive, *, with_staging: bool = True, with_versions: bool = True
) -> UsageReport:
    """The storage report (see the module); *with_staging* lists the staging areas in S3,
    *with_versions* every version of the Zarrs' and blobs' keys."""
    report = UsageReport()
    with archive.db.session() as session:
        sizes: dict[Content, int] = {
            ("blob", b): s for b, s in session.execute(select(Blob.id, Blob.size))
        }
        sizes.update({("zarr", z): s for z, s in session.execute(select(Zarr.id, Zarr.size))})
        draft: dict[int, set[Content]] = defaultdict(set)
        published: dict[int, set[Content]] = defaultdict(set)
        trashed: dict[int, set[Content]] = defaultdict(set)
        for dandiset_id, version, blob_id, zarr_id in session.execute(
            select(Version.dandiset_id, Version.version, Asset.blob_id, Asset.zarr_id).join(
                Version, Version.id == Asset.version_id
            )
        ):
            content = _content(blob_id, zarr_id)
            if content is not None:
                (draft if version == DRAFT else published)[dandiset_id].add(content)
        for dandiset_id, blob_id, zarr_id in session.execute(
            select(TrashedAsset.dandiset_id, TrashedAsset.blob_id, TrashedAsset.zarr_id)
        ):
            content = _content(blob_id, zarr_id)
            if content is not None:
                trashed[dandiset_id].add(content)
        identifiers = {d: f"{d:06d}" for d in session.scalars(select(Dandiset.id))}
        for dandiset_id, identifier in identifiers.items():
            report.dandisets[identifier] = Usage(
                draft=sum(sizes[c] for c in draft[dandiset_id]),
                published_only=sum(sizes[c] for c in published[dandiset_id] - draft[dandiset_id]),
                trash=sum(sizes[c] for c in trashed[dandiset_id]),
            )
        for username in session.scalars(select(User.username)):
            report.users[username] = Usage()
        for dandiset_id, username in session.execute(
            select(DandisetOwner.dandiset_id, User.username).join(
                User, User.id == DandisetOwner.user_id
            )
        ):
            mine, theirs = report.users[username], report.dandisets[identifiers[dandiset_id]]
            mine.draft += theirs.draft
            mine.published_only += theirs.published_only
            mine.trash += theirs.trash
        referenced: set[Content] = set()
        for group in (draft, published, trashed):
            for contents in group.values():
                referenced |= contents
        referenced |= {("zarr", z) for z in session.scalars(select(ZarrPin.zarr_id))}
        # being uploaded (its asset comes last): not orphaned, as gc sees it
        referenced |= {("zarr", z) for z in session.scalars(select(UploadBatch.zarr_id))}
        for content, size in sizes.items():
            if content in referenced:
                continue
            if content[0] == "blob":
                report.orphaned_blobs += 1
                report.orphaned_blob_bytes += size
            else:
                report.orphaned_zarrs += 1
                report.orphaned_zarr_bytes += size
        live_batches = set(session.scalars(select(UploadBatch.uid)))
    if with_staging:
        for store in (archive.store, archive.embargo_store):
            for obj in store.iter_objects(STAGING_ROOT):
                parts = obj.key[len(STAGING_ROOT) :].split("/")
                if len(parts) >= 3 and parts[1] in live_batches:
                    continue  # an open or pending batch's upload
                report.staging_objects += 1
                report.staging_bytes += obj.size
    if with_versions:
        retention = timedelta(days=archive.settings.version_retention_days)
        for area in all_versions(archive, retention=retention, expire_all=True):
            freed = area.freed
            report.unneeded_versions += freed.count
            report.unneeded_version_bytes += freed.bytes
    return report

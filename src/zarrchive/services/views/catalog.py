"""The catalog as the web pages browse it: pages of dandisets with the totals of the
version each shows, one dandiset with its versions, and the folders and assets of a version.

Read-only; each function reads in a session of its own and answers plain dataclasses.
Visibility is the services' own: :func:`zarrchive.services.identity.auth.readable_dandisets` in SQL
for lists, :func:`zarrchive.services.dandi.dandisets.get_dandiset` for one dandiset.
"""

from __future__ import annotations

import urllib.parse
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import datetime

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from zarrchive.checksum.digest import ZarrDigest
from zarrchive.db.models import (
    Asset,
    Blob,
    Dandiset,
    LindiState,
    SharedZarrAsset,
    SharedZarrMode,
    Version,
    Zarr,
)
from zarrchive.errors import InvalidInput
from zarrchive.services.dandi import lindi_files
from zarrchive.services.dandi.audit import AuditEntry, list_records
from zarrchive.services.dandi.dandisets import DandisetFilter, get_dandiset, list_dandisets
from zarrchive.services.dandi.embargo import embargo_status
from zarrchive.services.dandi.versions import (
    DRAFT,
    VersionInfo,
    find_version,
    list_versions,
    with_validation,
)
from zarrchive.services.identity.auth import Caller, is_owner
from zarrchive.services.runtime import Archive
from zarrchive.services.views.open_with import is_nwb, neurosift_url
from zarrchive.services.zarr_engine import shared_zarrs

#: Dandisets per page of the list.
DANDISETS_PER_PAGE = 25
#: Audit records shown on a dandiset's page (the API lists them all).
AUDIT_SHOWN = 50
#: The longest search string.
MAX_SEARCH = 300
#: Most assets one folder of the files page adds up (a version's folder with more is
#: shown partially, and says so).
MAX_TREE_ASSETS = 20_000


# -- the list of dandisets --------------------------------------------------------------------
@dataclass(frozen=True)
class DandisetRow:
    identifier: str
    name: str
    embargo_status: str
    #: The version shown: the latest published one, else the draft.
    version: str
    asset_count: int
    size: int
    created: datetime


@dataclass(frozen=True)
class DandisetPage:
    rows: list[DandisetRow]
    total: int
    page: int
    pages: int


def shown_versions(session: Session, dandiset_ids: list[int]) -> dict[int, Version | None]:
    """For each dandiset: its latest published version, else its draft (None: neither)."""
    shown: dict[int, Version | None] = dict.fromkeys(dandiset_ids)
    if not dandiset_ids:
        return shown
    rows = session.scalars(
        select(Version).where(Version.dandiset_id.in_(dandiset_ids)).order_by(Version.id)
    )
    for version in rows:
        current = shown[version.dandiset_id]
        if current is None or current.is_draft or not version.is_draft:
            shown[version.dandiset_id] = version
    return shown


def version_totals(session: Session, versions: list[Version]) -> dict[int, tuple[int, int]]:
    """``version id -> (asset count, size)``: blobs' sizes, and Zarrs' live sizes in a
    draft or the pinned ``contentSize`` of a published version (as the API's versions); a
    draft's Zarr of another dandiset: the size of the state its asset pinned."""
    ids = [v.id for v in versions]
    totals: dict[int, list[int]] = defaultdict(lambda: [0, 0])
    if not ids:
        return {}
    for version_id, count, size in session.execute(
        select(Asset.version_id, func.count(), func.coalesce(func.sum(Blob.size), 0))
        .select_from(Asset)
        .outerjoin(Blob, Blob.id == Asset.blob_id)
        .where(Asset.version_id.in_(ids))
        .group_by(Asset.version_id)
    ):
        totals[version_id][0] += int(count)
        totals[version_id][1] += int(size)
    drafts = [v.id for v in versions if v.is_draft]
    if drafts:
        for version_id, size in session.execute(
            select(Asset.version_id, func.coalesce(func.sum(Zarr.size), 0))
            .join(Zarr, Zarr.id == Asset.zarr_id)
            .join(Version, Version.id == Asset.version_id)
            .where(Asset.version_id.in_(drafts), Zarr.dandiset_id == Version.dandiset_id)
            .group_by(Asset.version_id)
        ):
            totals[version_id][1] += int(size)
        for version_id, checksum in session.execute(
            select(Asset.version_id, SharedZarrAsset.checksum)
            .join(SharedZarrAsset, SharedZarrAsset.asset_id == Asset.id)
            .where(Asset.version_id.in_(drafts))
        ):
            totals[version_id][1] += ZarrDigest.totals(checksum)[1]
    published = [v.id for v in versions if not v.is_draft]
    if published:
        for version_id, metadata in session.execute(
            select(Asset.version_id, Asset.metadata_).where(
                Asset.version_id.in_(published), Asset.zarr_id.is_not(None)
            )
        ):
            size = (metadata or {}).get("contentSize", 0)
            totals[version_id][1] += size if isinstance(size, int) else 0
    return {k: (v[0], v[1]) for k, v in totals.items()}


def dandiset_page(
    archive: Archive, user: Caller | None, *, search: str = "", page: int = 1
) -> DandisetPage:
    """A page of the dandisets *user* may see, by identifier; with *search*, those it finds
    (the API's search: names, descriptions, keywords, contributors, asset paths), ranked."""
    if len(search) > MAX_SEARCH:
        raise InvalidInput(f"a search has at most {MAX_SEARCH} characters")
    with archive.db.session() as session:
        total, dandisets = list_dandisets(
            session,
            user,
            DandisetFilter(embargoed=True, search=search.strip() or None),
            offset=(page - 1) * DANDISETS_PER_PAGE,
            limit=DANDISETS_PER_PAGE,
        )
        pages = max(1, -(-total // DANDISETS_PER_PAGE))
        shown = shown_versions(session, [d.id for d in dandisets])
        totals = version_totals(session, [v for v in shown.values() if v is not None])
        rows = []
        for dandiset in dandisets:
            version = shown[dandiset.id]
            count, size = totals.get(version.id, (0, 0)) if version is not None else (0, 0)
            rows.append(
                DandisetRow(
                    identifier=dandiset.identifier,
                    name=dandiset.name,
                    embargo_status=embargo_status(dandiset),
                    version=version.version if version is not None else DRAFT,
                    asset_count=count,
                    size=size,
                    created=dandiset.created_at,
                )
            )
    return DandisetPage(rows=rows, total=total, page=page, pages=pages)


# -- one dandiset -----------------------------------------------------------------------------
@dataclass(frozen=True)
class DandisetView:
    """A dandiset with its versions, one of them shown."""

    identifier: str
    name: str
    #: The owners' user names, sorted.
    owners: list[str]
    embargo_status: str
    #: Every version, as the API lists them: the published ones oldest first, then the draft.
    versions: list[VersionInfo]
    shown: VersionInfo
    #: The viewer owns the dandiset (or is an admin): the page offers the owners form and
    #: shows the audit trail.
    can_manage: bool = False
    #: The latest changes (owners and admins only), newest first.
    audit: list[AuditEntry] = field(default_factory=list)
    #: The reviewers' user names, sorted (owners and admins only: see
    #: :mod:`zarrchive.services.dandi.reviewers`).
    reviewers: list[str] = field(default_factory=list)


def dandiset_view(
    archive: Archive, user: Caller | None, identifier: str, version: str | None = None
) -> DandisetView:
    """The dandiset showing *version* (``None``: its latest published one, else its draft);
    a version it does not have is :class:`~zarrchive.errors.NotFound`, as in the API."""
    with archive.db.session() as session:
        dandiset = get_dandiset(session, user, identifier)
        every = list_versions(session, user, identifier)
        if version is None:
            published = [v for v in every if v.version != DRAFT]
            version = (published or every)[-1].version
        else:
            find_version(session, dandiset, version)  # the API's NotFound for another name
        shown = next(v for v in every if v.version == version)
        manage = is_owner(user, dandiset)
        trail: list[AuditEntry] = []
        if manage:
            shown = with_validation(session, shown, find_version(session, dandiset, version))
            count, _ = list_records(session, user, dandiset, limit=1)
            trail = list_records(
                session, user, dandiset, offset=max(0, count - AUDIT_SHOWN), limit=AUDIT_SHOWN
            )[1][::-1]
        return DandisetView(
            identifier=dandiset.identifier,
            name=dandiset.name,
            owners=sorted(o.username for o in dandiset.owners),
            embargo_status=embargo_status(dandiset),
            versions=every,
            shown=shown,
            can_manage=manage,
            audit=trail,
            reviewers=sorted(r.username for r in dandiset.reviewers) if manage else [],
        )


# -- a version's asset tree ------------------------------------------------------------------
@dataclass(frozen=True)
class TreeAsset:
    asset_id: str
    name: str
    path: str
    size: int
    #: ``blob`` or ``zarr``
    kind: str
    zarr_id: str | None
    #: Neurosift showing it: public NWB files only (:mod:`~zarrchive.services.views.open_with`),
    #: through its LINDI file when that is ready.
    neurosift_url: str | None = None
    #: Its LINDI file (HDF5 blobs): the API route, and ``pending``, ``ready`` or
    #: ``failed: reason`` (:class:`~zarrchive.services.dandi.lindi_files.LindiStatus`).
    lindi_url: str | None = None
    lindi_state: str | None = None
    #: A Zarr of another dandiset (:mod:`~zarrchive.services.zarr_engine.shared_zarrs`): the checksum of
    #: the state the asset reads (``None``: a blob, or a Zarr of the dandiset itself).
    shared_checksum: str | None = None
    #: Where the Zarr's link leads: its page, or the snapshot a shared asset pinned.
    zarr_url: str | None = None


def zarr_link(zarr_id: str, state: shared_zarrs.SharedState | None) -> str:
    """The page of a Zarr asset: the Zarr's own, or for an asset that reads a snapshot of
    another dandiset's Zarr, that snapshot (a frozen Zarr's live state is the pinned one)."""
    if state is not None and state.mode is SharedZarrMode.SNAPSHOT:
        return f"/api/zarr/{zarr_id}/snapshots/{urllib.parse.quote(state.checksum, safe='')}/"
    return f"/zarr/{zarr_id}/"


@dataclass(frozen=True)
class TreeFolder:
    name: str
    path: str
    asset_count: int
    size: int


@dataclass(frozen=True)
class AssetTree:
    #: The dandiset's identifier and the version's name.
    dandiset: str
    version: str
    #: The folder (``a/b``; ``""``: the top).
    location: str
    folders: list[TreeFolder]
    assets: list[TreeAsset]
    #: More assets are below *location* than were added up.
    partial: bool


def normalize_location(location: str | None) -> str:
    """``a/b`` for ``/a/b/``; refuses what no asset path can contain."""
    text = (location or "").strip("/")
    if len(text) > 4096 or any(part in ("", ".", "..") for part in text.split("/") if text):
        raise InvalidInput(f"{(location or '')[:80]!r} is not a folder of asset paths")
    return text


def asset_tree(
    archive: Archive, user: Caller | None, identifier: str, version: str, location: str | None
) -> AssetTree:
    """The folders and assets right below the folder *location* (``""``: the top) of a
    version of a dandiset *user* may see."""
    folder = normalize_location(location)
    with archive.db.session() as session:
        dandiset = get_dandiset(session, user, identifier)
        found = find_version(session, dandiset, version)
        return _asset_tree(archive, session, dandiset, found, folder)


def _asset_tree(
    archive: Archive, session: Session, dandiset: Dandiset, version: Version, location: str
) -> AssetTree:
    prefix = f"{location}/" if location else ""
    condition = Asset.version_id == version.id
    if prefix:
        condition = condition & (func.substr(Asset.path, 1, len(prefix)) == prefix)
    rows = session.execute(
        select(
            Asset.id,
            Asset.path,
            Asset.zarr_id,
            Asset.metadata_,
            Blob.size,
            Zarr.size,
            Blob.key,
            Blob.embargoed,
            Blob.id,
        )
        .select_from(Asset)
        .outerjoin(Blob, Blob.id == Asset.blob_id)
        .outerjoin(Zarr, Zarr.id == Asset.zarr_id)
        .where(condition)
        .order_by(Asset.path)
        .limit(MAX_TREE_ASSETS + 1)
    ).all()
    partial = len(rows) > MAX_TREE_ASSETS
    folders: dict[str, list[int]] = {}
    assets: list[TreeAsset] = []
    lindi = lindi_files.statuses(session, (row[8] for row in rows[:MAX_TREE_ASSETS]))
    shared = shared_zarrs.version_states(session, version)
    for row in rows[:MAX_TREE_ASSETS]:
        asset_id, path, zarr_id, metadata, blob_size, zarr_size, blob_key, blob_embargoed = row[:8]
        status = lindi.get(row[8]) if row[8] is not None else None
        state = shared.get(asset_id)
        if state is not None:  # another dandiset's Zarr: the state it pinned
            size = state.size
        elif zarr_id is not None and not version.is_draft:
            pinned = (metadata or {}).get("contentSize", 0)
            size = pinned if isinstance(pinned, int) else 0
        else:
            size = int(blob_size if zarr_id is None else zarr_size or 0)
        rest = path[len(prefix) :]
        head, sep, _tail = rest.partition("/")
        if sep:
            totals = folders.setdefault(head, [0, 0])
            totals[0] += 1
            totals[1] += size
        else:
            kind = "zarr" if zarr_id is not None else "blob"
            public = blob_key is not None and not (blob_embargoed or dandiset.embargoed)
            has_lindi = status is not None and status.has_file
            ready = has_lindi and status is not None and status.state == LindiState.READY
            source = lindi_files.lindi_key(row[8]) if ready and row[8] else blob_key
            viewer = neurosift_url(archive.store.public_url(source)) if public else None
            shown = viewer if viewer is not None and is_nwb(rest) else None
            assets.append(
                TreeAsset(
                    asset_id,
                    rest,
                    path,
                    size,
                    kind,
                    zarr_id,
                    shown,
                    lindi_url=f"/api/assets/{asset_id}/lindi.json" if has_lindi else None,
                    lindi_state=status.text if has_lindi and status is not None else None,
                    shared_checksum=state.checksum if state is not None else None,
                    zarr_url=zarr_link(zarr_id, state) if zarr_id is not None else None,
                )
            )
    return AssetTree(
        dandiset=dandiset.identifier,
        version=version.version,
        location=location,
        folders=[TreeFolder(n, prefix + n, c, s) for n, (c, s) in sorted(folders.items())],
        assets=assets,
        partial=partial,
    )

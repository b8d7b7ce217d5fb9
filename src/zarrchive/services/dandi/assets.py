"""Assets: the files of a version, each a blob or a Zarr, with JSON metadata.

A Zarr asset is an asset like any other; its metadata says what it is
(``encodingFormat: application/x-zarr``) and carries the Zarr's checksum and
size.  In the draft these fields are computed from the Zarr (or blob) row each
time the asset is served, so they follow every upload; a published asset
serves the values pinned at publication.
"""

from __future__ import annotations

import fnmatch
import re
import uuid
from dataclasses import dataclass
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from zarrchive.db.models import Asset, Blob, Dandiset, SharedZarrMode, Version, Zarr, utcnow
from zarrchive.errors import InvalidInput, NotFound
from zarrchive.paths import validate_path
from zarrchive.services.dandi import changes, trash
from zarrchive.services.dandi.asset_views import (
    ETAG_DIGEST as ETAG_DIGEST,
)
from zarrchive.services.dandi.asset_views import (
    ZARR_DIGEST as ZARR_DIGEST,
)
from zarrchive.services.dandi.asset_views import (
    ZARR_MEDIA_TYPE as ZARR_MEDIA_TYPE,
)
from zarrchive.services.dandi.asset_views import (
    AssetInfo as AssetInfo,
)
from zarrchive.services.dandi.asset_views import (
    asset_info as asset_info,
)
from zarrchive.services.dandi.asset_views import (
    computed_metadata as computed_metadata,
)
from zarrchive.services.dandi.asset_views import (
    get_asset_by_id as get_asset_by_id,
)
from zarrchive.services.dandi.asset_views import (
    parse_asset_id as parse_asset_id,
)
from zarrchive.services.dandi.asset_views import (
    served_metadata as served_metadata,
)
from zarrchive.services.dandi.blobs import blob_url, may_read_blob
from zarrchive.services.dandi.dandisets import get_dandiset
from zarrchive.services.dandi.lindi_files import request_lindi
from zarrchive.services.dandi.versions import find_version, require_draft
from zarrchive.services.identity.auth import Caller, require_owner
from zarrchive.services.runtime import Archive
from zarrchive.services.zarr_engine import shared_zarrs
from zarrchive.services.zarr_engine.snapshots import published_asset_checksum
from zarrchive.services.zarr_engine.zarrs import get_zarr

MAX_PAGE_SIZE = 1000
ASSET_ORDERINGS = ("path", "created", "modified")


@dataclass(frozen=True)
class AssetPage:
    count: int
    results: list[AssetInfo]


@dataclass(frozen=True)
class AssetPath:
    """One entry of a folder of a version (DANDI's ``assets/paths/``)."""

    path: str
    aggregate_files: int
    aggregate_size: int
    asset_id: str | None


def _metadata_path(metadata: object) -> tuple[dict[str, Any], str]:
    if not isinstance(metadata, dict):
        raise InvalidInput("the asset's metadata must be a JSON object with a 'path'")
    if "path" not in metadata:
        raise InvalidInput("the asset's metadata has no 'path': give the file's path")
    path = validate_path(metadata["path"])
    return {**metadata, "path": path}, path


@dataclass(frozen=True)
class _Share:
    """An asset's content is another dandiset's Zarr, in this state."""

    zarr: Zarr
    mode: SharedZarrMode
    checksum: str


def _check_content(
    session: Session,
    user: Caller | None,
    dandiset: Dandiset,
    version: Version,
    blob_id: str | None,
    zarr_id: str | None,
    asset_id: str | None,
    zarr_checksum: str | None = None,
) -> _Share | None:
    """The blob or Zarr may become the content of an asset of *version* (else 4xx);
    a Zarr of another dandiset: the state the asset takes of it
    (:func:`~zarrchive.services.zarr_engine.shared_zarrs.check_reference`).

    The caller must be allowed to read it (:func:`~zarrchive.services.dandi.blobs.may_read_blob`,
    a Zarr's dandiset): someone else's embargoed blob or Zarr is answered 404 as if it did
    not exist, whatever its id tells.
    """
    if (blob_id is None) == (zarr_id is None):
        raise InvalidInput("give exactly one of 'blob_id' and 'zarr_id'")
    if zarr_checksum is not None and zarr_id is None:
        raise InvalidInput("'zarr_checksum' names a state of the Zarr 'zarr_id': give both")
    if zarr_id is not None:
        zarr = get_zarr(session, user, zarr_id)
        share = None
        if zarr.dandiset_id != dandiset.id:
            mode, checksum = shared_zarrs.check_reference(
                session, user, dandiset, zarr, zarr_checksum
            )
            share = _Share(zarr, mode, checksum)
        else:
            if zarr_checksum is not None:
                raise InvalidInput(
                    f"Zarr {zarr.id} belongs to dandiset {dandiset.identifier}: its assets "
                    "read it live ('zarr_checksum' pins a Zarr of another dandiset)"
                )
            trash.refuse_trashed_zarr(session, zarr.id)
        # an empty Zarr may be an asset: dandi-cli creates the asset of a new Zarr before it
        # uploads its files (dandischema's validation refuses to publish an empty one)
        other = session.scalar(
            select(Asset.path).where(
                Asset.version_id == version.id, Asset.zarr_id == zarr.id, Asset.id != asset_id
            )
        )
        if other is not None:
            raise InvalidInput(
                f"Zarr {zarr.id} is already the asset {other!r} of this version: "
                "a Zarr is one asset"
            )
        return share
    assert blob_id is not None
    try:
        blob = session.get(Blob, str(uuid.UUID(blob_id)))
    except (ValueError, AttributeError, TypeError):
        blob = None
    if blob is None or not may_read_blob(session, user, blob):
        raise NotFound(f"no blob {blob_id!r}: upload it first (POST /api/uploads/initialize/)")
    if blob.embargoed and not dandiset.embargoed:
        raise InvalidInput(
            f"blob {blob.id} is embargoed and dandiset {dandiset.identifier} is public: "
            "upload the file again for this dandiset"
        )
    return None


def _check_path_free(
    session: Session, version: Version, path: str, asset_id: str | None = None
) -> None:
    query = select(Asset.id).where(Asset.version_id == version.id, Asset.path == path)
    if asset_id is not None:
        query = query.where(Asset.id != asset_id)
    if session.scalar(query) is not None:
        raise InvalidInput(f"version {version.version} already has an asset at {path!r}")


def _writable_version(
    session: Session, user: Caller | None, dandiset_id: str, version: str, what: str
) -> tuple[Dandiset, Version]:
    dandiset = get_dandiset(session, user, dandiset_id)
    require_owner(user, dandiset)
    found = find_version(session, dandiset, version, lock=True)
    require_draft(found, dandiset, what)
    return dandiset, found


def _flush(session: Session, version: Version, path: str) -> None:
    try:
        with session.begin_nested():
            session.flush()
    except IntegrityError as exc:  # a concurrent request took the path
        raise InvalidInput(f"version {version.version} already has an asset at {path!r}") from exc


def create_asset(
    session: Session,
    user: Caller | None,
    dandiset_id: str,
    version: str,
    metadata: object,
    *,
    blob_id: str | None = None,
    zarr_id: str | None = None,
    zarr_checksum: str | None = None,
) -> AssetInfo:
    """A new asset of the draft pointing at a blob or a Zarr of the same dandiset, or at a
    published state of another dandiset's Zarr (*zarr_checksum*, or its newest: see
    :mod:`zarrchive.services.zarr_engine.shared_zarrs`)."""
    dandiset, found = _writable_version(session, user, dandiset_id, version, "add assets to")
    clean, path = _metadata_path(metadata)
    share = _check_content(session, user, dandiset, found, blob_id, zarr_id, None, zarr_checksum)
    _check_path_free(session, found, path)
    asset = Asset(
        id=str(uuid.uuid4()),
        version_id=found.id,
        path=path,
        metadata_=clean,
        blob_id=str(uuid.UUID(blob_id)) if blob_id else None,
        zarr_id=str(uuid.UUID(zarr_id)) if zarr_id else None,
    )
    session.add(asset)
    _flush(session, found, path)
    if share is not None:
        shared_zarrs.record(session, asset.id, dandiset, share.zarr, share.mode, share.checksum)
    if asset.blob_id is not None:
        request_lindi(session, asset.blob_id)  # its LINDI file, if HDF5 (in the background)
    found.modified_at = utcnow()
    session.flush()
    session.refresh(asset)
    changes.asset_added(session, user, dandiset, found, asset)
    return asset_info(asset, dandiset)


def _find_asset(session: Session, version: Version, asset_id: str) -> Asset:
    asset = session.scalar(
        select(Asset).where(Asset.id == parse_asset_id(asset_id), Asset.version_id == version.id)
    )
    if asset is None:
        raise NotFound(f"version {version.version} has no asset {asset_id}")
    return asset


def update_asset(
    session: Session,
    user: Caller | None,
    dandiset_id: str,
    version: str,
    asset_id: str,
    metadata: object,
    *,
    blob_id: str | None = None,
    zarr_id: str | None = None,
    zarr_checksum: str | None = None,
) -> AssetInfo:
    """Replace an asset's metadata (and path); with a blob or Zarr id, its content too."""
    dandiset, found = _writable_version(session, user, dandiset_id, version, "change assets of")
    asset = _find_asset(session, found, asset_id)
    clean, path = _metadata_path(metadata)
    if zarr_checksum is not None and zarr_id is None:
        raise InvalidInput("'zarr_checksum' names a state of the Zarr 'zarr_id': give both")
    if blob_id is not None or zarr_id is not None:
        share = _check_content(
            session, user, dandiset, found, blob_id, zarr_id, asset.id, zarr_checksum
        )
        shared_zarrs.forget(session, asset.id)
        if share is not None:
            shared_zarrs.record(session, asset.id, dandiset, share.zarr, share.mode, share.checksum)
        if asset.blob is not None:  # let go of: gc's grace period starts (blob_gc.py)
            asset.blob.touched_at = utcnow()
        asset.blob_id = str(uuid.UUID(blob_id)) if blob_id else None
        asset.zarr_id = str(uuid.UUID(zarr_id)) if zarr_id else None
    _check_path_free(session, found, path, asset.id)
    asset.path = path
    asset.metadata_ = clean
    asset.modified_at = found.modified_at = utcnow()
    _flush(session, found, path)
    if blob_id is not None and asset.blob_id is not None:
        request_lindi(session, asset.blob_id)  # its LINDI file, if HDF5 (in the background)
    session.refresh(asset)
    changes.asset_updated(session, user, dandiset, found, asset)
    return asset_info(asset, dandiset)


def delete_asset(
    session: Session, user: Caller | None, dandiset_id: str, version: str, asset_id: str
) -> None:
    """Move an asset of the draft to the dandiset's trash (:mod:`zarrchive.services.dandi.trash`:
    restorable for ``ZARRCHIVE_TRASH_DAYS``; its blob or Zarr stays)."""
    dandiset, found = _writable_version(session, user, dandiset_id, version, "remove assets from")
    asset = _find_asset(session, found, asset_id)
    changes.asset_removed(session, user, dandiset, found, asset)
    trash.trash_asset(session, user, asset)
    found.modified_at = utcnow()
    session.flush()


def get_asset(
    session: Session, user: Caller | None, dandiset_id: str, version: str, asset_id: str
) -> AssetInfo:
    dandiset = get_dandiset(session, user, dandiset_id)
    found = find_version(session, dandiset, version)
    return asset_info(_find_asset(session, found, asset_id), dandiset)


def asset_info_by_id(session: Session, user: Caller | None, asset_id: str) -> AssetInfo:
    asset = get_asset_by_id(session, user, asset_id)
    dandiset = session.get(Dandiset, asset.version.dandiset_id)
    assert dandiset is not None
    return asset_info(asset, dandiset)


@dataclass(frozen=True)
class AssetDownload:
    """Where an asset's content is read: a blob's URL, or else its Zarr."""

    #: The blob's URL (presigned when embargoed).
    url: str | None
    zarr_id: str | None
    #: The checksum a published Zarr asset pins as a snapshot (see
    #: :func:`~zarrchive.services.zarr_engine.snapshots.published_asset_checksum`).
    snapshot: str | None


def download_target(archive: Archive, user: Caller | None, asset_id: str) -> AssetDownload:
    """Where to download any asset *user* may read, by id alone."""
    with archive.db.session() as session:
        asset = get_asset_by_id(session, user, asset_id)
        if asset.blob is not None:
            url = blob_url(archive, asset.blob.key, embargoed=asset.blob.embargoed)
            return AssetDownload(url, None, None)
        shared = shared_zarrs.shared_state(asset)
        if shared is not None:  # the state it pinned of another dandiset's Zarr
            return AssetDownload(None, asset.zarr_id, shared.snapshot)
        pinned = published_asset_checksum(session, asset.id)
        return AssetDownload(None, asset.zarr_id, pinned[1] if pinned is not None else None)


def _glob_regex(pattern: str) -> re.Pattern[str]:
    """DANDI's ``glob``: ``*`` any characters (``/`` too), ``?`` one, ``[...]`` a set."""
    return re.compile(fnmatch.translate(pattern), re.DOTALL)


def list_assets(
    session: Session,
    user: Caller | None,
    dandiset_id: str,
    version: str,
    *,
    path: str | None = None,
    glob: str | None = None,
    order: str | None = None,
    offset: int = 0,
    limit: int = 100,
) -> AssetPage:
    """A page of the version's assets: *path* keeps those whose path starts with it, *glob*
    those it matches; ordered by DANDI's *order* (``path`` by default, ``created``,
    ``modified``, ``-`` to reverse)."""
    if not 1 <= limit <= MAX_PAGE_SIZE:
        raise InvalidInput(f"page_size must be between 1 and {MAX_PAGE_SIZE}")
    dandiset = get_dandiset(session, user, dandiset_id)
    found = find_version(session, dandiset, version)
    condition = Asset.version_id == found.id
    if path:
        # substr, not LIKE: exact and case-sensitive on every database
        condition = condition & (func.substr(Asset.path, 1, len(path)) == path)
    field = (order or "path").lstrip("-")
    if field not in ASSET_ORDERINGS:
        raise InvalidInput(
            f"unknown order {order!r}: use {', '.join(ASSET_ORDERINGS)} ('-' to reverse)"
        )
    column: Any = {"path": Asset.path, "created": Asset.created_at, "modified": Asset.modified_at}[
        field
    ]
    reverse = bool(order and order.startswith("-"))
    query = (
        select(Asset).where(condition).order_by(column.desc() if reverse else column, Asset.path)
    )
    if glob:  # matched here (ids, in order), then the page's rows are loaded
        regex = _glob_regex(glob)
        ids = [
            asset_id
            for asset_id, asset_path in session.execute(
                query.with_only_columns(Asset.id, Asset.path)
            )
            if regex.match(asset_path)
        ]
        wanted = ids[offset : offset + limit]
        loaded = {a.id: a for a in session.scalars(select(Asset).where(Asset.id.in_(wanted)))}
        page = [asset_info(loaded[i], dandiset) for i in wanted]
        return AssetPage(count=len(ids), results=page)
    count = session.scalar(select(func.count()).select_from(Asset).where(condition)) or 0
    rows = session.scalars(query.offset(offset).limit(limit)).all()
    return AssetPage(count=int(count), results=[asset_info(a, dandiset) for a in rows])


def list_paths(
    session: Session, user: Caller | None, dandiset_id: str, version: str, path_prefix: str
) -> list[AssetPath]:
    """The entries of the folder *path_prefix* (``""``: the root) of a version: files with
    their asset, folders with the files and bytes under them, ordered by path."""
    dandiset = get_dandiset(session, user, dandiset_id)
    found = find_version(session, dandiset, version)
    prefix = path_prefix.strip("/")
    start = f"{prefix}/" if prefix else ""
    condition = Asset.version_id == found.id
    if start:
        condition = condition & (func.substr(Asset.path, 1, len(start)) == start)
    entries: dict[str, list[Any]] = {}
    for asset in session.scalars(select(Asset).where(condition).order_by(Asset.path)):
        rest = asset.path[len(start) :]
        head, _, tail = rest.partition("/")
        size = int(served_metadata(asset).get("contentSize") or 0)
        entry = entries.setdefault(start + head, [0, 0, None])
        entry[0] += 1
        entry[1] += size
        if not tail:
            entry[2] = asset.id
    if prefix and not entries:
        raise NotFound(f"version {found.version} has no folder {prefix!r}")
    return [AssetPath(p, n, size, asset_id) for p, (n, size, asset_id) in entries.items()]

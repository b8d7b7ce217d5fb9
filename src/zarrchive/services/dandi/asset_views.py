"""What an asset is as the services show it: :class:`AssetInfo`, its served metadata (the
fields that follow the content computed in the draft, pinned once published), asset ids and
the lookup of an asset by id alone.

No other service is needed here, so the modules that list, trash or restore assets share it
without importing each other."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy.orm import Session

from zarrchive.db.models import Asset, Dandiset
from zarrchive.errors import NotFound
from zarrchive.identifiers import canonical_uuid
from zarrchive.services.identity.auth import Caller, require_read
from zarrchive.services.zarr_engine.shared_zarrs import SharedState, shared_state

ZARR_MEDIA_TYPE = "application/x-zarr"
ZARR_DIGEST = "dandi:dandi-zarr-checksum"
MD5_DIGEST = "dandi:md5"
ETAG_DIGEST = "dandi:dandi-etag"


@dataclass(frozen=True)
class AssetInfo:
    asset_id: str
    path: str
    dandiset: str
    version: str
    blob_id: str | None
    zarr_id: str | None
    size: int
    metadata: dict[str, Any]
    created: datetime
    modified: datetime
    #: the state of another dandiset's Zarr the asset reads (``None``: a blob, or a Zarr of
    #: its own dandiset): see :mod:`zarrchive.services.zarr_engine.shared_zarrs`
    shared: SharedState | None = None


def computed_metadata(asset: Asset) -> dict[str, Any]:
    """The stored metadata with the fields that follow the content filled in from it (a
    shared Zarr's: the state the asset pinned, never the Zarr's live one)."""
    metadata = dict(asset.metadata_ or {})
    metadata["path"] = asset.path
    shared = shared_state(asset) if asset.zarr is not None else None
    if shared is not None:
        metadata["encodingFormat"] = ZARR_MEDIA_TYPE
        metadata["contentSize"] = shared.size
        metadata["digest"] = {ZARR_DIGEST: shared.checksum}
    elif asset.zarr is not None:
        metadata["encodingFormat"] = ZARR_MEDIA_TYPE
        metadata["contentSize"] = asset.zarr.size
        metadata["digest"] = {ZARR_DIGEST: asset.zarr.checksum}
    elif asset.blob is not None:
        metadata["contentSize"] = asset.blob.size
        digest = {}
        if asset.blob.etag is not None:
            digest[ETAG_DIGEST] = asset.blob.etag
        if asset.blob.md5 is not None:
            digest[MD5_DIGEST] = asset.blob.md5
        if asset.blob.sha256 is not None:
            digest["dandi:sha2-256"] = asset.blob.sha256
        metadata["digest"] = digest
    return metadata


def served_metadata(asset: Asset) -> dict[str, Any]:
    """Draft assets: computed now; published assets: as pinned at publication."""
    if asset.version.is_draft:
        return computed_metadata(asset)
    return dict(asset.metadata_ or {})


def asset_info(asset: Asset, dandiset: Dandiset) -> AssetInfo:
    metadata = served_metadata(asset)
    size = metadata.get("contentSize")
    return AssetInfo(
        asset_id=asset.id,
        path=asset.path,
        dandiset=dandiset.identifier,
        version=asset.version.version,
        blob_id=asset.blob_id,
        zarr_id=asset.zarr_id,
        size=int(size) if isinstance(size, int) else 0,
        metadata=metadata,
        created=asset.created_at,
        modified=asset.modified_at,
        shared=shared_state(asset),
    )


def parse_asset_id(asset_id: str) -> str:
    """The canonical form of an asset id."""
    canonical = canonical_uuid(asset_id)
    if canonical is None:
        raise NotFound(f"no asset {asset_id!r}: asset ids are UUIDs")
    return canonical


def get_asset_by_id(session: Session, user: Caller | None, asset_id: str) -> Asset:
    """Any asset *user* may read, by id alone."""
    asset = session.get(Asset, parse_asset_id(asset_id))
    if asset is None:
        raise NotFound(f"no asset {asset_id}")
    dandiset = session.get(Dandiset, asset.version.dandiset_id)
    if dandiset is None:
        raise NotFound(f"no asset {asset_id}")
    require_read(user, dandiset, f"no asset {asset_id}")
    return asset

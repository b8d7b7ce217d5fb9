"""Where an upload goes: the Zarr a local directory maps to in a dandiset's draft, and the
draft's asset that makes it part of the dandiset."""

from __future__ import annotations

from typing import NamedTuple

from zarrchive.client.api import ApiClient, ZarrInfo
from zarrchive.errors import ApiError, InvalidInput


class EnsuredAsset(NamedTuple):
    """The draft's asset of an uploaded Zarr, and whether the upload created it."""

    asset_id: str
    created: bool


def find_or_create_zarr(
    client: ApiClient, dandiset: str, path: str, *, create: bool = True
) -> tuple[ZarrInfo | None, bool]:
    """The Zarr at *path* in *dandiset*'s draft and whether it was just created.

    The Zarr of the draft's asset at *path*; else (no asset yet: a first upload,
    perhaps interrupted) the dandiset's Zarr named *path*; else a new Zarr named *path*.  The
    asset itself is created once the upload is complete (:func:`ensure_asset`).
    """
    asset = client.find_asset(dandiset, path)
    if asset is not None:
        if asset.zarr_id is None:
            raise InvalidInput(
                f"the asset {path!r} of dandiset {dandiset} is a file, not a Zarr: "
                "choose another --path"
            )
        return client.get_zarr(asset.zarr_id), False
    found = client.find_zarr(dandiset, path)
    if found is not None or not create:
        return found, False
    try:
        return client.create_zarr(path, dandiset), True
    except ApiError as exc:
        # Someone (or our own retried request) created it meanwhile.
        if exc.status_code in (400, 409):
            found = client.find_zarr(dandiset, path)
            if found is not None:
                return found, False
        raise


def ensure_asset(client: ApiClient, dandiset: str, path: str, zarr_id: str) -> EnsuredAsset:
    """The draft's asset at *path* for the Zarr, created if absent (and whether it was)."""
    asset = client.find_asset(dandiset, path)
    if asset is not None:
        return EnsuredAsset(asset.asset_id, False)
    return EnsuredAsset(client.create_asset(dandiset, path, zarr_id=zarr_id).asset_id, True)


__all__ = ["EnsuredAsset", "ensure_asset", "find_or_create_zarr"]

"""Job modules moved since an earlier release (pure).

A job is named by its import string (``"package.module:function"``), and RQ keeps queued
jobs in Redis across an upgrade: a job queued before ``zarrchive.services`` was laid out by
concept (``zarrchive.services.manifests`` is now ``zarrchive.services.zarr_engine.manifests``)
still runs after it.
"""

from __future__ import annotations

from collections.abc import Mapping

_SERVICES = "zarrchive.services."

#: a module of ``zarrchive.services`` before the layout by concept -> its package now
MOVED_SERVICES: Mapping[str, str] = {
    "asset_views": "dandi",
    "assets": "dandi",
    "audit": "dandi",
    "audit_trail": "dandi",
    "blob_gc": "dandi",
    "blobs": "dandi",
    "changes": "dandi",
    "dandiset_roles": "dandi",
    "dandisets": "dandi",
    "datacite": "dandi",
    "doi_metadata": "dandi",
    "dois": "dandi",
    "embargo": "dandi",
    "embargo_dates": "dandi",
    "lindi_files": "dandi",
    "metadata_limits": "dandi",
    "owners": "dandi",
    "publish": "dandi",
    "reviewers": "dandi",
    "search": "dandi",
    "trash": "dandi",
    "usage": "dandi",
    "validation": "dandi",
    "validation_jobs": "dandi",
    "versions": "dandi",
    "fsck": "zarr_engine",
    "manifest_changes": "zarr_engine",
    "manifests": "zarr_engine",
    "node_cache": "zarr_engine",
    "recorded_listing": "zarr_engine",
    "references": "zarr_engine",
    "shared_zarrs": "zarr_engine",
    "snapshots": "zarr_engine",
    "tree_updater": "zarr_engine",
    "uploads": "zarr_engine",
    "version_gc": "zarr_engine",
    "zarr_history": "zarr_engine",
    "zarr_info": "zarr_engine",
    "zarr_restore": "zarr_engine",
    "zarrs": "zarr_engine",
    "arrays": "views",
    "catalog": "views",
    "chunk_guard": "views",
    "codec_names": "views",
    "dandiset_summary": "views",
    "ngff": "views",
    "open_with": "views",
    "shard_index": "views",
    "thumbnail": "views",
    "accounts": "identity",
    "api_keys": "identity",
    "auth": "identity",
    "identities": "identity",
    "oidc": "identity",
    "web_sessions": "identity",
}


def current_module(module_name: str) -> str:
    """The module that *module_name* is now: the same name unless it names a moved module of
    ``zarrchive.services`` (or a module inside a moved package)."""
    if not module_name.startswith(_SERVICES):
        return module_name
    first, dot, rest = module_name[len(_SERVICES) :].partition(".")
    package = MOVED_SERVICES.get(first)
    if package is None:
        return module_name
    return f"{_SERVICES}{package}.{first}{dot}{rest}"

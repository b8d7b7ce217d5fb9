"""The archive's S3 key layout (exact, from the spec).

- Zarr objects: ``zarr/{zarr_id}/{path}``
- tree-hash nodes: ``zarr_checksums/{zarr_id}/{dir}/.checksum`` and
  ``zarr_checksums/{zarr_id}/.checksum`` for the root
- manifests: ``zarr-manifest/{zarr_id}/{checksum}.json``
"""

from __future__ import annotations

from zarrchive.manifest import MANIFEST_PREFIX


def zarr_prefix(zarr_id: str) -> str:
    return f"zarr/{zarr_id}/"


def zarr_object_key(zarr_id: str, path: str) -> str:
    return f"zarr/{zarr_id}/{path}"


def checksum_prefix(zarr_id: str) -> str:
    return f"zarr_checksums/{zarr_id}/"


def checksum_node_key(zarr_id: str, directory: str) -> str:
    """Key of the ``.checksum`` node of *directory* (``""`` for the root)."""
    if directory:
        return f"zarr_checksums/{zarr_id}/{directory}/.checksum"
    return f"zarr_checksums/{zarr_id}/.checksum"


def manifest_prefix(zarr_id: str) -> str:
    """Prefix of a Zarr's manifests (the key itself: :func:`zarrchive.manifest.manifest_key`)."""
    return f"{MANIFEST_PREFIX}{zarr_id}/"


def blob_key(blob_id: str) -> str:
    """Key of a blob (a regular file's content): ``blobs/{id[0:3]}/{id[3:6]}/{id}``."""
    return f"blobs/{blob_id[0:3]}/{blob_id[3:6]}/{blob_id}"

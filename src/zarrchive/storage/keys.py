"""The archive's S3 key layout (exact, from the spec).

- Zarr objects: ``zarr/{zarr_id}/{path}``
- tree-hash nodes: ``zarr_checksums/{zarr_id}/{dir}/.checksum`` and
  ``zarr_checksums/{zarr_id}/.checksum`` for the root
- manifests: ``zarr-manifest/{zarr_id}/{checksum}.json``
- upload staging (ours, outside the Zarr): ``zarr-staging/{zarr_id}/{batch_uid}/{path}``.
  Presigned URLs only ever write here; ``complete`` copies the verified objects into
  ``zarr/{zarr_id}/{path}`` server-side, so no URL, replayed or late, can change a Zarr.
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


STAGING_ROOT = "zarr-staging/"


def staging_zarr_prefix(zarr_id: str) -> str:
    """Prefix of every upload batch's staging area of a Zarr."""
    return f"{STAGING_ROOT}{zarr_id}/"


def staging_prefix(zarr_id: str, batch_uid: str) -> str:
    """Prefix of one batch's staging area (its objects, exactly: it ends with ``/``)."""
    return f"{STAGING_ROOT}{zarr_id}/{batch_uid}/"


def staging_object_key(zarr_id: str, batch_uid: str, path: str) -> str:
    """Where a batch's client PUTs *path* before ``complete`` copies it into place."""
    return f"{STAGING_ROOT}{zarr_id}/{batch_uid}/{path}"


#: S3's limit on a key, in UTF-8 bytes.
MAX_KEY_BYTES = 1024
#: The longest Zarr id (a UUID) and batch uid (32 hex digits) the archive mints.
_LONGEST_ZARR_ID = "0" * 36
_LONGEST_BATCH_UID = "0" * 32


def longest_derived_key_bytes(path: str) -> int:
    """UTF-8 length of the longest S3 key the archive derives from the Zarr entry *path*:
    its object, its staging object and the ``.checksum`` node of each parent directory."""
    directory = path.rpartition("/")[0]
    keys = (
        zarr_object_key(_LONGEST_ZARR_ID, path),
        staging_object_key(_LONGEST_ZARR_ID, _LONGEST_BATCH_UID, path),
        checksum_node_key(_LONGEST_ZARR_ID, directory),
    )
    return max(len(k.encode("utf-8")) for k in keys)

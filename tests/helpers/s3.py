"""S3 stores of the test SeaweedFS, and the version history of a key."""

from __future__ import annotations

from zarrchive.storage.objects import ObjectStore, oldest_first
from zarrchive.storage.protocol import ObjectStoreProtocol
from zarrchive.storage.seaweedfs import SeaweedFS


def object_store(seaweedfs: SeaweedFS, bucket: str) -> ObjectStore:
    """An :class:`ObjectStore` of *bucket* on the test SeaweedFS, with its credentials."""
    return ObjectStore(
        endpoint_url=seaweedfs.endpoint_url,
        bucket=bucket,
        access_key_id=seaweedfs.access_key_id,
        secret_access_key=seaweedfs.secret_access_key,
    )


def on_s3(store: ObjectStoreProtocol) -> ObjectStore:
    """*store* as the S3 store it is in a test on SeaweedFS (for its boto3 clients and pools:
    the archive's own type is :class:`ObjectStoreProtocol`)."""
    assert isinstance(store, ObjectStore), f"{store!r} is not the S3 store"
    return store


def object_history(store: ObjectStoreProtocol, key: str) -> list[bytes | None]:
    """Contents of *key*'s versions oldest first (None for a delete marker)."""
    out: list[bytes | None] = []
    for version in oldest_first([v for v in store.iter_versions(key) if v.key == key]):
        if version.is_delete_marker:
            out.append(None)
        else:
            out.append(b"".join(store.iter_content(key, version.version_id)))
    return out

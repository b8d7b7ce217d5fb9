"""S3 stores of the test SeaweedFS."""

from __future__ import annotations

from zarrchive.storage.objects import ObjectStore
from zarrchive.storage.seaweedfs import SeaweedFS


def object_store(seaweedfs: SeaweedFS, bucket: str) -> ObjectStore:
    """An :class:`ObjectStore` of *bucket* on the test SeaweedFS, with its credentials."""
    return ObjectStore(
        endpoint_url=seaweedfs.endpoint_url,
        bucket=bucket,
        access_key_id=seaweedfs.access_key_id,
        secret_access_key=seaweedfs.secret_access_key,
    )

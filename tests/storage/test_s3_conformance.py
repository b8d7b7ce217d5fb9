"""The conformance suite on the S3 implementation (boto3), against a real SeaweedFS."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest

from tests.helpers.s3 import object_store
from tests.storage.conformance import ObjectStoreTests
from zarrchive.storage.objects import ObjectStore
from zarrchive.storage.seaweedfs import SeaweedFS, free_port


class TestS3ObjectStore(ObjectStoreTests):
    @pytest.fixture
    def store(self, seaweedfs: SeaweedFS, fresh_bucket: str) -> Iterator[ObjectStore]:
        store = object_store(seaweedfs, fresh_bucket)
        yield store
        store.close()

    @pytest.fixture
    def unreachable_store(self) -> Iterator[ObjectStore]:
        store = ObjectStore(
            endpoint_url=f"http://127.0.0.1:{free_port()}",  # nothing listens there
            bucket="nowhere",
            access_key_id="k",
            secret_access_key="s",
        )
        yield store
        store.close()

    @pytest.fixture
    def missing_bucket_store(self, seaweedfs: SeaweedFS) -> Iterator[ObjectStore]:
        store = object_store(seaweedfs, f"zmissing-{uuid.uuid4().hex[:12]}")
        yield store
        store.close()

    @pytest.fixture
    def locked_store(self, seaweedfs: SeaweedFS) -> Iterator[ObjectStore]:
        """A bucket with S3 Object Lock: a legal hold makes S3 refuse to delete a version."""
        name = f"zlock-{uuid.uuid4().hex[:12]}"
        client: Any = seaweedfs.client()
        client.create_bucket(Bucket=name, ObjectLockEnabledForBucket=True)
        store = object_store(seaweedfs, name)
        yield store
        store.close()

    @contextmanager
    def refusing(self, store: ObjectStore, key: str, version_id: str) -> Iterator[None]:  # type: ignore[override]
        client = store.client
        client.put_object_legal_hold(
            Bucket=store.bucket, Key=key, VersionId=version_id, LegalHold={"Status": "ON"}
        )
        try:
            yield
        finally:
            client.put_object_legal_hold(
                Bucket=store.bucket, Key=key, VersionId=version_id, LegalHold={"Status": "OFF"}
            )

"""The conformance suite on the in-memory store (its URLs answered by its own HTTP server)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import AbstractContextManager

import pytest

from tests.storage.conformance import ObjectStoreTests
from zarrchive.storage.memory import MemoryObjectStore
from zarrchive.storage.protocol import ObjectStoreProtocol

pytestmark = pytest.mark.unit


class TestMemoryObjectStore(ObjectStoreTests):
    @pytest.fixture
    def store(self) -> Iterator[MemoryObjectStore]:
        store = MemoryObjectStore("zpub-memory")
        yield store
        store.close()

    @pytest.fixture
    def unreachable_store(self) -> Iterator[MemoryObjectStore]:
        store = MemoryObjectStore("nowhere", reachable=False)
        yield store
        store.close()

    @pytest.fixture
    def missing_bucket_store(self) -> Iterator[MemoryObjectStore]:
        store = MemoryObjectStore("zmissing", exists=False)
        yield store
        store.close()

    @pytest.fixture
    def locked_store(self) -> Iterator[MemoryObjectStore]:
        store = MemoryObjectStore("zlock")
        yield store
        store.close()

    def refusing(
        self, store: ObjectStoreProtocol, key: str, version_id: str
    ) -> AbstractContextManager[None]:
        assert isinstance(store, MemoryObjectStore)
        return store.holding(key, version_id)
